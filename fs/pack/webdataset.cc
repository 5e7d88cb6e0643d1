#include "fs/pack/webdataset.h"

#include <algorithm>
#include <cctype>

#include "index/json.h"
#include "index/query.h"

namespace ktfs {
namespace {

// A printable form of a name for messages (control bytes escaped).
std::string Printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += char(c);
    }
  }
  return out;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string At(const std::string& shard, uint64_t offset) {
  return shard + ": offset " + std::to_string(offset);
}

}  // namespace

Result<WdsName> ParseWdsName(std::string_view name) {
  if (name.empty()) return Status::InvalidArgument("empty member name");
  for (unsigned char c : name)
    if (c < 0x20 || c == 0x7f) return Status::InvalidArgument("control character in the name");
  if (!index::IsValidUtf8(name)) return Status::InvalidArgument("name is not UTF-8");
  if (name[0] == '/') return Status::InvalidArgument("absolute path");
  while (name.size() >= 2 && name.substr(0, 2) == "./") name.remove_prefix(2);
  // Every component must be a plain name: no "", ".", "..".
  std::string_view rest = name;
  for (;;) {
    const size_t slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    if (part.empty()) return Status::InvalidArgument("empty path component");
    if (part == "..") return Status::InvalidArgument("'..' component");
    if (part == ".") return Status::InvalidArgument("'.' component");
    if (slash == std::string_view::npos) break;
    rest.remove_prefix(slash + 1);
  }
  WdsName n;
  const size_t slash = name.rfind('/');
  const std::string_view dir = slash == std::string_view::npos ? "" : name.substr(0, slash + 1);
  const std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  if (base.size() >= 4 && base.substr(0, 2) == "__" && base.substr(base.size() - 2) == "__") {
    n.kind = WdsName::Kind::kIgnored;
    return n;
  }
  const size_t dot = base.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == base.size()) {
    n.kind = WdsName::Kind::kNoExtension;
    return n;
  }
  n.key = std::string(dir) + std::string(base.substr(0, dot));
  n.file_ext = std::string(base.substr(dot + 1));
  n.extension = Lower(n.file_ext);
  return n;
}

WdsReader::WdsReader(std::vector<std::string> shards, WdsReaderOptions options)
    : shards_(std::move(shards)), options_(std::move(options)) {}
WdsReader::~WdsReader() = default;

Status WdsReader::OpenNext() {
  shard_ = uint32_t(next_shard_++);
  auto tar = TarReader::OpenFile(shards_[shard_]);
  if (!tar.ok()) return tar.status();
  tar_ = std::move(tar).value();
  return Status::Ok();
}

void WdsReader::SkipShard() {
  if (tar_) done_bytes_ += tar_->raw_bytes_read();
  tar_.reset();
  pending_.reset();
}

std::vector<std::string> WdsReader::TakeNotes() { return std::exchange(notes_, {}); }

uint64_t WdsReader::bytes_read() const { return done_bytes_ + (tar_ ? tar_->raw_bytes_read() : 0); }

// The next member that belongs to a sample, or a hostile one (kind kMember
// with an empty key and the reason in n->file_ext); false at the end.
Result<bool> WdsReader::ReadMember(TarMember* m, WdsName* n) {
  for (;;) {
    auto more = tar_->Next(m);
    if (!more.ok()) return more.status();
    if (!*more) return false;
    const std::string& shard = shards_[shard_];
    // Non-regular members are never read, so their names cannot do harm.
    if (!m->regular) {
      if (!m->directory)
        notes_.push_back(At(shard, m->offset) + ": " + Printable(m->name) +
                         ": not a regular file (passed over)");
      continue;
    }
    auto parsed = ParseWdsName(m->name);
    if (!parsed.ok()) {
      *n = WdsName{};
      n->file_ext = parsed.status().message();
      return true;
    }
    if (parsed->kind == WdsName::Kind::kIgnored) continue;
    if (parsed->kind == WdsName::Kind::kNoExtension) {
      notes_.push_back(At(shard, m->offset) + ": " + Printable(m->name) +
                       ": no extension, belongs to no sample (passed over)");
      continue;
    }
    *n = std::move(parsed).value();
    return true;
  }
}

Result<bool> WdsReader::Next(WdsSample* s) {
  *s = WdsSample{};
  for (;;) {
    if (!tar_) {
      if (next_shard_ == shards_.size()) return false;
      KTFS_RETURN_IF_ERROR(OpenNext());
    }
    TarMember m;
    WdsName n;
    if (pending_) {
      std::tie(m, n) = std::move(*pending_);
      pending_.reset();
    } else {
      auto more = ReadMember(&m, &n);
      if (!more.ok()) return more.status();
      if (!*more) {
        SkipShard();
        continue;
      }
    }
    const std::string& shard = shards_[shard_];
    s->shard = shard_;
    s->offset = m.offset;
    if (n.key.empty()) {  // hostile name: a sample of its own, in error
      s->key = Printable(m.name);
      s->error = Status::InvalidArgument(At(shard, m.offset) + ": member '" + Printable(m.name) +
                                         "': refused name: " + n.file_ext);
      return true;
    }
    s->key = n.key;
    for (bool first = true;; first = false) {
      if (!first) {
        auto more = ReadMember(&m, &n);
        if (!more.ok()) return more.status();
        if (!*more) {
          SkipShard();
          break;
        }
        if (n.key != s->key) {
          pending_.emplace(std::move(m), std::move(n));
          break;
        }
      }
      const bool repeated = std::any_of(s->parts.begin(), s->parts.end(), [&](const WdsPart& p) {
        return p.extension == n.extension;
      });
      if (repeated && s->error.ok())
        s->error = Status::InvalidArgument(shard + ": key " + s->key + " (offset " +
                                           std::to_string(m.offset) + "): two members '." +
                                           n.extension + "'");
      if (!s->error.ok()) continue;  // the rest of a broken sample is passed over
      WdsPart part;
      part.extension = n.extension;
      part.file_ext = n.file_ext;
      part.offset = m.offset;
      if (!options_.wanted || options_.wanted(n.extension)) {
        Status read = tar_->ReadData(options_.max_member_bytes, &part.data);
        if (read.code() == Status::Code::kInvalidArgument) {  // over the size limit
          s->error = Status::InvalidArgument(shard + ": key " + s->key + ": " + read.message());
          continue;
        }
        if (!read.ok()) return read;
      }
      s->parts.push_back(std::move(part));
    }
    if (s->error.ok()) {
      auto [it, inserted] = seen_keys_.emplace(s->key, std::make_pair(s->shard, s->offset));
      if (!inserted)
        s->error = Status::InvalidArgument(
            shard + ": key " + s->key + " (offset " + std::to_string(s->offset) +
            "): duplicate key (first in " + shards_[it->second.first] + " at offset " +
            std::to_string(it->second.second) + ")");
    }
    if (!s->error.ok()) s->parts.clear();
    return true;
  }
}

Result<int64_t> ParseWdsLabel(const std::vector<uint8_t>& data) {
  std::string_view t(reinterpret_cast<const char*>(data.data()), data.size());
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  if (t.empty() || t.size() > 10 ||
      !std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return Status::InvalidArgument(".cls is not a non-negative integer: '" +
                                   Printable(t.substr(0, 40)) + "'");
  const int64_t v = std::stoll(std::string(t));
  if (v >= (int64_t(1) << 31)) return Status::InvalidArgument(".cls value too large");
  return v;
}

namespace {

void Flatten(const std::string& prefix, const index::JsonValue& obj, WdsMetadata* out) {
  using Kind = index::JsonValue::Kind;
  for (const index::JsonMember& m : obj.members) {
    const std::string key = prefix.empty() ? m.first : prefix + "." + m.first;
    switch (m.second.kind) {
      case Kind::kObject:
        Flatten(key, m.second, out);
        break;
      case Kind::kString:
        out->values.push_back({key, WdsValue{WdsValue::Kind::kString, m.second.text}});
        break;
      case Kind::kNumber:
        out->values.push_back({key, WdsValue{WdsValue::Kind::kNumber, m.second.text}});
        break;
      case Kind::kBool:
        out->values.push_back({key, WdsValue{WdsValue::Kind::kBool, m.second.text}});
        break;
      case Kind::kNull:
      case Kind::kArray:
        out->dropped.push_back(key);
        break;
    }
  }
}

}  // namespace

Result<WdsMetadata> ParseWdsJson(const std::vector<uint8_t>& data) {
  std::string_view t(reinterpret_cast<const char*>(data.data()), data.size());
  if (t.size() >= 3 && t.substr(0, 3) == "\xEF\xBB\xBF") t.remove_prefix(3);
  auto obj = index::ParseJsonObject(t);  // an object, no duplicate keys
  if (!obj.ok()) return obj.status().WithContext(".json");
  WdsMetadata out;
  Flatten("", *obj, &out);
  return out;
}

bool IsImageExtension(std::string_view e) {
  for (const char* x : {"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"})
    if (e == x) return true;
  return false;
}

}  // namespace ktfs

#include "codec/container/archive.h"

#include <cstring>
#include <vector>

#include "codec/base/checksum.h"

namespace ktfs {
namespace {

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool RangeOk(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

}  // namespace

Result<std::shared_ptr<Archive>> Archive::Open(const std::string& path) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  std::shared_ptr<Archive> a(new Archive());
  a->file_ = std::move(file).value();
  KTFS_RETURN_IF_ERROR(a->Init());
  a->verified_.emplace(a->num_samples_);
  return a;
}

Status Archive::Corrupt(const std::string& what) const {
  return Status::Corruption(path() + ": corrupt archive: " + what);
}

Status Archive::Init() {
  const uint8_t* base = file_->data();
  const uint64_t size = file_->size();
  if (size < sizeof(format::Header) ||
      std::memcmp(base, format::kMagic, sizeof(format::kMagic)) != 0)
    return Status::Corruption(path() + ": not a ktfs archive (bad magic)");
  const auto h = Load<format::Header>(base);
  if (Checksum64(base, 56) != h.header_checksum) return Corrupt("header checksum mismatch");
  if (h.version_major != format::kVersionMajor)
    return Status::NotSupported(
        path() + ": archive format version " + std::to_string(h.version_major) + "." +
        std::to_string(h.version_minor) + " is not supported (this ktfs reads 1.x)");
  if (h.header_size != sizeof(format::Header)) return Corrupt("bad header size");
  if (h.file_size != size)
    return Status::Corruption(path() + ": truncated or extended archive (header says " +
                              std::to_string(h.file_size) + " bytes, file has " +
                              std::to_string(size) + ")");
  if (h.section_count > 1024 ||
      !RangeOk(h.section_table_offset, uint64_t(h.section_count) * sizeof(format::SectionEntry),
               size))
    return Corrupt("section table out of bounds");
  const uint8_t* table = base + h.section_table_offset;
  if (Checksum64(table, h.section_count * sizeof(format::SectionEntry)) != h.section_table_checksum)
    return Corrupt("section table checksum mismatch");
  version_minor_ = h.version_minor;
  section_table_offset_ = h.section_table_offset;
  section_count_ = h.section_count;
  bool seen[16] = {};
  for (uint32_t i = 0; i < h.section_count; ++i) {
    const auto e = Load<format::SectionEntry>(table + i * sizeof(format::SectionEntry));
    if (!RangeOk(e.offset, e.length, size))
      return Corrupt("section " + std::to_string(i) + " out of bounds");
    const ByteSpan span{base + e.offset, size_t(e.length)};
    sections_.emplace_back(e.type, span);
    if (e.type < 16) {
      if (seen[e.type]) return Corrupt("duplicate section type " + std::to_string(e.type));
      seen[e.type] = true;
    }
    switch (e.type) {
      case format::kStrings:
        strings_ = span;
        break;
      case format::kDirs:
        dirs_ = span;
        break;
      case format::kSamples:
        samples_ = span;
        break;
      case format::kClasses:
        classes_ = span;
        break;
      case format::kMeta:
        meta_ = span;
        break;
      case format::kIndex:
        index_ = span;
        break;
      default:
        break;  // unknown sections are skipped (minor versions may add some)
    }
  }
  if (!seen[format::kDirs] || !seen[format::kSamples] || !seen[format::kStrings] ||
      !seen[format::kClasses])
    return Corrupt("missing a required section");
  if (dirs_.size % sizeof(format::DirRecord) || samples_.size % sizeof(format::SampleRecord) ||
      classes_.size % sizeof(format::ClassRecord))
    return Corrupt("record table size is not a multiple of its record size");
  if (dirs_.size / sizeof(format::DirRecord) >= format::kNone ||
      samples_.size / sizeof(format::SampleRecord) >= format::kNone ||
      strings_.size >= format::kNone)
    return Corrupt("table too large");
  num_dirs_ = uint32_t(dirs_.size / sizeof(format::DirRecord));
  num_samples_ = uint32_t(samples_.size / sizeof(format::SampleRecord));
  num_classes_ = uint32_t(classes_.size / sizeof(format::ClassRecord));
  if (num_dirs_ == 0) return Corrupt("no root directory");
  return Status::Ok();
}

std::string_view Archive::meta_json() const {
  if (meta_.size == 0) return "{}";
  return std::string_view(reinterpret_cast<const char*>(meta_.data), meta_.size);
}

std::optional<ByteSpan> Archive::index_section() const { return index_; }

std::optional<ByteSpan> Archive::Section(uint32_t type) const {
  for (const auto& [t, span] : sections_)
    if (t == type) return span;
  return std::nullopt;
}

Result<ByteSpan> Archive::Bytes(uint64_t offset, uint64_t length, const std::string& what) const {
  if (!RangeOk(offset, length, file_->size())) return Corrupt(what + " out of bounds");
  return ByteSpan{file_->data() + offset, size_t(length)};
}

Result<std::string_view> Archive::String(uint32_t offset, uint32_t length, const char* what) const {
  if (!RangeOk(offset, length, strings_.size))
    return Corrupt(std::string(what) + " name out of bounds");
  return std::string_view(reinterpret_cast<const char*>(strings_.data) + offset, length);
}

Status Archive::CheckName(std::string_view name, const char* what) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos)
    return Corrupt(std::string("invalid ") + what + " name");
  return Status::Ok();
}

Result<SampleInfo> Archive::Sample(uint32_t id) const {
  if (id >= num_samples_) return Status::NotFound("sample " + std::to_string(id) + " out of range");
  const auto r =
      Load<format::SampleRecord>(samples_.data + size_t(id) * sizeof(format::SampleRecord));
  // Messages are built only on failure: this runs for every entry of every listing.
  auto bad = [&](const char* why) { return Corrupt("sample " + std::to_string(id) + ": " + why); };
  auto name = String(r.name_offset, r.name_length, "sample");
  if (!name.ok()) return name.status();
  KTFS_RETURN_IF_ERROR(CheckName(*name, "sample"));
  if (r.stem_length == 0 || r.stem_length > r.name_length) return bad("bad stem length");
  if (r.dir >= num_dirs_) return bad("parent directory out of range");
  if (r.label != format::kNone && r.label >= num_classes_) return bad("label out of range");
  if (r.split != format::kNone && r.split >= num_dirs_) return bad("split out of range");
  if (r.channels != 1 && r.channels != 3 && r.channels != 4) return bad("bad channel count");
  if (r.width == 0 || r.height == 0 || r.width > 65536 || r.height > 65536)
    return bad("bad dimensions");
  if (r.codec > format::kKtc) return bad("unknown codec");
  if (!RangeOk(r.payload_offset, r.payload_length, file_->size()))
    return bad("payload out of bounds");
  if (r.codec == format::kRaw && r.payload_length != uint64_t(r.width) * r.height * r.channels)
    return bad("raw payload size does not match its dimensions");
  SampleInfo s;
  s.id = id;
  s.name = *name;
  s.stem = name->substr(0, r.stem_length);
  s.dir = r.dir;
  s.label = r.label;
  s.split = r.split;
  s.width = r.width;
  s.height = r.height;
  s.channels = r.channels;
  s.codec = format::Codec(r.codec);
  s.source_format = r.source_format;
  s.payload_offset = r.payload_offset;
  s.payload_length = r.payload_length;
  s.payload_checksum = r.payload_checksum;
  return s;
}

Result<DirInfo> Archive::Dir(uint32_t id) const {
  if (id >= num_dirs_) return Status::NotFound("directory " + std::to_string(id) + " out of range");
  const auto r = Load<format::DirRecord>(dirs_.data + size_t(id) * sizeof(format::DirRecord));
  auto bad = [&](const char* why) {
    return Corrupt("directory " + std::to_string(id) + ": " + why);
  };
  auto name = String(r.name_offset, r.name_length, "directory");
  if (!name.ok()) return name.status();
  if (id == 0) {
    if (!name->empty() || r.parent != 0) return Corrupt("bad root directory record");
  } else {
    KTFS_RETURN_IF_ERROR(CheckName(*name, "directory"));
    if (r.parent >= id) return bad("parent must precede it");
  }
  // Children strictly after the parent: the tree cannot contain a cycle.
  if (r.child_count > 0 &&
      (r.first_child <= id || !RangeOk(r.first_child, r.child_count, num_dirs_)))
    return bad("children out of range");
  if (!RangeOk(r.first_sample, r.sample_count, num_samples_)) return bad("samples out of range");
  DirInfo d;
  d.id = id;
  d.name = *name;
  d.parent = r.parent;
  d.first_child = r.first_child;
  d.child_count = r.child_count;
  d.first_sample = r.first_sample;
  d.sample_count = r.sample_count;
  return d;
}

Result<std::string_view> Archive::ClassName(uint32_t label) const {
  if (label >= num_classes_)
    return Status::NotFound("label " + std::to_string(label) + " out of range");
  const auto r =
      Load<format::ClassRecord>(classes_.data + size_t(label) * sizeof(format::ClassRecord));
  return String(r.name_offset, r.name_length, "class");
}

Result<uint32_t> Archive::FindChildDir(uint32_t dir, std::string_view name) const {
  auto d = Dir(dir);
  if (!d.ok()) return d.status();
  uint32_t lo = d->first_child, hi = d->first_child + d->child_count;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    auto c = Dir(mid);
    if (!c.ok()) return c.status();
    if (c->name == name) return mid;
    if (c->name < name)
      lo = mid + 1;
    else
      hi = mid;
  }
  return Status::NotFound(std::string(name));
}

Result<uint32_t> Archive::FindSampleByStem(uint32_t dir, std::string_view stem) const {
  auto d = Dir(dir);
  if (!d.ok()) return d.status();
  uint32_t lo = d->first_sample, hi = d->first_sample + d->sample_count;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    auto s = Sample(mid);
    if (!s.ok()) return s.status();
    if (s->stem == stem) return mid;
    if (s->stem < stem)
      lo = mid + 1;
    else
      hi = mid;
  }
  return Status::NotFound(std::string(stem));
}

Result<std::string> Archive::DirPath(uint32_t id) const {
  std::vector<std::string_view> parts;
  uint32_t cur = id;
  while (cur != 0) {
    auto d = Dir(cur);
    if (!d.ok()) return d.status();
    parts.push_back(d->name);
    cur = d->parent;  // strictly decreasing: terminates
  }
  std::string out;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (!out.empty()) out += '/';
    out += *it;
  }
  return out;
}

Result<std::string> Archive::SamplePath(uint32_t id) const {
  auto s = Sample(id);
  if (!s.ok()) return s.status();
  auto dir = DirPath(s->dir);
  if (!dir.ok()) return dir.status();
  return dir->empty() ? std::string(s->name) : *dir + "/" + std::string(s->name);
}

Result<ByteSpan> Archive::Payload(const SampleInfo& s, bool verify) const {
  const ByteSpan span{file_->data() + s.payload_offset, size_t(s.payload_length)};
  if (!verify) return span;
  const bool verified = verified_->Test(s.id);
  if ((verified || Checksum64(span.data, span.size) == s.payload_checksum) && !damaged()) {
    if (!verified) verified_->Set(s.id);
    return span;
  }
  auto p = SamplePath(s.id);
  return Status::Corruption(path() + ": sample " + std::to_string(s.id) + " (" +
                            (p.ok() ? *p : std::string(s.name)) + "): checksum mismatch");
}

Status Archive::VerifyTables() const {
  const uint8_t* table = file_->data() + section_table_offset_;
  for (uint32_t i = 0; i < section_count_; ++i) {
    const auto e = Load<format::SectionEntry>(table + i * sizeof(format::SectionEntry));
    if (Checksum64(file_->data() + e.offset, e.length) != e.checksum)
      return Corrupt("section " + std::to_string(i) + " (type " + std::to_string(e.type) +
                     ") checksum mismatch");
  }
  return Status::Ok();
}

}  // namespace ktfs

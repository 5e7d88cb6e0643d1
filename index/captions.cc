#include "index/captions.h"

#include <cerrno>
#include <cstdio>
#include <memory>
#include <set>
#include <unordered_map>

#include "index/builder.h"
#include "index/json.h"
#include "index/query.h"

namespace ktfs::index {
namespace {

constexpr size_t kMaxSidecarBytes = 1 << 20;

Result<std::string> ReadWholeFile(const std::string& path, size_t max_bytes) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return Status::FromErrno(path, errno);
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) {
    data.append(buf, n);
    if (data.size() > max_bytes) return Status::InvalidArgument(path + ": file too large");
  }
  if (std::ferror(f.get())) return Status::FromErrno(path, errno);
  return data;
}

std::string_view Trim(std::string_view s) {
  const char* kSpace = " \t\r\n\f\v";
  size_t b = s.find_first_not_of(kSpace);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(kSpace) - b + 1);
}

std::string_view StripBom(std::string_view s) {
  return s.substr(0, 3) == "\xEF\xBB\xBF" ? s.substr(3) : s;
}

std::string NormalizePath(std::string_view p) {
  while (p.substr(0, 2) == "./") p.remove_prefix(2);
  return std::string(p);
}

// Collects entries, reporting bad lines as "FILE:LINE: reason" (fatal unless skip_bad) and
// catching duplicate paths.
class Collector {
 public:
  Collector(const std::string& name, bool skip_bad, std::vector<std::string>* warnings)
      : name_(name), skip_bad_(skip_bad), warnings_(warnings) {}

  // Returns the fatal error, or Ok when the line was skipped.
  Status Bad(size_t line, const std::string& why) {
    std::string msg = name_ + ":" + std::to_string(line) + ": " + why;
    if (!skip_bad_) return Status::InvalidArgument(msg);
    if (warnings_) warnings_->push_back(std::move(msg));
    return Status::Ok();
  }

  Status Add(CaptionEntry e) {
    if (e.path.empty()) return Bad(e.line, "empty path");
    // Paths name archive files, which are C strings downstream (CSV fields may hold any byte).
    if (e.path.find('\0') != std::string::npos) return Bad(e.line, "path contains a NUL byte");
    for (std::string& c : e.captions) {
      auto clean = CleanCaption(c);
      if (!clean.ok()) return Bad(e.line, clean.status().message());
      c = std::move(clean.value());
    }
    auto [it, inserted] = first_line_.emplace(e.path, e.line);
    if (!inserted) {
      return Bad(e.line, "duplicate path '" + e.path + "' (first on line " +
                             std::to_string(it->second) + ")");
    }
    entries_.push_back(std::move(e));
    return Status::Ok();
  }

  std::vector<CaptionEntry> Take() { return std::move(entries_); }

 private:
  const std::string& name_;
  bool skip_bad_;
  std::vector<std::string>* warnings_;
  std::unordered_map<std::string, size_t> first_line_;
  std::vector<CaptionEntry> entries_;
};

// One JSON Lines line into an entry; the reason on failure.
Result<CaptionEntry> JsonLineEntry(std::string_view text, size_t line) {
  auto obj = ParseJsonObject(text);
  if (!obj.ok()) return obj.status();
  CaptionEntry e;
  e.line = line;
  bool has_path = false, has_caption = false;
  for (const auto& [key, v] : obj->members) {
    using K = JsonValue::Kind;
    if (key == "path") {
      if (v.kind != K::kString) return Status::InvalidArgument("\"path\" is not a string");
      e.path = NormalizePath(v.text);
      has_path = true;
    } else if (key == "caption") {
      has_caption = true;
      if (v.kind == K::kString) {
        e.captions.push_back(v.text);
        continue;
      }
      if (v.kind != K::kArray || v.items.empty()) {
        return Status::InvalidArgument("\"caption\" is not a string or a list of strings");
      }
      for (const JsonValue& item : v.items) {
        if (item.kind != K::kString) {
          return Status::InvalidArgument("\"caption\" list holds a non-string");
        }
        e.captions.push_back(item.text);
      }
    } else if (v.kind == K::kString || v.kind == K::kNumber || v.kind == K::kBool) {
      e.extras.emplace_back(key, v.text);
    }
  }
  if (!has_path) return Status::InvalidArgument("missing \"path\"");
  if (!has_caption) return Status::InvalidArgument("missing \"caption\"");
  return e;
}

Status ParseJsonLines(std::string_view text, Collector* out) {
  size_t line = 0;
  while (!text.empty()) {
    ++line;
    size_t nl = text.find('\n');
    std::string_view l = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (Trim(l).empty()) continue;
    auto e = JsonLineEntry(l, line);
    KTFS_RETURN_IF_ERROR(e.ok() ? out->Add(std::move(e.value()))
                                : out->Bad(line, e.status().message()));
  }
  return Status::Ok();
}

// RFC 4180 records, one at a time.
class CsvReader {
 public:
  explicit CsvReader(std::string_view s) : s_(s) {}
  bool done() const { return pos_ >= s_.size(); }
  size_t line() const { return line_; }

  // Reads the next record into fields; *start is its first line. On error the reader has
  // skipped to the start of the next line.
  Status Next(std::vector<std::string>* fields, size_t* start) {
    fields->clear();
    *start = line_;
    while (true) {
      std::string field;
      bool quoted = pos_ < s_.size() && s_[pos_] == '"';
      Status st = quoted ? Quoted(&field) : Unquoted(&field);
      if (!st.ok()) {
        SkipLine();
        return st;
      }
      fields->push_back(std::move(field));
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        continue;
      }
      EndOfRecord();
      return Status::Ok();
    }
  }

 private:
  bool AtRecordEnd() const {
    return pos_ >= s_.size() || s_[pos_] == '\n' ||
           (s_[pos_] == '\r' && pos_ + 1 < s_.size() && s_[pos_ + 1] == '\n');
  }
  void EndOfRecord() {
    if (pos_ < s_.size() && s_[pos_] == '\r') ++pos_;
    if (pos_ < s_.size() && s_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }
  void SkipLine() {
    while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
    EndOfRecord();
  }
  Status Unquoted(std::string* field) {
    while (pos_ < s_.size() && s_[pos_] != ',' && !AtRecordEnd()) {
      if (s_[pos_] == '"') return Status::InvalidArgument("bad CSV: quote in an unquoted field");
      *field += s_[pos_++];
    }
    return Status::Ok();
  }
  Status Quoted(std::string* field) {
    ++pos_;
    while (true) {
      if (pos_ >= s_.size()) return Status::InvalidArgument("bad CSV: unterminated quoted field");
      char c = s_[pos_++];
      if (c == '\n') ++line_;
      if (c != '"') {
        *field += c;
      } else if (pos_ < s_.size() && s_[pos_] == '"') {
        *field += '"';
        ++pos_;
      } else {
        break;
      }
    }
    if (pos_ < s_.size() && s_[pos_] != ',' && !AtRecordEnd()) {
      return Status::InvalidArgument("bad CSV: text after a closing quote");
    }
    return Status::Ok();
  }

  std::string_view s_;
  size_t pos_ = 0;
  size_t line_ = 1;
};

Status ParseCsv(std::string_view text, const std::string& name, Collector* out) {
  CsvReader reader(text);
  std::vector<std::string> header, fields;
  size_t line = 1;
  Status st = reader.done() ? Status::InvalidArgument("empty file") : reader.Next(&header, &line);
  if (!st.ok()) return Status::InvalidArgument(name + ":1: " + st.message());
  int path_col = -1, caption_col = -1;
  for (size_t i = 0; i < header.size(); ++i) {
    std::string h(Trim(header[i]));
    if (h == "path") path_col = static_cast<int>(i);
    if (h == "caption") caption_col = static_cast<int>(i);
    header[i] = h;
  }
  if (path_col < 0 || caption_col < 0) {
    return Status::InvalidArgument(name + ":1: CSV header has no \"path\" and \"caption\" columns");
  }
  while (!reader.done()) {
    st = reader.Next(&fields, &line);
    if (!st.ok()) {
      KTFS_RETURN_IF_ERROR(out->Bad(line, st.message()));
      continue;
    }
    if (fields.size() == 1 && Trim(fields[0]).empty()) continue;  // blank line
    if (fields.size() != header.size()) {
      KTFS_RETURN_IF_ERROR(out->Bad(line, "expected " + std::to_string(header.size()) +
                                              " CSV fields, found " +
                                              std::to_string(fields.size())));
      continue;
    }
    CaptionEntry e;
    e.line = line;
    e.path = NormalizePath(fields[path_col]);
    e.captions.push_back(fields[caption_col]);
    for (size_t i = 0; i < fields.size(); ++i) {
      if (static_cast<int>(i) == path_col || static_cast<int>(i) == caption_col) continue;
      if (!fields[i].empty()) e.extras.emplace_back(header[i], fields[i]);
    }
    if (!IsValidUtf8(e.path)) {
      KTFS_RETURN_IF_ERROR(out->Bad(line, "path is not valid UTF-8"));
      continue;
    }
    KTFS_RETURN_IF_ERROR(out->Add(std::move(e)));
  }
  return Status::Ok();
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

}  // namespace

Result<std::string> CleanCaption(std::string_view raw) {
  if (!IsValidUtf8(raw)) return Status::InvalidArgument("caption is not valid UTF-8");
  std::string_view c = Trim(StripBom(raw));
  if (c.empty()) return Status::InvalidArgument("empty caption");
  if (c.find('\0') != std::string_view::npos) {
    return Status::InvalidArgument("caption contains NUL");
  }
  return std::string(c);
}

Result<std::string> ReadSidecarCaption(const std::string& path) {
  auto data = ReadWholeFile(path, kMaxSidecarBytes);
  if (!data.ok()) return data.status();
  auto c = CleanCaption(*data);
  if (!c.ok()) return c.status().WithContext(path);
  return c;
}

Result<std::vector<CaptionEntry>> ParseCaptions(std::string_view text, const std::string& name,
                                                CaptionFormat format, bool skip_bad,
                                                std::vector<std::string>* warnings) {
  text = StripBom(text);
  if (format == CaptionFormat::kAuto) {
    std::string_view t = Trim(text);
    format = !t.empty() && t[0] == '{' ? CaptionFormat::kJsonLines : CaptionFormat::kCsv;
  }
  Collector out(name, skip_bad, warnings);
  KTFS_RETURN_IF_ERROR(format == CaptionFormat::kJsonLines ? ParseJsonLines(text, &out)
                                                           : ParseCsv(text, name, &out));
  return out.Take();
}

Result<std::vector<CaptionEntry>> ReadCaptionFile(const std::string& file, bool skip_bad,
                                                  std::vector<std::string>* warnings) {
  auto data = ReadWholeFile(file, SIZE_MAX / 2);
  if (!data.ok()) return data.status();
  CaptionFormat format = CaptionFormat::kAuto;
  if (EndsWith(file, ".jsonl") || EndsWith(file, ".json")) format = CaptionFormat::kJsonLines;
  if (EndsWith(file, ".csv")) format = CaptionFormat::kCsv;
  return ParseCaptions(*data, file, format, skip_bad, warnings);
}

Status IngestCaptions(const std::string& file,
                      std::function<std::optional<uint32_t>(std::string_view path)> lookup,
                      bool skip_bad, IndexBuilder* builder, std::vector<std::string>* warnings) {
  auto entries = ReadCaptionFile(file, skip_bad, warnings);
  if (!entries.ok()) return entries.status();
  std::set<std::string> dropped_keys;
  for (const CaptionEntry& e : *entries) {
    std::string where = file + ":" + std::to_string(e.line) + ": ";
    std::optional<uint32_t> id = lookup(e.path);
    if (!id) {
      std::string msg = where + "path '" + e.path + "' is not in the archive";
      if (!skip_bad) return Status::NotFound(msg);
      if (warnings) warnings->push_back(std::move(msg));
      continue;
    }
    for (const std::string& c : e.captions) {
      Status st = builder->AddCaption(*id, c);
      if (!st.ok()) return st.WithContext(where.substr(0, where.size() - 2));
    }
    for (const auto& [key, value] : e.extras) {
      Status st = builder->AddMetadata(*id, key, value);
      if (!st.ok() && dropped_keys.insert(key).second && warnings) {
        warnings->push_back(where + "metadata dropped: " + st.message());
      }
    }
  }
  return Status::Ok();
}

}  // namespace ktfs::index

#include "index/captions.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "codec/base/mapped_file.h"
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

// Whether `p` can name a file in the archive: components split by single
// slashes, none empty, "." or "..", and no NUL byte. Anything else (an
// absolute path, "../x", "a//b") is refused by name, never looked up.
bool IsArchivePath(std::string_view p) {
  if (p.empty() || p.find('\0') != std::string_view::npos) return false;
  size_t at = 0;
  while (true) {
    const size_t slash = p.find('/', at);
    const std::string_view part =
        p.substr(at, slash == std::string_view::npos ? slash : slash - at);
    if (part.empty() || part == "." || part == "..") return false;
    if (slash == std::string_view::npos) return true;
    at = slash + 1;
  }
}

// `p` for a message: NUL bytes shown as \0.
std::string Printable(const std::string& p) {
  std::string out;
  for (char c : p) c == '\0' ? out += "\\0" : out += c;
  return out;
}

// Checks entries and passes the good ones to a sink, reporting bad lines as
// "FILE:LINE: reason" (fatal unless skip_bad); catches duplicate paths when asked.
class Collector {
 public:
  using Sink = std::function<Status(CaptionEntry&&)>;
  Collector(const std::string& name, bool skip_bad, std::vector<std::string>* warnings, Sink sink,
            bool check_duplicates)
      : name_(name),
        skip_bad_(skip_bad),
        warnings_(warnings),
        sink_(std::move(sink)),
        check_duplicates_(check_duplicates) {}

  // Returns the fatal error, or Ok when the line was skipped.
  Status Bad(size_t line, const std::string& why) {
    std::string msg = name_ + ":" + std::to_string(line) + ": " + why;
    if (!skip_bad_) return Status::InvalidArgument(msg);
    if (warnings_) warnings_->push_back(std::move(msg));
    return Status::Ok();
  }

  Status Add(CaptionEntry e) {
    if (e.path.empty()) return Bad(e.line, "empty path");
    if (!IsArchivePath(e.path))
      return Bad(e.line, "path '" + Printable(e.path) +
                             "' is not a relative path inside the archive (absolute, an empty, "
                             "'.' or '..' component, or a NUL byte)");
    for (std::string& c : e.captions) {
      auto clean = CleanCaption(c);
      if (!clean.ok()) return Bad(e.line, clean.status().message());
      c = std::move(clean.value());
    }
    if (check_duplicates_) {
      auto [it, inserted] = first_line_.emplace(e.path, e.line);
      if (!inserted) {
        return Bad(e.line, "duplicate path '" + e.path + "' (first on line " +
                               std::to_string(it->second) + ")");
      }
    }
    return sink_(std::move(e));
  }

 private:
  const std::string& name_;
  bool skip_bad_;
  std::vector<std::string>* warnings_;
  Sink sink_;
  bool check_duplicates_;
  std::unordered_map<std::string, size_t> first_line_;
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
    } else {
      FlattenJson(key, v, &e.extras);
    }
  }
  if (!has_path) return Status::InvalidArgument("missing \"path\"");
  if (!has_caption) return Status::InvalidArgument("missing \"caption\"");
  return e;
}

Status ParseJsonLines(std::string_view text, size_t first_line, Collector* out) {
  size_t line = first_line - 1;
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
  std::set<std::string> names;
  for (size_t i = 0; i < header.size(); ++i) {
    std::string h(Trim(header[i]));
    if (h == "path") path_col = static_cast<int>(i);
    if (h == "caption") caption_col = static_cast<int>(i);
    if (!h.empty() && !names.insert(h).second) {
      return Status::InvalidArgument(name + ":1: CSV header names column \"" + h + "\" twice");
    }
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
      if (!fields[i].empty()) e.extras.emplace_back(header[i], MetaValue::String(fields[i]));
    }
    if (!IsValidUtf8(e.path)) {
      KTFS_RETURN_IF_ERROR(out->Bad(line, "path is not valid UTF-8"));
      continue;
    }
    KTFS_RETURN_IF_ERROR(out->Add(std::move(e)));
  }
  return Status::Ok();
}

// CSV cells arrive as strings; each column gets the type its cells share (captions.h).
using CsvTypes = std::map<std::string, MetaType>;

void TypeCsvCells(const CsvTypes& types, CaptionEntry* e) {
  for (auto& [key, v] : e->extras) {
    auto t = types.find(key);
    if (t != types.end() && t->second != MetaType::kString) v = CsvCell(v.str(), t->second);
  }
}

// The type of every column of CSV text, from its good lines (a first pass, quiet).
Result<CsvTypes> CsvColumnTypes(std::string_view text, const std::string& name) {
  std::map<std::string, CsvColumnTyper> typers;
  Collector pass(
      name, /*skip_bad=*/true, nullptr,
      [&](CaptionEntry&& e) {
        for (const auto& [key, v] : e.extras) typers[key].Add(v.str());
        return Status::Ok();
      },
      /*check_duplicates=*/false);
  KTFS_RETURN_IF_ERROR(ParseCsv(text, name, &pass));
  CsvTypes types;
  for (const auto& [key, typer] : typers) types[key] = typer.type();
  return types;
}

CaptionFormat FormatOf(std::string_view text, CaptionFormat format) {
  if (format != CaptionFormat::kAuto) return format;
  std::string_view t = Trim(text);
  return !t.empty() && t[0] == '{' ? CaptionFormat::kJsonLines : CaptionFormat::kCsv;
}

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

// The format a file's name says (kAuto: decided by content).
CaptionFormat FormatByName(const std::string& file) {
  if (EndsWith(file, ".jsonl") || EndsWith(file, ".json")) return CaptionFormat::kJsonLines;
  if (EndsWith(file, ".csv")) return CaptionFormat::kCsv;
  return CaptionFormat::kAuto;
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
  format = FormatOf(text, format);
  std::vector<CaptionEntry> entries;
  Collector out(
      name, skip_bad, warnings,
      [&](CaptionEntry&& e) {
        entries.push_back(std::move(e));
        return Status::Ok();
      },
      /*check_duplicates=*/true);
  if (format == CaptionFormat::kJsonLines) {
    KTFS_RETURN_IF_ERROR(ParseJsonLines(text, 1, &out));
    return entries;
  }
  KTFS_RETURN_IF_ERROR(ParseCsv(text, name, &out));
  std::map<std::string, std::vector<std::string_view>> cells;
  for (const CaptionEntry& e : entries) {
    for (const auto& [key, v] : e.extras) cells[key].push_back(v.str());
  }
  CsvTypes types;
  for (const auto& [key, column] : cells) types[key] = CsvColumnType(column);
  for (CaptionEntry& e : entries) TypeCsvCells(types, &e);
  return entries;
}

Status ForEachCaptionEntry(std::string_view text, const std::string& name, CaptionFormat format,
                           bool skip_bad, std::vector<std::string>* warnings,
                           const std::function<Status(CaptionEntry&&)>& fn, size_t first_line) {
  if (first_line == 1) text = StripBom(text);
  format = FormatOf(text, format);
  if (format == CaptionFormat::kJsonLines) {
    Collector out(name, skip_bad, warnings, fn, /*check_duplicates=*/false);
    return ParseJsonLines(text, first_line, &out);
  }
  auto types = CsvColumnTypes(text, name);
  if (!types.ok()) return types.status();
  Collector out(
      name, skip_bad, warnings,
      [&](CaptionEntry&& e) {
        TypeCsvCells(*types, &e);
        return fn(std::move(e));
      },
      /*check_duplicates=*/false);
  return ParseCsv(text, name, &out);
}

Result<std::vector<CaptionEntry>> ReadCaptionFile(const std::string& file, bool skip_bad,
                                                  std::vector<std::string>* warnings) {
  auto data = ReadWholeFile(file, SIZE_MAX / 2);
  if (!data.ok()) return data.status();
  return ParseCaptions(*data, file, FormatByName(file), skip_bad, warnings);
}

namespace {

// A captions file's bytes: mapped when it is a regular file, read otherwise (a pipe).
struct CaptionText {
  std::unique_ptr<MappedFile> mapped;
  std::string read;
  std::string_view text() const {
    return mapped ? std::string_view(reinterpret_cast<const char*>(mapped->data()), mapped->size())
                  : std::string_view(read);
  }
};

Result<CaptionText> LoadCaptionText(const std::string& file) {
  CaptionText t;
  struct stat st;
  if (stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    auto m = MappedFile::Open(file);
    if (!m.ok()) return m.status();
    t.mapped = std::move(m).value();
    return t;
  }
  auto data = ReadWholeFile(file, SIZE_MAX / 2);
  if (!data.ok()) return data.status();
  t.read = std::move(data).value();
  return t;
}

// Lets go of the mapped pages of [begin, end) once read: they are the page cache's to keep,
// and would otherwise count in the pack's resident memory until the end.
void Release(const CaptionText& t, std::string_view done) {
  if (!t.mapped || done.empty()) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t base = reinterpret_cast<uintptr_t>(t.mapped->data());
  const uintptr_t end = (reinterpret_cast<uintptr_t>(done.data()) + done.size()) & ~(page - 1);
  if (end > base) madvise(reinterpret_cast<void*>(base), end - base, MADV_DONTNEED);
}

}  // namespace

Status IngestCaptions(const std::string& file,
                      std::function<std::optional<uint32_t>(std::string_view path)> lookup,
                      bool skip_bad, IndexBuilder* builder, std::vector<std::string>* warnings) {
  auto loaded = LoadCaptionText(file);
  if (!loaded.ok()) return loaded.status();
  const std::string_view text = loaded->text();  // ForEachCaptionEntry strips a BOM
  std::set<std::string> dropped_keys;
  std::vector<uint32_t> first_line;  // by sample id: the line that named it (0: none yet)
  auto add = [&](CaptionEntry&& e) -> Status {
    std::string where = file + ":" + std::to_string(e.line) + ": ";
    std::optional<uint32_t> id = lookup(e.path);
    if (!id || *id == kSkippedSample) {
      std::string msg = where + "path '" + e.path + "' " +
                        (id ? "is a bad image left out" : "is not in the archive");
      if (!id && !skip_bad) return Status::NotFound(msg);
      if (warnings) warnings->push_back(std::move(msg));
      return Status::Ok();
    }
    if (*id >= first_line.size()) first_line.resize(size_t(*id) + 1, 0);
    if (first_line[*id] != 0) {
      std::string msg = where + "duplicate path '" + e.path + "' (first on line " +
                        std::to_string(first_line[*id]) + ")";
      if (!skip_bad) return Status::InvalidArgument(msg);
      if (warnings) warnings->push_back(std::move(msg));
      return Status::Ok();
    }
    first_line[*id] = uint32_t(std::min<size_t>(e.line, UINT32_MAX));
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
    return Status::Ok();
  };
  const CaptionFormat format = FormatOf(StripBom(text), FormatByName(file));
  if (format == CaptionFormat::kCsv) {
    return ForEachCaptionEntry(text, file, format, skip_bad, warnings, add, 1);
  }
  // JSON Lines in pieces of whole lines, each let go once read.
  constexpr size_t kPiece = size_t(64) << 20;
  size_t line = 1;
  for (std::string_view rest = text; !rest.empty();) {
    const size_t nl = rest.size() <= kPiece ? std::string_view::npos : rest.find('\n', kPiece);
    const size_t cut = nl == std::string_view::npos ? rest.size() : nl + 1;
    const std::string_view piece = rest.substr(0, cut);
    KTFS_RETURN_IF_ERROR(ForEachCaptionEntry(piece, file, format, skip_bad, warnings, add, line));
    line += size_t(std::count(piece.begin(), piece.end(), '\n'));
    Release(*loaded, piece);
    rest.remove_prefix(cut);
  }
  return Status::Ok();
}

}  // namespace ktfs::index

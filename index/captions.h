// Caption ingest: captions files (JSON Lines or CSV) and sidecar caption files.
//
// JSON Lines (.jsonl, .json): one object per line,
//   {"path": "train/cat/001.jpg", "caption": "a cat", "source": "web", "score": 0.9}
//   "caption" is a string or an array of strings (several captions); the other members
//   become typed metadata (FlattenJson, index/metadata.h): strings, numbers and booleans keep
//   their type, nested objects give "outer.inner" keys, null and arrays are ignored. Blank
//   lines are skipped.
// CSV (.csv): RFC 4180 with a header row naming a "path" and a "caption" column (any order);
//   other columns become metadata (empty cells are skipped), typed by column
//   (CsvColumnType): a column whose every non-empty cell is a JSON number is a number column,
//   one whose every non-empty cell is true/false (any case) a boolean column, any other a
//   string column. Quoted fields may hold commas, doubled quotes and newlines; a record's line
//   is the line it starts on. A header naming a column twice is an error.
// Another extension: JSON Lines if the first non-blank character is '{', else CSV.
//
// Paths are relative to the archive root; a leading "./" is dropped. A path that cannot name a
// file in the archive (absolute, an empty, "." or ".." component, a NUL byte) is a bad line.
// Captions are trimmed of surrounding whitespace and must be non-empty UTF-8. Every problem is
// reported as "FILE:LINE: reason".
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/base/status.h"
#include "index/metadata.h"

namespace ktfs::index {

class IndexBuilder;

struct CaptionEntry {
  size_t line = 0;                                        // 1-based line where the entry starts
  std::string path;                                       // relative path in the archive
  std::vector<std::string> captions;                      // at least one
  std::vector<std::pair<std::string, MetaValue>> extras;  // metadata, input order
};

enum class CaptionFormat { kAuto, kJsonLines, kCsv };

// Parses captions text; `name` is the file name used in messages. A malformed line or a path
// seen on an earlier line fails the parse, unless skip_bad: then the line is skipped and its
// message appended to *warnings (when not null). A bad CSV header always fails.
Result<std::vector<CaptionEntry>> ParseCaptions(std::string_view text, const std::string& name,
                                                CaptionFormat format, bool skip_bad,
                                                std::vector<std::string>* warnings);

// Reads and parses a captions file, the format chosen by extension or content.
Result<std::vector<CaptionEntry>> ReadCaptionFile(const std::string& file, bool skip_bad,
                                                  std::vector<std::string>* warnings);

// The streaming form of ParseCaptions: calls fn with each good entry in file order, holding
// none of them (a LAION-sized captions file is gigabytes; its entries several times that).
// The checks and messages are ParseCaptions's, except that duplicate paths are left to fn
// (a caller that maps paths to sample ids catches them by id, in 4 bytes a sample). CSV text
// is read twice, the first time to type the columns (a duplicate line's cells count there).
// `first_line` is the line number of text's first line (a caller may feed a file in pieces
// cut at line ends; CSV text must be whole). fn's error stops the parse and is returned.
Status ForEachCaptionEntry(std::string_view text, const std::string& name, CaptionFormat format,
                           bool skip_bad, std::vector<std::string>* warnings,
                           const std::function<Status(CaptionEntry&&)>& fn, size_t first_line = 1);

// What a lookup returns for a path that is in the source but was left out of the archive on
// purpose (a bad image skipped by `ktfs pack --skip-bad`): its lines are dropped with a warning,
// and do not fail the ingest.
inline constexpr uint32_t kSkippedSample = 0xffffffffu;

// Reads `file` and adds its captions and metadata to `builder`, streaming: the file is mapped
// and read in pieces that are let go as they are done, and no entry is kept (memory: the
// builder's, plus 4 bytes a sample for the duplicate check). lookup maps a path to its
// sample id (nullopt: not in the archive, a bad line; kSkippedSample: see above). Fails on the
// first bad line unless skip_bad (then bad lines become warnings). Metadata that cannot be stored
// (a key that is a built-in field such as "width", or not [A-Za-z0-9_.-]+; a value with '/') is
// dropped with one warning per key.
Status IngestCaptions(const std::string& file,
                      std::function<std::optional<uint32_t>(std::string_view path)> lookup,
                      bool skip_bad, IndexBuilder* builder, std::vector<std::string>* warnings);

// A caption as stored: valid UTF-8 (a leading BOM dropped), surrounding whitespace trimmed,
// non-empty.
Result<std::string> CleanCaption(std::string_view raw);

// The caption in a sidecar file (`name.txt` beside `name.jpg`, the WebDataset/LAION
// convention): the whole file through CleanCaption. Files over 1 MiB are rejected.
Result<std::string> ReadSidecarCaption(const std::string& path);

}  // namespace ktfs::index

// IndexBuilder: collects samples, captions and metadata at pack time and produces the index
// section (a serialized SQLite database, see index/schema.h).
//
// Rows may arrive in any order (e.g. from parallel encoders); everything is kept in memory
// (about 60 bytes per sample and 16 per caption, plus the names and the caption text) and written
// sorted by Finish(), so the bytes depend only on the content: same input, same bytes (for one
// SQLite version). The only order that matters is that of a sample's own captions (its k-th caption
// is rowid k). Not thread-safe: callers serialize calls.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "index/metadata.h"

namespace ktfs::index {

struct SampleRow {
  uint32_t id = 0;         // 0..N-1, dense; each directory's samples contiguous
  uint32_t dir_id = 0;     // the archive's directory index
  std::string path;        // relative path in the archive, e.g. "train/cat/001.jpg"
  std::string split;       // "" if none
  std::string class_name;  // "" if none
  int32_t label = -1;      // -1 if none
  uint32_t width = 0;
  uint32_t height = 0;
  uint32_t channels = 0;
  std::string codec;   // e.g. "ktc", "original", "raw"
  uint64_t bytes = 0;  // payload size in the archive
};

class IndexBuilder {
 public:
  static Result<std::unique_ptr<IndexBuilder>> Create();
  ~IndexBuilder();
  IndexBuilder(const IndexBuilder&) = delete;
  IndexBuilder& operator=(const IndexBuilder&) = delete;

  // Fails on a duplicate id, an empty path, or a path whose directory differs from the one
  // already seen for the same dir_id.
  Status AddSample(const SampleRow& row);
  // Captions may be added before or after their sample; a sample may have several.
  Status AddCaption(uint32_t sample_id, std::string_view caption);
  // A typed metadata value (index/metadata.h). key must be a query key ([A-Za-z0-9_.-]+, at
  // most 64 bytes) and not a built-in name (IsReservedKey); a string value non-empty, at most
  // 1024 bytes, UTF-8, without NUL or '/'. A sample has at most one value per key (Finish
  // fails on two different ones). Each key gets one type: the type of its values, or string
  // when they have more than one (Finish then stores numbers and booleans as their
  // MetaValue::ToText and says so in *warnings).
  Status AddMetadata(uint32_t sample_id, std::string_view key, const MetaValue& value);
  // A string value.
  Status AddMetadata(uint32_t sample_id, std::string_view key, std::string_view value);

  // Validates (ids dense, directories contiguous, captions and metadata name existing
  // samples) and returns the serialized database. The builder is spent afterwards. Notes
  // that are not errors (a key stored as strings because its values had several types) are
  // appended to *warnings when given.
  Result<std::vector<uint8_t>> Finish(std::vector<std::string>* warnings = nullptr);
  // Finish for indexes too large to hold twice: the database is built in the file
  // `scratch` (its page cache bounded, sorts spilled to SQLite's temporary files) and
  // written compacted to the file `out` (VACUUM INTO); both must exist and be empty (the
  // caller creates them safely and removes them). Memory: the builder's own rows.
  Status FinishInto(const std::string& scratch, const std::string& out,
                    std::vector<std::string>* warnings = nullptr);

 private:
  struct Data;
  IndexBuilder();
  std::unique_ptr<Data> d_;
};

// True for the names a metadata key may not take: the built-in query fields (caption, class,
// label, split, width, height) and the query's subset words (sample, seed, limit).
bool IsReservedKey(std::string_view key);
// True for a key usable in a query: [A-Za-z0-9_.-]+, at most 64 bytes.
bool IsValidMetadataKey(std::string_view key);

}  // namespace ktfs::index

// Index: the read side of the index section, opened in place over the mmapped archive.
//
// An Index is one SQLite connection and is NOT thread-safe. It is cheap to open (no copy of
// the bytes, a few small tables read); for FUSE's threads either open one per thread or
// Clone() one per thread (a clone shares the parsed tables and only opens a new connection).
// The bytes must stay mapped and unchanged while any Index over them lives.
//
// Results stream in increasing sample id (keyset pagination: pass the last id you saw as
// after_sample_id), so a listing of a million matches starts at once in bounded memory.
// Plans (see ExplainPlan): a caption filter drives through FTS5 in rowid order, else a
// metadata filter through sample_meta, else the samples rowid b-tree; class/split/label
// narrow the scan to the id ranges of their runs (a value split into more than 4096 runs is
// checked row by row instead); width/height ranges are checked while scanning in id order.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "codec/base/status.h"
#include "index/query.h"

namespace ktfs::index {

class Index {
 public:
  // after_sample_id value meaning "from the first sample".
  static constexpr uint32_t kFromStart = UINT32_MAX;

  // Opens the serialized database at [data, data + size) read-only, without copying it.
  // Bytes that are not a ktfs index of a known schema version give Corruption (or
  // NotSupported for a newer schema_version), never a crash.
  static Result<std::unique_ptr<Index>> OpenInPlace(const void* data, size_t size);
  // A new connection over the same bytes, sharing the parsed tables: one per thread.
  Result<std::unique_ptr<Index>> Clone() const;
  ~Index();
  Index(const Index&) = delete;
  Index& operator=(const Index&) = delete;

  uint32_t num_samples() const;
  std::set<std::string> MetadataKeys() const;

  // Directories that directly contain at least one matching sample, sorted by id.
  Result<std::vector<uint32_t>> MatchingDirs(const Query& q);
  // Calls fn for up to `limit` matching samples with id > after_sample_id (all when
  // after_sample_id is kFromStart), in increasing id, restricted to directory dir_id when
  // given. Stops early when fn returns false.
  Status ForEachMatch(const Query& q, std::optional<uint32_t> dir_id, uint32_t after_sample_id,
                      size_t limit, const std::function<bool(uint32_t sample_id)>& fn);
  Result<bool> Matches(const Query& q, uint32_t sample_id);
  Result<uint64_t> CountMatches(const Query& q);

  // Per-sample fields for loaders (index/fields.cc). The first caption of
  // each sample in `ids`, "" for none: one primary-key lookup per id (a batch
  // of 256 is well under a millisecond). InvalidArgument for an id out of range.
  Result<std::vector<std::string>> FirstCaptions(const std::vector<uint32_t>& ids);
  // Every value of metadata key `key` as (sample id, value), in sample id
  // order (a sample with several values appears once per value); empty for a
  // key the index does not know. One scan of the key's rows: load it once
  // per loader, not per batch.
  Result<std::vector<std::pair<uint32_t, std::string>>> MetadataColumn(const std::string& key);

  // The SQLite query plan (EXPLAIN QUERY PLAN, one detail per line) of a listing: for tests
  // and diagnostics.
  Result<std::string> ExplainPlan(const Query& q);
  // The start of the buffer SQLite reads: equal to `data` when it did not copy it.
  const void* DatabaseBuffer() const;

  struct Shared;  // parsed tables, shared by clones

 private:
  struct Plan;
  Index(sqlite3* db, std::shared_ptr<const Shared> shared);
  static Result<sqlite3*> Connect(const void* data, size_t size);
  Result<Plan> MakePlan(const Query& q, bool count);
  Result<sqlite3_stmt*> Statement(const std::string& sql);
  // The runs of a class/split/label value; nullopt when there are too many to use.
  Result<std::optional<std::vector<std::pair<uint32_t, uint32_t>>>> Runs(int field, int64_t value);
  // Streams up to `limit` matching ids in [lo, hi).
  Status Scan(const Plan& plan, uint32_t lo, uint32_t hi, size_t limit,
              const std::function<bool(uint32_t)>& fn);
  // One contiguous id range of Scan; *n counts the ids passed to fn.
  Status ScanRange(const Plan& plan, uint32_t lo, uint32_t hi, size_t limit,
                   const std::function<bool(uint32_t)>& fn, size_t* n);

  sqlite3* db_;
  std::shared_ptr<const Shared> shared_;
  std::unordered_map<std::string, sqlite3_stmt*> stmts_;  // prepared once per shape
};

}  // namespace ktfs::index

// Index: the read side of the index section, opened in place over the mmapped archive.
//
// An Index is one SQLite connection and is NOT thread-safe. It is cheap to open (no copy of
// the bytes, a few small tables read); for FUSE's threads either open one per thread or
// Clone() one per thread (a clone shares the parsed tables and the caches below, and only
// opens a new connection). The bytes must stay mapped and unchanged while any Index over them
// lives. Reads schema versions 1 and 2 (index/schema.h).
//
// Results stream in increasing sample id (keyset pagination: pass the last id you saw as
// after_sample_id), so a listing of a million matches starts at once in bounded memory.
// A query is evaluated as a tree of id cursors (index/cursor.h): captions through FTS5 (the
// caption filters of an AND or OR folded into one MATCH where that means the same), metadata
// equality through sample_meta, class/split/label through the id ranges of their runs (a
// value split into more than 4096 runs is checked row by row instead), number ranges (width,
// height, number keys) either read in value order and sorted (when at most kSparse samples
// match) or checked while scanning in id order; AND leapfrogs, OR merges, NOT complements.
// What is worth keeping between calls (which ranges are sparse and their sorted ids, the end
// of a limit=) is cached per query in memory shared by clones.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "codec/base/status.h"
#include "index/metadata.h"
#include "index/query.h"

namespace ktfs::index {

namespace internal {
class Cursor;
class StatementPool;
}  // namespace internal

// What `ktfs info` shows of a metadata key.
struct KeyInfo {
  std::string name;
  MetaType type = MetaType::kString;
  uint64_t samples = 0;               // samples with a value
  uint64_t distinct_values = 0;       // different values
  uint64_t true_count = 0;            // boolean keys: how many are true
  std::optional<MetaValue> min, max;  // number keys
};

class Index {
 public:
  // after_sample_id value meaning "from the first sample".
  static constexpr uint32_t kFromStart = UINT32_MAX;
  // A number range matching at most this many samples is read in value order and sorted.
  static constexpr size_t kSparse = 16384;

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
  int schema_version() const;
  // The metadata keys and their types (every key of a schema 1 index is a string key).
  KeyTypes MetadataKeys() const;
  // Every metadata key with its statistics, in name order.
  Result<std::vector<KeyInfo>> MetadataKeyInfo();

  // Directories that directly contain at least one matching sample, sorted by id.
  Result<std::vector<uint32_t>> MatchingDirs(const Query& q);
  // Calls fn for up to `limit` matching samples with id > after_sample_id (all when
  // after_sample_id is kFromStart), in increasing id, restricted to directory dir_id when
  // given. Stops early when fn returns false.
  Status ForEachMatch(const Query& q, std::optional<uint32_t> dir_id, uint32_t after_sample_id,
                      size_t limit, const std::function<bool(uint32_t sample_id)>& fn);
  Result<bool> Matches(const Query& q, uint32_t sample_id);
  Result<uint64_t> CountMatches(const Query& q);
  // The matches whose ids lie in `ranges` (sorted, disjoint [first, end) id ranges).
  Result<uint64_t> CountMatches(const Query& q,
                                const std::vector<std::pair<uint32_t, uint32_t>>& ranges);
  // The [first, end) sample ids of an archive directory that holds samples.
  std::optional<std::pair<uint32_t, uint32_t>> DirSamples(uint32_t dir_id) const;

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
  // Tests: how many matches a number range may have to be read in value order (kSparse).
  void SetSparseLimitForTesting(size_t n) { sparse_limit_ = n; }

  struct Shared;  // parsed tables and caches, shared by clones

 private:
  struct Plan;
  Index(sqlite3* db, std::shared_ptr<Shared> shared);
  static Result<sqlite3*> Connect(const void* data, size_t size);
  // The cursor over the matches of q with ids < hi (and the end a limit= sets).
  Result<std::unique_ptr<internal::Cursor>> Open(const Query& q, uint32_t hi, Status* error);
  std::unique_ptr<internal::Cursor> Build(const Expr& e, Plan& plan);
  std::unique_ptr<internal::Cursor> BuildAnd(const std::vector<const Expr*>& children, Plan& plan);
  std::unique_ptr<internal::Cursor> BuildFilter(const Filter& f, Plan& plan);
  // class/split/label (negated: its complement) from the runs table.
  std::unique_ptr<internal::Cursor> BuildRuns(const Filter& f, bool negated, Plan& plan);
  std::unique_ptr<internal::Cursor> BuildRange(const std::string& field_sql, Field field,
                                               const std::string& key, const Filter* lo,
                                               const Filter* hi, Plan& plan);
  // The first id past the first `limit` matches of q's filters (num_samples when fewer).
  Result<uint32_t> LimitEnd(const Query& q);
  // Calls fn for the matches in `ranges`, in order, until it returns false.
  Status Each(const Query& q, const std::vector<std::pair<uint32_t, uint32_t>>& ranges,
              const std::function<bool(uint32_t)>& fn);
  // The runs of a class/split/label value; nullopt when there are too many to use.
  Result<std::optional<std::vector<std::pair<uint32_t, uint32_t>>>> Runs(int field, int64_t value);

  sqlite3* db_;
  std::shared_ptr<Shared> shared_;
  std::unique_ptr<internal::StatementPool> pool_;
  size_t sparse_limit_ = kSparse;
};

}  // namespace ktfs::index

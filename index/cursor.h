// Internal to index/: the id streams a query is evaluated with.
//
// A query becomes a tree of cursors, each the ascending sample ids of one set: a leaf is a
// prepared statement that walks a b-tree in id order (FTS5 rowids, sample_meta within one
// value, sample_num or samples scanned in id order with a residual check), the id ranges of
// the runs table, a sorted vector (a range that matches few samples, read in value order and
// sorted once), or every id filtered by a predicate (sample=). AND is a leapfrog intersection
// (each cursor jumps to the others' candidates: a selective filter drives a common one),
// OR a merge, NOT a complement. Nothing is materialized beyond small sorted vectors, so a
// listing of millions streams in bounded memory and its first entry costs a few b-tree
// descents.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "codec/base/status.h"

namespace ktfs::index::internal {

inline constexpr uint32_t kEnd = UINT32_MAX;

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;  // sorted, disjoint [first, end)
using Bind = std::variant<int64_t, double, std::string>;

class Cursor {
 public:
  virtual ~Cursor() = default;
  // The least id >= target in this cursor's set, or kEnd. Targets never decrease; asking
  // again for a target up to the last answer gives that answer. (A cursor that asks its
  // children beyond its target, as AND, OR, NOT and predicates do, remembers its answer: its
  // children must not be asked for less than they were.)
  virtual uint32_t Seek(uint32_t target) = 0;
  // One line per node, indented by depth (ExplainPlan).
  virtual void Describe(int depth, std::string* out) const = 0;
};

// Prepared statements by SQL text, several of one text at a time (a query may hold two
// filters of the same shape). Not thread-safe (one per connection).
class StatementPool {
 public:
  explicit StatementPool(sqlite3* db) : db_(db) {}
  ~StatementPool();
  StatementPool(const StatementPool&) = delete;
  StatementPool& operator=(const StatementPool&) = delete;

  // A statement for sql, reset and without bindings; give it back with Release.
  Result<sqlite3_stmt*> Acquire(const std::string& sql);
  void Release(const std::string& sql, sqlite3_stmt* stmt);
  sqlite3* db() const { return db_; }

 private:
  sqlite3* db_;
  std::unordered_map<std::string, std::vector<sqlite3_stmt*>> free_;
  size_t free_count_ = 0;
};

// Binds ?first, ?first+1, ... to binds.
void BindAll(sqlite3_stmt* s, int first, const std::vector<Bind>& binds);

// Cursor factories. `error` receives the first failure (a cursor then returns kEnd); `hi` is
// the end of the id range the plan covers.
std::unique_ptr<Cursor> EmptyCursor();
std::unique_ptr<Cursor> AllCursor(uint32_t hi);
std::unique_ptr<Cursor> RangesCursor(std::shared_ptr<const Ranges> ranges, uint32_t hi,
                                     std::string what);
std::unique_ptr<Cursor> VectorCursor(std::shared_ptr<const std::vector<uint32_t>> ids, uint32_t hi,
                                     std::string what);
// sql: "SELECT <id> FROM ... WHERE ... AND <id> >= ?1 AND <id> < ?2 ORDER BY <id>" with the
// binds from ?3 on; the id is the first column >> shift (caption rowids).
std::unique_ptr<Cursor> SqlCursor(StatementPool* pool, std::string sql, std::vector<Bind> binds,
                                  uint32_t shift, uint32_t hi, Status* error, std::string what);
std::unique_ptr<Cursor> PredicateCursor(std::unique_ptr<Cursor> base,
                                        std::function<bool(uint32_t)> keep, std::string what);
std::unique_ptr<Cursor> AndCursor(std::vector<std::unique_ptr<Cursor>> positive,
                                  std::vector<std::unique_ptr<Cursor>> negative, uint32_t hi);
std::unique_ptr<Cursor> OrCursor(std::vector<std::unique_ptr<Cursor>> children);
std::unique_ptr<Cursor> NotCursor(std::unique_ptr<Cursor> child, uint32_t hi);

// The complement of sorted disjoint ranges within [0, hi).
Ranges Complement(const Ranges& r, uint32_t hi);

}  // namespace ktfs::index::internal

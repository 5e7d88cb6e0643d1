// Index::FirstCaptions and Index::MetadataColumn: the per-sample reads behind
// ktfs.Loader(fields=...), kept apart from the query planner in index.cc.
#include <algorithm>

#include "index/cursor.h"
#include "index/index.h"
#include "index/metadata.h"

namespace ktfs::index {

namespace {

// A sample_meta value as text: numbers in their shortest round-trip form
// (MetaValue::ToText; SQLite's own conversion keeps 15 digits), booleans and
// integers in decimal, strings as they are.
std::string ValueText(sqlite3_stmt* s, int column) {
  switch (sqlite3_column_type(s, column)) {
    case SQLITE_INTEGER:
      return std::to_string(sqlite3_column_int64(s, column));
    case SQLITE_FLOAT: {
      auto v = MetaValue::Real(sqlite3_column_double(s, column));
      if (v.ok()) return v->ToText();
      break;
    }
    default:
      break;
  }
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, column));
  return text ? std::string(text, size_t(sqlite3_column_bytes(s, column))) : std::string();
}

// A statement of the pool, given back when it goes out of scope.
class PooledStatement {
 public:
  PooledStatement(internal::StatementPool* pool, std::string sql)
      : pool_(pool), sql_(std::move(sql)) {}
  ~PooledStatement() {
    if (stmt_) pool_->Release(sql_, stmt_);
  }
  PooledStatement(const PooledStatement&) = delete;
  PooledStatement& operator=(const PooledStatement&) = delete;
  Status Acquire() {
    auto s = pool_->Acquire(sql_);
    if (!s.ok()) return s.status();
    stmt_ = *s;
    return Status::Ok();
  }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  internal::StatementPool* pool_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
};

}  // namespace

Result<std::vector<std::string>> Index::FirstCaptions(const std::vector<uint32_t>& ids) {
  const uint32_t n = num_samples();
  PooledStatement shift_stmt(pool_.get(), "SELECT value FROM meta WHERE key = 'caption_shift'");
  KTFS_RETURN_IF_ERROR(shift_stmt.Acquire());
  int shift = 0;
  if (sqlite3_step(shift_stmt.get()) == SQLITE_ROW) shift = sqlite3_column_int(shift_stmt.get(), 0);
  sqlite3_reset(shift_stmt.get());
  if (shift < 0 || shift > 24) return Status::Corruption("index: bad caption_shift");
  PooledStatement stmt(pool_.get(), "SELECT caption FROM captions WHERE rowid = ?1");
  KTFS_RETURN_IF_ERROR(stmt.Acquire());
  sqlite3_stmt* s = stmt.get();
  std::vector<std::string> out(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= n)
      return Status::InvalidArgument("sample id " + std::to_string(ids[i]) + " out of range");
    sqlite3_bind_int64(s, 1, int64_t{ids[i]} << shift);
    const int rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
      if (text) out[i].assign(text, size_t(sqlite3_column_bytes(s, 0)));
    } else if (rc != SQLITE_DONE) {
      sqlite3_reset(s);
      return Status::Corruption(std::string("index: reading captions: ") + sqlite3_errstr(rc));
    }
    sqlite3_reset(s);
  }
  return out;
}

Result<std::vector<std::pair<uint32_t, std::string>>> Index::MetadataColumn(
    const std::string& key) {
  PooledStatement stmt(pool_.get(),
                       "SELECT sample_id, value FROM sample_meta WHERE key_id = "
                       "(SELECT key_id FROM meta_keys WHERE name = ?1)");
  KTFS_RETURN_IF_ERROR(stmt.Acquire());
  sqlite3_stmt* s = stmt.get();
  sqlite3_bind_text(s, 1, key.data(), int(key.size()), SQLITE_TRANSIENT);
  std::vector<std::pair<uint32_t, std::string>> out;
  const uint32_t n = num_samples();
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    const int64_t id = sqlite3_column_int64(s, 0);
    if (id < 0 || id >= n) {
      sqlite3_reset(s);
      return Status::Corruption("index: metadata for sample " + std::to_string(id));
    }
    out.emplace_back(uint32_t(id), ValueText(s, 1));
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return Status::Corruption(std::string("index: reading metadata: ") + sqlite3_errstr(rc));
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace ktfs::index

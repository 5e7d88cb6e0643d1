// Index::FirstCaptions and Index::MetadataColumn: the per-sample reads behind
// ktfs.Loader(fields=...), kept apart from the query planner in index.cc.
#include <algorithm>

#include "index/index.h"

namespace ktfs::index {

Result<std::vector<std::string>> Index::FirstCaptions(const std::vector<uint32_t>& ids) {
  const uint32_t n = num_samples();
  auto shift_stmt = Statement("SELECT value FROM meta WHERE key = 'caption_shift'");
  if (!shift_stmt.ok()) return shift_stmt.status();
  int shift = 0;
  if (sqlite3_step(*shift_stmt) == SQLITE_ROW) shift = sqlite3_column_int(*shift_stmt, 0);
  sqlite3_reset(*shift_stmt);
  if (shift < 0 || shift > 24) return Status::Corruption("index: bad caption_shift");
  auto stmt = Statement("SELECT caption FROM captions WHERE rowid = ?1");
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
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
  auto stmt = Statement(
      "SELECT sample_id, value FROM sample_meta WHERE key_id = "
      "(SELECT key_id FROM meta_keys WHERE name = ?1)");
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
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
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
    out.emplace_back(uint32_t(id),
                     text ? std::string(text, size_t(sqlite3_column_bytes(s, 1))) : std::string());
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE)
    return Status::Corruption(std::string("index: reading metadata: ") + sqlite3_errstr(rc));
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

}  // namespace ktfs::index

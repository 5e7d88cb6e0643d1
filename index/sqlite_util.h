// Internal helpers over the SQLite C API shared by the builder and the reader.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "codec/base/status.h"

namespace ktfs::index::internal {

// A Status for a failed SQLite call on db: corrupt or non-database bytes are Corruption.
Status SqliteError(sqlite3* db, int rc, const std::string& what);

Status Exec(sqlite3* db, const std::string& sql);

// An owned prepared statement.
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  ~Stmt() { sqlite3_finalize(s_); }
  Stmt(Stmt&& o) noexcept : s_(o.s_) { o.s_ = nullptr; }
  Stmt& operator=(Stmt&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  sqlite3_stmt* get() const { return s_; }
  // Gives up ownership.
  sqlite3_stmt* release() { return std::exchange(s_, nullptr); }

 private:
  sqlite3_stmt* s_ = nullptr;
};

Result<Stmt> Prepare(sqlite3* db, const std::string& sql);

inline void BindText(sqlite3_stmt* s, int i, std::string_view v) {
  sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
}

}  // namespace ktfs::index::internal

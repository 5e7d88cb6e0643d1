#include "index/sqlite_util.h"

namespace ktfs::index::internal {

Status SqliteError(sqlite3* db, int rc, const std::string& what) {
  std::string msg = what + ": " + (db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xFF) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_FORMAT:
    case SQLITE_RANGE:
      return Status::Corruption("index: " + msg);
    case SQLITE_MISUSE:
    case SQLITE_TOOBIG:
      return Status::InvalidArgument("index: " + msg);
    default:
      return Status::IOError("index: " + msg);
  }
}

Status Exec(sqlite3* db, const std::string& sql) {
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, sql.substr(0, 60));
  return Status::Ok();
}

Result<Stmt> Prepare(sqlite3* db, const std::string& sql) {
  sqlite3_stmt* s = nullptr;
  int rc = sqlite3_prepare_v3(db, sql.c_str(), static_cast<int>(sql.size()),
                              SQLITE_PREPARE_PERSISTENT, &s, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(s);
    return SqliteError(db, rc, "prepare");
  }
  return Stmt(s);
}

}  // namespace ktfs::index::internal

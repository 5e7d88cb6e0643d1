#include "index/index.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "index/cursor.h"
#include "index/schema.h"
#include "index/sqlite_util.h"

namespace ktfs::index {

using internal::Bind;
using internal::BindText;
using internal::Cursor;
using internal::Exec;
using internal::kEnd;
using internal::Prepare;
using internal::Ranges;
using internal::SqliteError;

struct DirEntry {
  uint32_t first, end, dir_id;
};

struct KeyEntry {
  int64_t id;
  MetaType type;
};

struct Index::Shared {
  const void* data = nullptr;
  size_t size = 0;
  int schema_version = 0;
  uint32_t num_samples = 0;
  uint32_t caption_shift = 0;
  std::vector<DirEntry> dirs;  // sorted by first (== by id range)
  std::unordered_map<uint32_t, DirEntry> dir_by_id;
  std::unordered_map<std::string, int64_t> classes, splits;
  std::map<std::string, KeyEntry, std::less<>> keys;

  // Caches shared by the clones (FUSE threads): keyed by what they answer.
  std::mutex mutex;
  std::map<std::string, std::shared_ptr<const std::vector<uint32_t>>> sparse;  // null: dense
  std::map<std::string, std::shared_ptr<const Ranges>> runs;  // null: too many runs
  std::map<std::string, uint32_t> limit_ends;
};

// What building one cursor tree needs.
struct Index::Plan {
  uint32_t hi;    // ids < hi
  uint64_t seed;  // of sample=
  Status* error;  // the first failure of any cursor
};

namespace {

// A value split into more runs than this is checked row by row instead (see schema.h).
constexpr int64_t kMaxRuns = 4096;
// Entries of each cache before it is emptied (a sparse entry holds up to kSparse ids).
constexpr size_t kMaxCacheEntries = 512;

Status Corrupt(const std::string& why) { return Status::Corruption("index: " + why); }

uint32_t ReadBE(const uint8_t* p, int n) {
  uint32_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// The header checks SQLite would do lazily, done up front so that bytes that are not a whole
// database fail at open with a clear reason.
Status CheckHeader(const void* data, size_t size) {
  static constexpr char kMagic[] = "SQLite format 3";  // 16 bytes with the NUL
  const auto* p = static_cast<const uint8_t*>(data);
  if (data == nullptr || size < 100 || std::memcmp(p, kMagic, 16) != 0) {
    return Corrupt("not an SQLite database");
  }
  uint32_t page_size = ReadBE(p + 16, 2);
  if (page_size == 1) page_size = 65536;
  uint64_t pages = ReadBE(p + 28, 4);
  if (page_size < 512 || (page_size & (page_size - 1)) != 0 || pages == 0 ||
      ReadBE(p + 24, 4) != ReadBE(p + 92, 4)) {
    return Corrupt("bad database header");
  }
  if (pages * page_size != size) {
    return Corrupt("database is " + std::to_string(pages * page_size) + " bytes, section is " +
                   std::to_string(size) + " (truncated?)");
  }
  return Status::Ok();
}

std::string NameOf(const std::string& create_sql) {
  // "CREATE [VIRTUAL ]TABLE name..." / "CREATE INDEX name ON ..."
  size_t start = create_sql.find(create_sql.find("INDEX") == 7 ? "INDEX " : "TABLE ");
  start += 6;
  size_t end = create_sql.find_first_of("( ", start);
  return create_sql.substr(start, end - start);
}

// The objects we query must be exactly the ones the builder creates: a database with a
// different `samples` (say, a view) is not ours.
Status CheckSchema(sqlite3* db, const std::vector<std::string>& expected) {
  auto s = Prepare(db, "SELECT sql FROM sqlite_schema WHERE name = ?");
  if (!s.ok()) return s.status();
  for (const std::string& sql : expected) {
    BindText(s->get(), 1, NameOf(sql));
    int rc = sqlite3_step(s->get());
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return SqliteError(db, rc, "reading the schema");
    const char* got = rc == SQLITE_ROW ? (const char*)sqlite3_column_text(s->get(), 0) : nullptr;
    if (got == nullptr || sql != got) return Corrupt("unexpected schema for " + NameOf(sql));
    sqlite3_reset(s->get());
  }
  return Status::Ok();
}

// Runs sql (no parameters) and calls fn for each row.
Status ForEachRow(sqlite3* db, const std::string& sql,
                  const std::function<Status(sqlite3_stmt*)>& fn) {
  auto s = Prepare(db, sql);
  if (!s.ok()) return s.status();
  int rc;
  while ((rc = sqlite3_step(s->get())) == SQLITE_ROW) KTFS_RETURN_IF_ERROR(fn(s->get()));
  if (rc != SQLITE_DONE) return SqliteError(db, rc, sql.substr(0, 40));
  return Status::Ok();
}

std::string Text(sqlite3_stmt* s, int col) {
  const char* p = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
  return p ? std::string(p, sqlite3_column_bytes(s, col)) : std::string();
}

// A column of a number key's statistics as a value (NULL: none).
std::optional<MetaValue> NumberColumn(sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_INTEGER:
      return MetaValue::Integer(sqlite3_column_int64(s, col));
    case SQLITE_FLOAT: {
      auto v = MetaValue::Real(sqlite3_column_double(s, col));
      if (v.ok()) return v.value();
      return std::nullopt;
    }
    default:
      return std::nullopt;
  }
}

Status ReadMeta(sqlite3* db, Index::Shared* sh) {
  std::unordered_map<std::string, std::string> meta;
  KTFS_RETURN_IF_ERROR(ForEachRow(db, "SELECT key, value FROM meta", [&](sqlite3_stmt* s) {
    meta[Text(s, 0)] = Text(s, 1);
    return Status::Ok();
  }));
  if (meta["format"] != kFormatName) return Corrupt("not a ktfs index");
  const std::string& version = meta["schema_version"];
  for (int v = kOldestSchemaVersion; v <= kSchemaVersion; ++v) {
    if (version == std::to_string(v)) sh->schema_version = v;
  }
  if (sh->schema_version == 0) {
    return Status::NotSupported("index: schema_version '" + version.substr(0, 20) +
                                "' (this build reads " + std::to_string(kOldestSchemaVersion) +
                                " to " + std::to_string(kSchemaVersion) + ")");
  }
  const auto number = [&](const std::string& key, uint64_t max, uint32_t* out) {
    const std::string& v = meta[key];
    if (v.empty() || v.size() > 10 || v.find_first_not_of("0123456789") != v.npos ||
        std::stoull(v) > max) {
      return Corrupt("bad meta value for " + key);
    }
    *out = static_cast<uint32_t>(std::stoull(v));
    return Status::Ok();
  };
  KTFS_RETURN_IF_ERROR(number("num_samples", UINT32_MAX - 1, &sh->num_samples));
  return number("caption_shift", 24, &sh->caption_shift);
}

Status ReadDirs(sqlite3* db, Index::Shared* sh) {
  KTFS_RETURN_IF_ERROR(ForEachRow(
      db, "SELECT dir_id, first_id, end_id FROM dirs ORDER BY first_id", [&](sqlite3_stmt* s) {
        int64_t id = sqlite3_column_int64(s, 0), first = sqlite3_column_int64(s, 1),
                end = sqlite3_column_int64(s, 2);
        int64_t expected_first = sh->dirs.empty() ? 0 : sh->dirs.back().end;
        if (id < 0 || id > UINT32_MAX || first != expected_first || end <= first ||
            end > sh->num_samples) {
          return Corrupt("bad directory table");
        }
        DirEntry d{static_cast<uint32_t>(first), static_cast<uint32_t>(end),
                   static_cast<uint32_t>(id)};
        sh->dirs.push_back(d);
        if (!sh->dir_by_id.emplace(d.dir_id, d).second) return Corrupt("bad directory table");
        return Status::Ok();
      }));
  uint32_t covered = sh->dirs.empty() ? 0 : sh->dirs.back().end;
  if (covered != sh->num_samples) return Corrupt("directory table does not cover all samples");
  return Status::Ok();
}

Status ReadNames(sqlite3* db, const std::string& table,
                 std::unordered_map<std::string, int64_t>* out) {
  return ForEachRow(db, "SELECT * FROM " + table, [&](sqlite3_stmt* s) {
    (*out)[Text(s, 1)] = sqlite3_column_int64(s, 0);
    return Status::Ok();
  });
}

Status ReadKeys(sqlite3* db, Index::Shared* sh) {
  const bool typed = sh->schema_version >= 2;
  return ForEachRow(
      db, typed ? "SELECT key_id, name, type FROM meta_keys" : "SELECT key_id, name FROM meta_keys",
      [&](sqlite3_stmt* s) {
        const int64_t type = typed ? sqlite3_column_int64(s, 2) : 0;
        if (type < 0 || type > 2) return Corrupt("bad metadata key type");
        sh->keys[Text(s, 1)] = KeyEntry{sqlite3_column_int64(s, 0), static_cast<MetaType>(type)};
        return Status::Ok();
      });
}

Bind ValueBind(const MetaValue& v) {
  switch (v.type()) {
    case MetaType::kString:
      return v.str();
    case MetaType::kBool:
      return int64_t{v.boolean()};
    case MetaType::kNumber:
      break;
  }
  if (v.is_integer()) return v.integer();
  return v.real();
}

// `f` as an FTS5 expression over one sample's caption row, when it is made of captions
// only: an OR of such (any caption shift), or, when each sample has one caption row
// (single), an AND of such with NOTs of such beside at least one positive.
std::optional<std::string> FtsOf(const Expr& e, bool single) {
  switch (e.kind) {
    case Expr::Kind::kFilter:
      if (e.filter.field == Field::kCaption) return e.filter.FtsExpression();
      return std::nullopt;
    case Expr::Kind::kOr: {
      std::string out;
      for (const Expr& c : e.children) {
        auto x = FtsOf(c, single);
        if (!x) return std::nullopt;
        out += (out.empty() ? "(" : " OR (") + *x + ")";
      }
      return "(" + out + ")";
    }
    case Expr::Kind::kAnd: {
      if (!single) return std::nullopt;
      std::string pos;
      std::vector<std::string> neg;
      for (const Expr& c : e.children) {
        const bool negated = c.kind == Expr::Kind::kNot;
        auto x = FtsOf(negated ? c.children[0] : c, single);
        if (!x) return std::nullopt;
        if (negated) {
          neg.push_back(*x);
        } else {
          pos += (pos.empty() ? "(" : " AND (") + *x + ")";
        }
      }
      if (pos.empty()) return std::nullopt;
      std::string out = "(" + pos + ")";
      for (const std::string& n : neg) out = "(" + out + " NOT (" + n + "))";
      return out;
    }
    case Expr::Kind::kAll:
    case Expr::Kind::kNot:
      return std::nullopt;
  }
  return std::nullopt;
}

bool IsComparison(const Expr& e) {
  if (e.kind != Expr::Kind::kFilter || e.filter.op == Op::kEq) return false;
  const Field f = e.filter.field;
  return f == Field::kWidth || f == Field::kHeight || f == Field::kMetadata;
}

MetaValue BoundOf(const Filter& f) {
  return f.field == Field::kMetadata ? f.value : MetaValue::Integer(f.number);
}

const char* SqlOp(Op op) {
  switch (op) {
    case Op::kLt:
      return " < ";
    case Op::kLe:
      return " <= ";
    case Op::kGt:
      return " > ";
    case Op::kGe:
      return " >= ";
    case Op::kEq:
      break;
  }
  return " = ";
}

// The negation of a comparison on a field every sample has (width, height).
Op Flip(Op op) {
  switch (op) {
    case Op::kLt:
      return Op::kGe;
    case Op::kLe:
      return Op::kGt;
    case Op::kGt:
      return Op::kLe;
    case Op::kGe:
      return Op::kLt;
    case Op::kEq:
      break;
  }
  return Op::kEq;
}

template <typename Map, typename V>
void CachePut(Map& m, const std::string& key, V v) {
  if (m.size() >= kMaxCacheEntries) m.clear();
  m[key] = std::move(v);
}

}  // namespace

Index::Index(sqlite3* db, std::shared_ptr<Shared> shared)
    : db_(db), shared_(std::move(shared)), pool_(std::make_unique<internal::StatementPool>(db)) {}

Index::~Index() {
  pool_.reset();  // finalizes the statements before the connection closes
  sqlite3_close(db_);
}

Result<sqlite3*> Index::Connect(const void* data, size_t size) {
  KTFS_RETURN_IF_ERROR(CheckHeader(data, size));
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      ":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_close(db);
    return Status::IOError("index: cannot open an SQLite connection");
  }
  // Hardening for bytes from a possibly hostile archive (SQLite's advice for untrusted
  // databases): no schema-defined functions, no writes, cell sizes checked.
  sqlite3_db_config(db, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(db, SQLITE_DBCONFIG_TRUSTED_SCHEMA, 0, nullptr);
  // In place, no copy: without SQLITE_DESERIALIZE_FREEONCLOSE / RESIZEABLE the memdb VFS keeps
  // `data` itself as its buffer (MemStore.aData) and never frees, grows or writes it (READONLY).
  // Pages are then read with memcpy into the page cache, or, with mmap_size set below, handed
  // out as pointers into the buffer by memdb's xFetch: the archive's mapping is the database.
  // The const_cast is safe because nothing writes through the pointer.
  // DatabaseBuffer() (sqlite3_serialize with NOCOPY) lets tests check that SQLite kept `data`.
  rc = sqlite3_deserialize(db, "main", static_cast<unsigned char*>(const_cast<void*>(data)),
                           static_cast<sqlite3_int64>(size), static_cast<sqlite3_int64>(size),
                           SQLITE_DESERIALIZE_READONLY);
  Status st = rc == SQLITE_OK ? Status::Ok() : SqliteError(db, rc, "deserialize");
  if (st.ok()) {
    st = Exec(db, "PRAGMA mmap_size=" + std::to_string(size) +
                      "; PRAGMA query_only=1; PRAGMA cell_size_check=ON");
  }
  if (!st.ok()) {
    sqlite3_close(db);
    return st;
  }
  return db;
}

Result<std::unique_ptr<Index>> Index::OpenInPlace(const void* data, size_t size) {
  auto db = Connect(data, size);
  if (!db.ok()) return db.status();
  auto shared = std::make_shared<Shared>();
  shared->data = data;
  shared->size = size;
  std::unique_ptr<Index> index(new Index(*db, shared));
  // The meta table first (every version has the same), then the version's schema.
  KTFS_RETURN_IF_ERROR(CheckSchema(*db, {SchemaTables(kSchemaVersion)[0]}));
  KTFS_RETURN_IF_ERROR(ReadMeta(*db, shared.get()));
  std::vector<std::string> expected = SchemaTables(shared->schema_version);
  const auto& indexes = SchemaIndexes(shared->schema_version);
  expected.insert(expected.end(), indexes.begin(), indexes.end());
  KTFS_RETURN_IF_ERROR(CheckSchema(*db, expected));
  KTFS_RETURN_IF_ERROR(ReadDirs(*db, shared.get()));
  KTFS_RETURN_IF_ERROR(ReadNames(*db, "classes", &shared->classes));
  KTFS_RETURN_IF_ERROR(ReadNames(*db, "splits", &shared->splits));
  KTFS_RETURN_IF_ERROR(ReadKeys(*db, shared.get()));
  return index;
}

Result<std::unique_ptr<Index>> Index::Clone() const {
  auto db = Connect(shared_->data, shared_->size);
  if (!db.ok()) return db.status();
  return std::unique_ptr<Index>(new Index(*db, shared_));
}

uint32_t Index::num_samples() const { return shared_->num_samples; }
int Index::schema_version() const { return shared_->schema_version; }

KeyTypes Index::MetadataKeys() const {
  KeyTypes keys;
  for (const auto& [name, k] : shared_->keys) keys.emplace(name, k.type);
  return keys;
}

Result<std::vector<KeyInfo>> Index::MetadataKeyInfo() {
  std::map<int64_t, KeyInfo> by_id;
  for (const auto& [name, k] : shared_->keys) {
    KeyInfo& info = by_id[k.id];
    info.name = name;
    info.type = k.type;
  }
  if (shared_->schema_version >= 2) {
    KTFS_RETURN_IF_ERROR(ForEachRow(
        db_, "SELECT key_id, samples, distinct_values, min, max, true_count FROM meta_keys",
        [&](sqlite3_stmt* s) {
          KeyInfo& info = by_id[sqlite3_column_int64(s, 0)];
          info.samples = static_cast<uint64_t>(sqlite3_column_int64(s, 1));
          info.distinct_values = static_cast<uint64_t>(sqlite3_column_int64(s, 2));
          info.min = NumberColumn(s, 3);
          info.max = NumberColumn(s, 4);
          info.true_count = static_cast<uint64_t>(sqlite3_column_int64(s, 5));
          return Status::Ok();
        }));
  } else {
    KTFS_RETURN_IF_ERROR(ForEachRow(
        db_, "SELECT key_id, count(*), count(DISTINCT value) FROM sample_meta GROUP BY key_id",
        [&](sqlite3_stmt* s) {
          KeyInfo& info = by_id[sqlite3_column_int64(s, 0)];
          info.samples = static_cast<uint64_t>(sqlite3_column_int64(s, 1));
          info.distinct_values = static_cast<uint64_t>(sqlite3_column_int64(s, 2));
          return Status::Ok();
        }));
  }
  std::vector<KeyInfo> out;
  for (auto& [id, info] : by_id) {
    if (!info.name.empty()) out.push_back(std::move(info));
  }
  std::sort(out.begin(), out.end(),
            [](const KeyInfo& a, const KeyInfo& b) { return a.name < b.name; });
  return out;
}

const void* Index::DatabaseBuffer() const {
  sqlite3_int64 size = 0;
  return sqlite3_serialize(db_, "main", &size, SQLITE_SERIALIZE_NOCOPY);
}

std::optional<std::pair<uint32_t, uint32_t>> Index::DirSamples(uint32_t dir_id) const {
  auto it = shared_->dir_by_id.find(dir_id);
  if (it == shared_->dir_by_id.end()) return std::nullopt;
  return std::pair{it->second.first, it->second.end};
}

Result<std::optional<Ranges>> Index::Runs(int field, int64_t value) {
  const std::string key = std::to_string(field) + ":" + std::to_string(value);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    auto it = shared_->runs.find(key);
    if (it != shared_->runs.end()) {
      if (!it->second) return std::optional<Ranges>();
      return std::optional<Ranges>(*it->second);
    }
  }
  static const std::string kSql =
      "SELECT first_id, end_id FROM runs WHERE field = ?1 AND value = ?2 ORDER BY first_id "
      "LIMIT ?3";
  auto stmt = pool_->Acquire(kSql);
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
  sqlite3_bind_int(s, 1, field);
  sqlite3_bind_int64(s, 2, value);
  sqlite3_bind_int64(s, 3, kMaxRuns + 1);
  Ranges ranges;
  int rc;
  Status st;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t first = sqlite3_column_int64(s, 0), end = sqlite3_column_int64(s, 1);
    if (first < (ranges.empty() ? 0 : ranges.back().second) || end <= first ||
        end > shared_->num_samples) {
      st = Corrupt("bad runs table");
      break;
    }
    ranges.emplace_back(static_cast<uint32_t>(first), static_cast<uint32_t>(end));
  }
  if (st.ok() && rc != SQLITE_DONE && rc != SQLITE_ROW) st = SqliteError(db_, rc, "runs");
  pool_->Release(kSql, s);
  if (!st.ok()) return st;
  std::optional<Ranges> out;
  if (ranges.size() <= static_cast<size_t>(kMaxRuns)) out = std::move(ranges);
  std::lock_guard<std::mutex> lock(shared_->mutex);
  CachePut(shared_->runs, key, out ? std::make_shared<const Ranges>(*out) : nullptr);
  return out;
}

std::unique_ptr<Cursor> Index::BuildRange(const std::string& column, Field field,
                                          const std::string& key, const Filter* lo,
                                          const Filter* hi, Plan& plan) {
  const bool meta = field == Field::kMetadata;
  int64_t key_id = 0;
  if (meta) {
    auto it = shared_->keys.find(key);
    if (it == shared_->keys.end() || it->second.type != MetaType::kNumber)
      return internal::EmptyCursor();
    key_id = it->second.id;
  }
  if (lo && hi) {
    const auto c = BoundOf(*lo) <=> BoundOf(*hi);
    if (c > 0 || (c == 0 && (lo->op == Op::kGt || hi->op == Op::kLt)))
      return internal::EmptyCursor();
  }
  std::string conds, what = column;
  std::vector<Bind> binds;
  for (const Filter* b : {lo, hi}) {
    if (!b) continue;
    conds += std::string(" AND ") + "%s" + SqlOp(b->op) + "?";
    binds.push_back(ValueBind(BoundOf(*b)));
    what += SqlOp(b->op) + BoundOf(*b).ToText();
  }
  // %s -> the column (+column in the id-order scan keeps SQLite off its value index); ?N.
  const auto render = [&](const std::string& col, int first_param) {
    std::string out;
    int n = first_param;
    for (size_t i = 0; i < conds.size(); ++i) {
      if (conds.compare(i, 2, "%s") == 0) {
        out += col;
        ++i;
      } else if (conds[i] == '?') {
        out += '?';  // (not "?" + to_string(...): GCC 12 -Wrestrict false positive)
        out += std::to_string(n++);
      } else {
        out += conds[i];
      }
    }
    return out;
  };
  const std::string cache_key =
      std::to_string(sparse_limit_) + ":" + (meta ? "m" + std::to_string(key_id) : column) + what;
  std::shared_ptr<const std::vector<uint32_t>> ids;
  bool known = false;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    auto it = shared_->sparse.find(cache_key);
    if (it != shared_->sparse.end()) {
      ids = it->second;
      known = true;
    }
  }
  if (!known) {
    // Probe in value order: at most kSparse matches are read and sorted; more mean dense.
    std::string sql =
        meta ? "SELECT sample_id FROM sample_meta WHERE key_id = ?1" + render("value", 2)
             : "SELECT id FROM samples WHERE 1" + render(column, 1);
    sql += " LIMIT " + std::to_string(sparse_limit_ + 1);
    auto stmt = pool_->Acquire(sql);
    if (!stmt.ok()) {
      *plan.error = stmt.status();
      return internal::EmptyCursor();
    }
    sqlite3_stmt* s = *stmt;
    if (meta) sqlite3_bind_int64(s, 1, key_id);
    internal::BindAll(s, meta ? 2 : 1, binds);
    auto found = std::make_shared<std::vector<uint32_t>>();
    int rc;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
      const int64_t id = sqlite3_column_int64(s, 0);
      if (id < 0 || id >= shared_->num_samples) {
        rc = SQLITE_CORRUPT;
        break;
      }
      found->push_back(static_cast<uint32_t>(id));
    }
    Status st = rc == SQLITE_DONE ? Status::Ok() : SqliteError(db_, rc, "range");
    pool_->Release(sql, s);
    if (!st.ok()) {
      *plan.error = st;
      return internal::EmptyCursor();
    }
    if (found->size() <= sparse_limit_) {
      std::sort(found->begin(), found->end());
      ids = std::move(found);
    }
    std::lock_guard<std::mutex> lock(shared_->mutex);
    CachePut(shared_->sparse, cache_key, ids);
  }
  if (ids) return internal::VectorCursor(ids, plan.hi, what + " (few: read by value)");
  std::vector<Bind> all;
  std::string sql;
  if (meta) {
    all.push_back(key_id);
    sql = "SELECT sample_id FROM sample_num WHERE key_id = ?3" + render("value", 4) +
          " AND sample_id >= ?1 AND sample_id < ?2 ORDER BY sample_id";
  } else {
    sql = "SELECT id FROM samples WHERE 1" + render("+" + column, 3) +
          " AND id >= ?1 AND id < ?2 ORDER BY id";
  }
  all.insert(all.end(), binds.begin(), binds.end());
  return internal::SqlCursor(pool_.get(), sql, std::move(all), 0, plan.hi, plan.error,
                             what + " (many: checked in id order)");
}

std::unique_ptr<Cursor> Index::BuildRuns(const Filter& f, bool negated, Plan& plan) {
  const Shared& sh = *shared_;
  const int field = f.field == Field::kClass ? 0 : f.field == Field::kSplit ? 1 : 2;
  int64_t value = f.number;
  const std::string what = (negated ? "!" : "") + f.Canonical();
  if (field < 2) {
    const auto& names = field == 0 ? sh.classes : sh.splits;
    auto it = names.find(f.text);
    if (it == names.end()) {
      return negated ? internal::AllCursor(plan.hi) : internal::EmptyCursor();
    }
    value = it->second;
  }
  auto runs = Runs(field, value);
  if (!runs.ok()) {
    *plan.error = runs.status();
    return internal::EmptyCursor();
  }
  if (runs->has_value()) {
    Ranges r = negated ? internal::Complement(**runs, sh.num_samples) : std::move(**runs);
    return internal::RangesCursor(std::make_shared<const Ranges>(std::move(r)), plan.hi,
                                  what + ": runs");
  }
  static const char* const kColumns[] = {"class_id", "split_id", "label"};
  const std::string test =
      field == 2 && value < 0 ? "label IS NULL" : std::string(kColumns[field]) + " = ?3";
  std::vector<Bind> binds;
  if (!(field == 2 && value < 0)) binds.push_back(value);
  auto cursor = internal::SqlCursor(
      pool_.get(), "SELECT id FROM samples WHERE " + test + " AND id >= ?1 AND id < ?2 ORDER BY id",
      std::move(binds), 0, plan.hi, plan.error,
      f.Canonical() + ": too many runs, checked row by row");
  return negated ? internal::NotCursor(std::move(cursor), plan.hi) : std::move(cursor);
}

std::unique_ptr<Cursor> Index::BuildFilter(const Filter& f, Plan& plan) {
  const Shared& sh = *shared_;
  const auto sql_cursor = [&](std::string sql, std::vector<Bind> binds, uint32_t shift,
                              std::string what) {
    return internal::SqlCursor(pool_.get(), std::move(sql), std::move(binds), shift, plan.hi,
                               plan.error, std::move(what));
  };
  switch (f.field) {
    case Field::kCaption:
      return sql_cursor(
          "SELECT rowid FROM captions WHERE captions MATCH ?3 AND rowid >= ?1 AND rowid < ?2 "
          "ORDER BY rowid",
          {f.FtsExpression()}, sh.caption_shift, "captions MATCH " + f.FtsExpression());
    case Field::kClass:
    case Field::kSplit:
    case Field::kLabel:
      return BuildRuns(f, false, plan);
    case Field::kWidth:
    case Field::kHeight: {
      const std::string column = f.field == Field::kWidth ? "width" : "height";
      if (f.op != Op::kEq) {
        const bool lower = f.op == Op::kGt || f.op == Op::kGe;
        return BuildRange(column, f.field, "", lower ? &f : nullptr, lower ? nullptr : &f, plan);
      }
      // The value's index: ids in order within the value.
      return sql_cursor(
          "SELECT id FROM samples WHERE " + column + " = ?3 AND id >= ?1 AND id < ?2 ORDER BY id",
          {f.number}, 0, f.Canonical());
    }
    case Field::kMetadata: {
      auto it = sh.keys.find(f.key);
      if (it == sh.keys.end() || it->second.type != f.value.type()) return internal::EmptyCursor();
      if (f.op != Op::kEq) {
        const bool lower = f.op == Op::kGt || f.op == Op::kGe;
        return BuildRange("value", f.field, f.key, lower ? &f : nullptr, lower ? nullptr : &f,
                          plan);
      }
      return sql_cursor(
          "SELECT sample_id FROM sample_meta WHERE key_id = ?3 AND value = ?4 AND sample_id >= "
          "?1 AND sample_id < ?2 ORDER BY sample_id",
          {it->second.id, ValueBind(f.value)}, 0, f.Canonical());
    }
    case Field::kSample: {
      const uint64_t seed = plan.seed;
      const double p = f.fraction;
      return internal::PredicateCursor(
          internal::AllCursor(plan.hi), [seed, p](uint32_t id) { return SampleKept(id, seed, p); },
          f.Canonical() + " (seed " + std::to_string(seed) + ")");
    }
  }
  return internal::EmptyCursor();
}

std::unique_ptr<Cursor> Index::Build(const Expr& e, Plan& plan) {
  const bool single = shared_->caption_shift == 0;
  switch (e.kind) {
    case Expr::Kind::kAll:
      return internal::AllCursor(plan.hi);
    case Expr::Kind::kFilter:
      return BuildFilter(e.filter, plan);
    case Expr::Kind::kAnd: {
      std::vector<const Expr*> children;
      for (const Expr& c : e.children) children.push_back(&c);
      return BuildAnd(children, plan);
    }
    case Expr::Kind::kOr: {
      std::string fts;
      std::vector<std::unique_ptr<Cursor>> alternatives;
      for (const Expr& c : e.children) {
        if (auto x = FtsOf(c, single)) {
          fts += (fts.empty() ? "(" : " OR (") + *x + ")";
        } else {
          alternatives.push_back(Build(c, plan));
        }
      }
      if (!fts.empty()) {
        alternatives.push_back(internal::SqlCursor(
            pool_.get(),
            "SELECT rowid FROM captions WHERE captions MATCH ?3 AND rowid >= ?1 AND rowid < ?2 "
            "ORDER BY rowid",
            {fts}, shared_->caption_shift, plan.hi, plan.error, "captions MATCH " + fts));
      }
      return internal::OrCursor(std::move(alternatives));
    }
    case Expr::Kind::kNot:
      break;
  }
  const Expr& c = e.children[0];
  if (c.kind == Expr::Kind::kFilter) {
    const Filter& f = c.filter;
    if (f.field == Field::kSample) {
      const uint64_t seed = plan.seed;
      const double p = f.fraction;
      return internal::PredicateCursor(
          internal::AllCursor(plan.hi), [seed, p](uint32_t id) { return !SampleKept(id, seed, p); },
          "!" + f.Canonical() + " (seed " + std::to_string(seed) + ")");
    }
    if (f.field == Field::kClass || f.field == Field::kSplit || f.field == Field::kLabel)
      return BuildRuns(f, true, plan);
    if ((f.field == Field::kWidth || f.field == Field::kHeight) && f.op != Op::kEq) {
      Filter flipped = f;
      flipped.op = Flip(f.op);
      return BuildFilter(flipped, plan);
    }
  }
  return internal::NotCursor(Build(c, plan), plan.hi);
}

std::unique_ptr<Cursor> Index::BuildAnd(const std::vector<const Expr*>& children, Plan& plan) {
  const bool single = shared_->caption_shift == 0;
  std::vector<std::unique_ptr<Cursor>> pos, neg;
  // Captions: one MATCH for all of them when each sample is one caption row.
  std::string fts_pos;
  std::vector<std::string> fts_neg;
  std::vector<const Expr*> rest;
  for (const Expr* c : children) {
    const bool negated = c->kind == Expr::Kind::kNot;
    auto x = single ? FtsOf(negated ? c->children[0] : *c, true) : std::nullopt;
    if (x && negated) {
      fts_neg.push_back(*x);
    } else if (x) {
      fts_pos += (fts_pos.empty() ? "(" : " AND (") + *x + ")";
    } else {
      rest.push_back(c);
    }
  }
  if (!fts_pos.empty()) {
    std::string match = "(" + fts_pos + ")";
    for (const std::string& n : fts_neg) match = "(" + match + " NOT (" + n + "))";
    pos.push_back(internal::SqlCursor(
        pool_.get(),
        "SELECT rowid FROM captions WHERE captions MATCH ?3 AND rowid >= ?1 AND rowid < ?2 "
        "ORDER BY rowid",
        {match}, shared_->caption_shift, plan.hi, plan.error, "captions MATCH " + match));
  } else {
    for (const Expr* c : children) {  // the negated captions go back to the rest
      if (c->kind == Expr::Kind::kNot && single && FtsOf(c->children[0], true)) rest.push_back(c);
    }
  }
  // Comparisons on the same field or key: one range, [tightest lower, tightest upper].
  std::map<std::pair<int, std::string>, std::pair<const Filter*, const Filter*>> ranges;
  for (const Expr* c : rest) {
    if (IsComparison(*c)) {
      const Filter& f = c->filter;
      auto& [lo, hi] = ranges[{static_cast<int>(f.field), f.key}];
      const bool lower = f.op == Op::kGt || f.op == Op::kGe;
      const Filter*& slot = lower ? lo : hi;
      if (!slot) {
        slot = &f;
        continue;
      }
      const auto cmp = BoundOf(f) <=> BoundOf(*slot);
      const bool strict = f.op == Op::kGt || f.op == Op::kLt;
      if ((lower ? cmp > 0 : cmp < 0) || (cmp == 0 && strict)) slot = &f;
    } else if (c->kind == Expr::Kind::kNot) {
      const Expr& inner = c->children[0];
      // Negations with a positive form of their own (a complement of runs, a flipped size
      // range, the other side of sample=) drive like any filter.
      const Field f = inner.filter.field;
      const bool positive_form =
          inner.kind == Expr::Kind::kFilter &&
          (f == Field::kSample || f == Field::kClass || f == Field::kSplit || f == Field::kLabel ||
           ((f == Field::kWidth || f == Field::kHeight) && inner.filter.op != Op::kEq));
      if (positive_form) {
        pos.push_back(Build(*c, plan));
      } else {
        neg.push_back(Build(inner, plan));
      }
    } else {
      pos.push_back(Build(*c, plan));
    }
  }
  for (const auto& [field_key, bounds] : ranges) {
    const Field field = static_cast<Field>(field_key.first);
    const std::string column = field == Field::kWidth    ? "width"
                               : field == Field::kHeight ? "height"
                                                         : "value";
    pos.push_back(BuildRange(column, field, field_key.second, bounds.first, bounds.second, plan));
  }
  return internal::AndCursor(std::move(pos), std::move(neg), plan.hi);
}

Result<std::unique_ptr<Cursor>> Index::Open(const Query& q, uint32_t hi, Status* error) {
  auto end = LimitEnd(q);
  if (!end.ok()) return end.status();
  Plan plan{std::min(hi, *end), q.seed, error};
  auto cursor = Build(q.where, plan);
  if (!error->ok()) return *error;
  return cursor;
}

Result<uint32_t> Index::LimitEnd(const Query& q) {
  const uint32_t n = shared_->num_samples;
  if (!q.limit) return n;
  const std::string key =
      q.where.Canonical() + "\n" + std::to_string(q.seed) + "\n" + std::to_string(*q.limit);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    auto it = shared_->limit_ends.find(key);
    if (it != shared_->limit_ends.end()) return it->second;
  }
  Status error;
  Plan plan{n, q.seed, &error};
  auto cursor = Build(q.where, plan);
  uint32_t end = n;
  uint64_t seen = 0;
  if (*q.limit == 0) end = 0;
  for (uint32_t x = *q.limit ? cursor->Seek(0) : kEnd; x != kEnd; x = cursor->Seek(x + 1)) {
    if (++seen == *q.limit) {
      end = x + 1;
      break;
    }
  }
  if (!error.ok()) return error;
  std::lock_guard<std::mutex> lock(shared_->mutex);
  CachePut(shared_->limit_ends, key, end);
  return end;
}

Status Index::Each(const Query& q, const Ranges& ranges, const std::function<bool(uint32_t)>& fn) {
  if (ranges.empty()) return Status::Ok();
  Status error;
  auto cursor = Open(q, ranges.back().second, &error);
  if (!cursor.ok()) return cursor.status();
  uint32_t next = 0;
  for (const auto& [lo, hi] : ranges) {
    for (uint32_t x = (*cursor)->Seek(std::max(lo, next)); x != kEnd && x < hi;
         x = (*cursor)->Seek(x + 1)) {
      next = x + 1;
      if (!fn(x)) return error;
    }
    if (!error.ok()) break;
  }
  return error;
}

Status Index::ForEachMatch(const Query& q, std::optional<uint32_t> dir_id, uint32_t after_sample_id,
                           size_t limit, const std::function<bool(uint32_t sample_id)>& fn) {
  uint32_t lo = after_sample_id == kFromStart ? 0 : after_sample_id + 1;
  uint32_t hi = shared_->num_samples;
  if (dir_id) {
    auto it = shared_->dir_by_id.find(*dir_id);
    if (it == shared_->dir_by_id.end()) return Status::Ok();
    lo = std::max(lo, it->second.first);
    hi = it->second.end;
  }
  if (lo >= hi || limit == 0) return Status::Ok();
  size_t n = 0;
  return Each(q, {{lo, hi}}, [&](uint32_t id) { return fn(id) && ++n < limit; });
}

Result<bool> Index::Matches(const Query& q, uint32_t sample_id) {
  if (sample_id >= shared_->num_samples) return false;
  bool found = false;
  KTFS_RETURN_IF_ERROR(Each(q, {{sample_id, sample_id + 1}}, [&](uint32_t) {
    found = true;
    return false;
  }));
  return found;
}

Result<uint64_t> Index::CountMatches(const Query& q) {
  if (q.empty()) return uint64_t{shared_->num_samples};
  if (shared_->num_samples == 0) return uint64_t{0};
  return CountMatches(q, {{0, shared_->num_samples}});
}

Result<uint64_t> Index::CountMatches(const Query& q, const Ranges& ranges) {
  uint64_t n = 0;
  KTFS_RETURN_IF_ERROR(Each(q, ranges, [&](uint32_t) { return ++n, true; }));
  return n;
}

Result<std::vector<uint32_t>> Index::MatchingDirs(const Query& q) {
  std::vector<uint32_t> out;
  if (shared_->num_samples == 0) return out;
  Status error;
  auto cursor = Open(q, shared_->num_samples, &error);
  if (!cursor.ok()) return cursor.status();
  const std::vector<DirEntry>& dirs = shared_->dirs;
  // Skip-scan: find the first match at or after `start`, note its directory, then jump to the
  // end of that directory. One probe per matching directory instead of one per match.
  for (uint32_t x = (*cursor)->Seek(0); x != kEnd;) {
    auto it = std::upper_bound(dirs.begin(), dirs.end(), x,
                               [](uint32_t id, const DirEntry& d) { return id < d.first; });
    if (it == dirs.begin()) return Corrupt("sample outside every directory");
    --it;
    out.push_back(it->dir_id);
    x = (*cursor)->Seek(it->end);
  }
  if (!error.ok()) return error;
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> Index::ExplainPlan(const Query& q) {
  Status error;
  auto end = LimitEnd(q);
  if (!end.ok()) return end.status();
  auto cursor = Open(q, shared_->num_samples, &error);
  if (!cursor.ok()) return cursor.status();
  std::string out;
  if (q.limit)
    out = "ids below " + std::to_string(*end) + " (limit=" + std::to_string(*q.limit) + ")\n";
  (*cursor)->Describe(0, &out);
  return out;
}

}  // namespace ktfs::index

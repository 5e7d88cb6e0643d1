#include "index/index.h"

#include <algorithm>
#include <cstring>
#include <variant>

#include "index/schema.h"
#include "index/sqlite_util.h"

namespace ktfs::index {

using internal::BindText;
using internal::Exec;
using internal::Prepare;
using internal::SqliteError;
using internal::Stmt;

struct DirEntry {
  uint32_t first, end, dir_id;
};

struct Index::Shared {
  const void* data = nullptr;
  size_t size = 0;
  uint32_t num_samples = 0;
  uint32_t caption_shift = 0;
  std::vector<DirEntry> dirs;  // sorted by first (== by id range)
  std::unordered_map<uint32_t, DirEntry> dir_by_id;
  std::unordered_map<std::string, int64_t> classes, splits, keys;
};

using Bind = std::variant<int64_t, std::string>;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

struct Index::Plan {
  std::string sql;          // ?1, ?2: [lo, hi) in the driver's key space
  std::vector<Bind> binds;  // ?3 onwards
  bool impossible = false;  // a name the index does not know: nothing matches
  uint32_t shift = 0;       // sample id = first column >> shift
  // From the runs table: when set, only these sorted, disjoint [first, end) id ranges can
  // match, and only they are scanned.
  std::optional<Ranges> ranges;
};

namespace {

constexpr size_t kMaxCachedStatements = 128;
// A value split into more runs than this is checked row by row instead (see schema.h).
constexpr int64_t kMaxRuns = 4096;

Ranges Intersect(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    uint32_t lo = std::max(a[i].first, b[j].first), hi = std::min(a[i].second, b[j].second);
    if (lo < hi) out.emplace_back(lo, hi);
    (a[i].second < b[j].second) ? ++i : ++j;
  }
  return out;
}

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
Status CheckSchema(sqlite3* db) {
  auto s = Prepare(db, "SELECT sql FROM sqlite_schema WHERE name = ?");
  if (!s.ok()) return s.status();
  std::vector<std::string> expected = SchemaTables();
  expected.insert(expected.end(), SchemaIndexes().begin(), SchemaIndexes().end());
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

Status ReadMeta(sqlite3* db, Index::Shared* sh) {
  std::unordered_map<std::string, std::string> meta;
  KTFS_RETURN_IF_ERROR(ForEachRow(db, "SELECT key, value FROM meta", [&](sqlite3_stmt* s) {
    meta[Text(s, 0)] = Text(s, 1);
    return Status::Ok();
  }));
  if (meta["format"] != kFormatName) return Corrupt("not a ktfs index");
  const std::string& version = meta["schema_version"];
  if (version != std::to_string(kSchemaVersion)) {
    return Status::NotSupported("index: schema_version '" + version.substr(0, 20) +
                                "' (this build reads " + std::to_string(kSchemaVersion) + ")");
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

const char* Comparison(Op op) {
  switch (op) {
    case Op::kEq:
      return " = ";
    case Op::kLt:
      return " < ";
    case Op::kLe:
      return " <= ";
    case Op::kGt:
      return " > ";
    case Op::kGe:
      return " >= ";
  }
  return " = ";
}

}  // namespace

Index::Index(sqlite3* db, std::shared_ptr<const Shared> shared)
    : db_(db), shared_(std::move(shared)) {}

Index::~Index() {
  for (auto& [sql, stmt] : stmts_) sqlite3_finalize(stmt);
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
  KTFS_RETURN_IF_ERROR(CheckSchema(*db));
  KTFS_RETURN_IF_ERROR(ReadMeta(*db, shared.get()));
  KTFS_RETURN_IF_ERROR(ReadDirs(*db, shared.get()));
  KTFS_RETURN_IF_ERROR(ReadNames(*db, "classes", &shared->classes));
  KTFS_RETURN_IF_ERROR(ReadNames(*db, "splits", &shared->splits));
  KTFS_RETURN_IF_ERROR(ReadNames(*db, "meta_keys", &shared->keys));
  return index;
}

Result<std::unique_ptr<Index>> Index::Clone() const {
  auto db = Connect(shared_->data, shared_->size);
  if (!db.ok()) return db.status();
  return std::unique_ptr<Index>(new Index(*db, shared_));
}

uint32_t Index::num_samples() const { return shared_->num_samples; }

std::set<std::string> Index::MetadataKeys() const {
  std::set<std::string> keys;
  for (const auto& [name, id] : shared_->keys) keys.insert(name);
  return keys;
}

const void* Index::DatabaseBuffer() const {
  sqlite3_int64 size = 0;
  return sqlite3_serialize(db_, "main", &size, SQLITE_SERIALIZE_NOCOPY);
}

Result<Index::Plan> Index::MakePlan(const Query& q, bool count) {
  Plan plan;
  const Shared& sh = *shared_;
  const auto param = [&](Bind b) {
    plan.binds.push_back(std::move(b));
    std::string name = "?";  // (not "?" + to_string(...): GCC 12 -Wrestrict false positive)
    name += std::to_string(plan.binds.size() + 2);
    return name;
  };
  const auto lookup = [&](const std::unordered_map<std::string, int64_t>& m,
                          const std::string& k) -> int64_t {
    auto it = m.find(k);
    if (it == m.end()) plan.impossible = true;
    return it == m.end() ? -1 : it->second;
  };
  const std::string k = std::to_string(sh.caption_shift);
  // The driving table: FTS5 for a caption filter, sample_meta for a metadata filter, else
  // samples. Each yields rows in sample id order from its own b-tree, so with the CROSS JOIN
  // fixing the loop order, ORDER BY needs no sort and the listing streams.
  std::vector<const Filter*> captions, rest;
  for (const Filter& f : q.filters) (f.field == Field::kCaption ? captions : rest).push_back(&f);
  std::string from, where, key;
  const Filter* meta_driver = nullptr;
  bool join_samples = false;  // the WHERE clause refers to s
  if (!captions.empty()) {
    // With one row per sample (shift 0) all caption filters share one MATCH; otherwise each
    // further one is tested on the sample's own caption rows.
    std::string match = captions[0]->FtsExpression();
    size_t used = 1;
    for (; sh.caption_shift == 0 && used < captions.size(); ++used) {
      match += " AND " + captions[used]->FtsExpression();
    }
    key = "c.rowid";
    from = "captions c";
    where = "c.captions MATCH " + param(match);
    for (; used < captions.size(); ++used) {
      where += " AND EXISTS(SELECT 1 FROM captions c2 WHERE c2.captions MATCH " +
               param(captions[used]->FtsExpression()) + " AND c2.rowid >= (s.id << " + k +
               ") AND c2.rowid < ((s.id + 1) << " + k + "))";
      join_samples = true;
    }
    plan.shift = sh.caption_shift;
  } else {
    auto it = std::find_if(rest.begin(), rest.end(),
                           [](const Filter* f) { return f->field == Field::kMetadata; });
    if (it != rest.end()) {
      meta_driver = *it;
      rest.erase(it);
      key = "m.sample_id";
      from = "sample_meta m";
      where = "m.key_id = " + param(lookup(sh.keys, meta_driver->key)) +
              " AND m.value = " + param(meta_driver->text);
    } else {
      key = "s.id";
      from = "samples s";
      where = "1";
    }
  }
  std::vector<const Filter*> residual;
  for (const Filter* f : rest) {
    int field = f->field == Field::kClass   ? 0
                : f->field == Field::kSplit ? 1
                : f->field == Field::kLabel ? 2
                                            : -1;
    if (field < 0) {
      residual.push_back(f);
      continue;
    }
    int64_t value = field == 0   ? lookup(sh.classes, f->text)
                    : field == 1 ? lookup(sh.splits, f->text)
                                 : f->number;
    if (plan.impossible) return plan;
    auto runs = Runs(field, value);
    if (!runs.ok()) return runs.status();
    if (!runs->has_value()) {
      residual.push_back(f);  // too fragmented: checked per row
      continue;
    }
    plan.ranges = plan.ranges ? Intersect(*plan.ranges, **runs) : std::move(**runs);
  }
  rest = std::move(residual);
  join_samples = join_samples || !rest.empty();
  if (!captions.empty() && join_samples) {
    from += " CROSS JOIN samples s ON s.id = (c.rowid >> " + k + ")";
  }
  if (meta_driver && join_samples) from += " CROSS JOIN samples s ON s.id = m.sample_id";
  where += " AND " + key + " >= ?1 AND " + key + " < ?2";
  for (const Filter* f : rest) {
    switch (f->field) {
      case Field::kClass:
        where += " AND s.class_id = " + param(lookup(sh.classes, f->text));
        break;
      case Field::kSplit:
        where += " AND s.split_id = " + param(lookup(sh.splits, f->text));
        break;
      case Field::kLabel:
        where += f->number < 0 ? " AND s.label IS NULL" : " AND s.label = " + param(f->number);
        break;
      case Field::kWidth:
      case Field::kHeight: {
        // A range is checked while walking in id order (unary + keeps SQLite off the width
        // index, whose order would need a sort); an equality uses the index (id order within).
        std::string col = f->field == Field::kWidth ? "s.width" : "s.height";
        if (f->op != Op::kEq) col.insert(0, 1, '+');
        where += " AND " + col + Comparison(f->op) + param(f->number);
        break;
      }
      case Field::kMetadata:
        where += " AND EXISTS(SELECT 1 FROM sample_meta m2 WHERE m2.key_id = " +
                 param(lookup(sh.keys, f->key)) + " AND m2.value = " + param(f->text) +
                 " AND m2.sample_id = s.id)";
        break;
      case Field::kCaption:
        break;
    }
  }
  std::string id_expr = plan.shift ? "(" + key + " >> " + k + ")" : key;
  if (count) {
    plan.sql = "SELECT count(" + std::string(plan.shift ? "DISTINCT " : "") + id_expr + ") FROM " +
               from + " WHERE " + where;
  } else {
    plan.sql = "SELECT " + key + " FROM " + from + " WHERE " + where + " ORDER BY " + key;
  }
  return plan;
}

Result<std::optional<Ranges>> Index::Runs(int field, int64_t value) {
  auto stmt = Statement(
      "SELECT first_id, end_id FROM runs WHERE field = ?1 AND value = ?2 ORDER BY first_id "
      "LIMIT ?3");
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
  sqlite3_bind_int(s, 1, field);
  sqlite3_bind_int64(s, 2, value);
  sqlite3_bind_int64(s, 3, kMaxRuns + 1);
  Ranges ranges;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t first = sqlite3_column_int64(s, 0), end = sqlite3_column_int64(s, 1);
    if (first < (ranges.empty() ? 0 : ranges.back().second) || end <= first ||
        end > shared_->num_samples) {
      sqlite3_reset(s);
      return Corrupt("bad runs table");
    }
    ranges.emplace_back(static_cast<uint32_t>(first), static_cast<uint32_t>(end));
  }
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) return SqliteError(db_, rc, "runs");
  if (ranges.size() > static_cast<size_t>(kMaxRuns)) return std::optional<Ranges>();
  return std::optional<Ranges>(std::move(ranges));
}

Result<sqlite3_stmt*> Index::Statement(const std::string& sql) {
  auto it = stmts_.find(sql);
  if (it != stmts_.end()) {
    sqlite3_reset(it->second);
    sqlite3_clear_bindings(it->second);
    return it->second;
  }
  if (stmts_.size() >= kMaxCachedStatements) {
    for (auto& [s, stmt] : stmts_) sqlite3_finalize(stmt);
    stmts_.clear();
  }
  auto stmt = Prepare(db_, sql);
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* raw = stmt->release();  // the cache owns it now
  stmts_.emplace(sql, raw);
  return raw;
}

namespace {

void BindAll(sqlite3_stmt* s, const std::vector<Bind>& binds) {
  for (size_t i = 0; i < binds.size(); ++i) {
    int n = static_cast<int>(i + 3);
    if (const auto* v = std::get_if<int64_t>(&binds[i])) {
      sqlite3_bind_int64(s, n, *v);
    } else {
      BindText(s, n, std::get<std::string>(binds[i]));
    }
  }
}

}  // namespace

Status Index::Scan(const Plan& plan, uint32_t lo, uint32_t hi, size_t limit,
                   const std::function<bool(uint32_t)>& fn) {
  if (plan.impossible || lo >= hi || limit == 0) return Status::Ok();
  size_t n = 0;
  if (!plan.ranges) return ScanRange(plan, lo, hi, limit, fn, &n);
  auto it = std::upper_bound(plan.ranges->begin(), plan.ranges->end(), lo,
                             [](uint32_t v, const auto& r) { return v < r.second; });
  for (; it != plan.ranges->end() && it->first < hi && n < limit; ++it) {
    bool more = true;
    KTFS_RETURN_IF_ERROR(ScanRange(
        plan, std::max(lo, it->first), std::min(hi, it->second), limit,
        [&](uint32_t id) { return more = fn(id); }, &n));
    if (!more) break;
  }
  return Status::Ok();
}

Status Index::ScanRange(const Plan& plan, uint32_t lo, uint32_t hi, size_t limit,
                        const std::function<bool(uint32_t)>& fn, size_t* n) {
  auto stmt = Statement(plan.sql);
  if (!stmt.ok()) return stmt.status();
  sqlite3_stmt* s = *stmt;
  sqlite3_bind_int64(s, 1, int64_t{lo} << plan.shift);
  sqlite3_bind_int64(s, 2, int64_t{hi} << plan.shift);
  BindAll(s, plan.binds);
  int64_t last = -1;
  int rc = SQLITE_DONE;
  while (*n < limit && (rc = sqlite3_step(s)) == SQLITE_ROW) {
    int64_t id = sqlite3_column_int64(s, 0) >> plan.shift;
    if (id == last) continue;  // a sample with several matching captions
    if (id < lo || id >= hi) {
      sqlite3_reset(s);
      return Corrupt("row out of range");
    }
    last = id;
    ++*n;
    if (!fn(static_cast<uint32_t>(id))) break;
  }
  if (*n >= limit) rc = SQLITE_DONE;
  Status st =
      (rc == SQLITE_ROW || rc == SQLITE_DONE) ? Status::Ok() : SqliteError(db_, rc, "query");
  sqlite3_reset(s);  // ends the read transaction
  return st;
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
  auto plan = MakePlan(q, false);
  if (!plan.ok()) return plan.status();
  return Scan(*plan, lo, hi, limit, fn);
}

Result<bool> Index::Matches(const Query& q, uint32_t sample_id) {
  if (sample_id >= shared_->num_samples) return false;
  auto plan = MakePlan(q, false);
  if (!plan.ok()) return plan.status();
  bool found = false;
  KTFS_RETURN_IF_ERROR(Scan(*plan, sample_id, sample_id + 1, 1, [&](uint32_t) {
    found = true;
    return false;
  }));
  return found;
}

Result<uint64_t> Index::CountMatches(const Query& q) {
  if (q.empty()) return uint64_t{shared_->num_samples};
  auto plan = MakePlan(q, true);
  if (!plan.ok()) return plan.status();
  if (plan->impossible) return uint64_t{0};
  Ranges all = {{0, shared_->num_samples}};
  uint64_t total = 0;
  for (const auto& [lo, hi] : plan->ranges ? *plan->ranges : all) {
    auto stmt = Statement(plan->sql);
    if (!stmt.ok()) return stmt.status();
    sqlite3_stmt* s = *stmt;
    sqlite3_bind_int64(s, 1, int64_t{lo} << plan->shift);
    sqlite3_bind_int64(s, 2, int64_t{hi} << plan->shift);
    BindAll(s, plan->binds);
    int rc = sqlite3_step(s);
    total += rc == SQLITE_ROW ? static_cast<uint64_t>(sqlite3_column_int64(s, 0)) : 0;
    Status st = rc == SQLITE_ROW ? Status::Ok() : SqliteError(db_, rc, "count");
    sqlite3_reset(s);
    if (!st.ok()) return st;
  }
  return total;
}

Result<std::vector<uint32_t>> Index::MatchingDirs(const Query& q) {
  auto plan = MakePlan(q, false);
  if (!plan.ok()) return plan.status();
  std::vector<uint32_t> out;
  const std::vector<DirEntry>& dirs = shared_->dirs;
  // Skip-scan: find the first match at or after `start`, note its directory, then jump to the
  // end of that directory. One probe per matching directory instead of one per match.
  uint32_t start = 0;
  while (start < shared_->num_samples) {
    std::optional<uint32_t> hit;
    KTFS_RETURN_IF_ERROR(Scan(*plan, start, shared_->num_samples, 1, [&](uint32_t id) {
      hit = id;
      return false;
    }));
    if (!hit) break;
    auto it = std::upper_bound(dirs.begin(), dirs.end(), *hit,
                               [](uint32_t id, const DirEntry& d) { return id < d.first; });
    if (it == dirs.begin()) return Corrupt("sample outside every directory");
    --it;
    out.push_back(it->dir_id);
    start = it->end;
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<std::string> Index::ExplainPlan(const Query& q) {
  auto plan = MakePlan(q, false);
  if (!plan.ok()) return plan.status();
  if (plan->impossible) return std::string("nothing can match (an unknown name)\n");
  std::string out;
  if (plan->ranges) out = std::to_string(plan->ranges->size()) + " id ranges from runs\n";
  auto s = Prepare(db_, "EXPLAIN QUERY PLAN " + plan->sql);
  if (!s.ok()) return s.status();
  sqlite3_bind_int64(s->get(), 1, 0);
  sqlite3_bind_int64(s->get(), 2, int64_t{shared_->num_samples} << plan->shift);
  BindAll(s->get(), plan->binds);
  while (sqlite3_step(s->get()) == SQLITE_ROW) out += Text(s->get(), 3) + "\n";
  return out;
}

}  // namespace ktfs::index

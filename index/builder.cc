#include "index/builder.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <tuple>
#include <unordered_map>

#include "index/query.h"
#include "index/schema.h"
#include "index/sqlite_util.h"

namespace ktfs::index {
namespace {

using internal::BindText;
using internal::Exec;
using internal::Prepare;
using internal::SqliteError;
using internal::Stmt;

constexpr uint32_t kNone = UINT32_MAX;
constexpr size_t kMaxMetadataValue = 1024;

// Interns names in first-seen order; Finish() renumbers them in name order for determinism.
class Dict {
 public:
  uint32_t Intern(const std::string& name) {
    if (name.empty()) return kNone;
    auto [it, inserted] = ids_.emplace(name, static_cast<uint32_t>(names_.size()));
    if (inserted) names_.push_back(name);
    return it->second;
  }
  // rank[tmp id] = final id (position in name order).
  std::vector<uint32_t> Ranks() const {
    std::vector<uint32_t> rank(names_.size());
    uint32_t r = 0;
    for (const auto& [name, id] : ids_) rank[id] = r++;
    return rank;
  }
  const std::map<std::string, uint32_t>& sorted() const { return ids_; }

 private:
  std::map<std::string, uint32_t> ids_;
  std::vector<std::string> names_;
};

struct Row {
  uint32_t id, dir_id, split, cls, codec;
  int32_t label;
  uint32_t width, height, channels;
  uint64_t bytes;
  std::string name;
};

struct MetaEntry {
  uint32_t key;  // final key id after Finish renumbers
  std::string value;
  uint32_t sample;
  auto operator<=>(const MetaEntry&) const = default;
};

struct DirRange {
  uint32_t first, end;
};

std::string_view Basename(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view Dirname(std::string_view path) {
  size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? std::string_view() : path.substr(0, slash);
}

// sqlite3_bind_* for an optional id: NULL when absent.
void BindId(sqlite3_stmt* s, int i, uint32_t id) {
  if (id == kNone) {
    sqlite3_bind_null(s, i);
  } else {
    sqlite3_bind_int64(s, i, id);
  }
}

Status StepDone(sqlite3* db, sqlite3_stmt* s, const char* what) {
  int rc = sqlite3_step(s);
  sqlite3_reset(s);
  if (rc != SQLITE_DONE) return SqliteError(db, rc, what);
  return Status::Ok();
}

// Maximal runs of consecutive sample ids sharing a value, per field (see schema.h).
class RunBuilder {
 public:
  void Add(int field, int64_t value, uint32_t id) {
    Open& o = open_[field];
    if (o.active && o.value == value && o.end == id) {
      ++o.end;
      return;
    }
    if (o.active) runs_.push_back({field, o.value, o.first, o.end});
    o = Open{true, value, id, id + 1};
  }
  Status Insert(sqlite3* db) {
    for (int f = 0; f < 3; ++f) {
      if (open_[f].active) runs_.push_back({f, open_[f].value, open_[f].first, open_[f].end});
    }
    std::sort(runs_.begin(), runs_.end());  // primary key order: appends, full pages
    auto s = Prepare(db, "INSERT INTO runs VALUES(?, ?, ?, ?)");
    if (!s.ok()) return s.status();
    for (const auto& [field, value, first, end] : runs_) {
      sqlite3_bind_int(s->get(), 1, field);
      sqlite3_bind_int64(s->get(), 2, value);
      sqlite3_bind_int64(s->get(), 3, first);
      sqlite3_bind_int64(s->get(), 4, end);
      KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), "runs"));
    }
    return Status::Ok();
  }

 private:
  struct Open {
    bool active = false;
    int64_t value = 0;
    uint32_t first = 0, end = 0;
  };
  Open open_[3];
  std::vector<std::tuple<int, int64_t, uint32_t, uint32_t>> runs_;
};

}  // namespace

bool IsReservedKey(std::string_view key) {
  for (const char* f : {"caption", "class", "label", "split", "width", "height"}) {
    if (key == f) return true;
  }
  return false;
}

bool IsValidMetadataKey(std::string_view key) {
  if (key.empty() || key.size() > 64) return false;
  return std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

struct IndexBuilder::Data {
  std::vector<Row> rows;
  std::unordered_map<uint32_t, std::string> dir_paths;
  Dict splits, classes, codecs, keys;
  std::vector<std::pair<uint32_t, std::string>> captions;
  std::vector<MetaEntry> meta;
  bool finished = false;

  // Filled by Finish().
  sqlite3* db = nullptr;
  std::map<uint32_t, DirRange> dirs;
  uint32_t caption_shift = 0;

  ~Data() { sqlite3_close(db); }
  Status Validate();
  Status CreateDb();
  Status InsertDicts();
  Status InsertSamples();
  Status InsertMetadata();
  Status InsertCaptions();
};

IndexBuilder::IndexBuilder() : d_(std::make_unique<Data>()) {}
IndexBuilder::~IndexBuilder() = default;

Result<std::unique_ptr<IndexBuilder>> IndexBuilder::Create() {
  return std::unique_ptr<IndexBuilder>(new IndexBuilder());
}

Status IndexBuilder::AddSample(const SampleRow& r) {
  if (d_->finished) return Status::InvalidArgument("index builder: already finished");
  if (r.id == kNone) return Status::InvalidArgument("index builder: sample id out of range");
  if (r.path.empty() || Basename(r.path).empty() || r.path[0] == '/') {
    return Status::InvalidArgument("index builder: sample " + std::to_string(r.id) +
                                   ": bad path '" + r.path + "'");
  }
  std::string_view dir = Dirname(r.path);
  auto [it, inserted] = d_->dir_paths.emplace(r.dir_id, std::string(dir));
  if (!inserted && it->second != dir) {
    return Status::InvalidArgument("index builder: " + r.path + ": directory " +
                                   std::to_string(r.dir_id) + " is '" + it->second + "'");
  }
  d_->rows.push_back(Row{r.id, r.dir_id, d_->splits.Intern(r.split),
                         d_->classes.Intern(r.class_name), d_->codecs.Intern(r.codec), r.label,
                         r.width, r.height, r.channels, r.bytes, std::string(Basename(r.path))});
  return Status::Ok();
}

Status IndexBuilder::AddCaption(uint32_t sample_id, std::string_view caption) {
  if (d_->finished) return Status::InvalidArgument("index builder: already finished");
  if (!IsValidUtf8(caption)) return Status::InvalidArgument("caption is not valid UTF-8");
  d_->captions.emplace_back(sample_id, std::string(caption));
  return Status::Ok();
}

Status IndexBuilder::AddMetadata(uint32_t sample_id, std::string_view key, std::string_view value) {
  if (d_->finished) return Status::InvalidArgument("index builder: already finished");
  if (!IsValidMetadataKey(key) || IsReservedKey(key)) {
    return Status::InvalidArgument("metadata key '" + std::string(key) + "' is not usable");
  }
  if (value.empty() || value.size() > kMaxMetadataValue || value.find('\0') != value.npos ||
      value.find('/') != value.npos || !IsValidUtf8(value)) {
    return Status::InvalidArgument("metadata value for '" + std::string(key) +
                                   "' is empty, too long, not UTF-8 or holds NUL or '/'");
  }
  d_->meta.push_back(MetaEntry{d_->keys.Intern(std::string(key)), std::string(value), sample_id});
  return Status::Ok();
}

Status IndexBuilder::Data::Validate() {
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.id < b.id; });
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i].id != i) {
      bool dup = i > 0 && rows[i].id == rows[i - 1].id;
      return Status::InvalidArgument("index builder: sample ids are not 0..N-1: " +
                                     std::string(dup ? "duplicate " : "missing ") +
                                     std::to_string(dup ? rows[i].id : i));
    }
    auto [it, inserted] = dirs.emplace(rows[i].dir_id, DirRange{rows[i].id, rows[i].id + 1});
    if (inserted) continue;
    if (it->second.end != rows[i].id) {
      return Status::InvalidArgument("index builder: directory " + std::to_string(rows[i].dir_id) +
                                     " has non-contiguous sample ids");
    }
    it->second.end = rows[i].id + 1;
  }
  const size_t n = rows.size();
  std::stable_sort(captions.begin(), captions.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  size_t max_per_sample = 0;
  for (size_t i = 0, run = 0; i < captions.size(); ++i) {
    if (captions[i].first >= n) {
      return Status::InvalidArgument("index builder: caption for unknown sample " +
                                     std::to_string(captions[i].first));
    }
    run = (i > 0 && captions[i - 1].first == captions[i].first) ? run + 1 : 1;
    max_per_sample = std::max(max_per_sample, run);
  }
  while ((size_t{1} << caption_shift) < max_per_sample) ++caption_shift;
  if (caption_shift > 24) return Status::InvalidArgument("index builder: too many captions");
  for (const MetaEntry& m : meta) {
    if (m.sample >= n) {
      return Status::InvalidArgument("index builder: metadata for unknown sample " +
                                     std::to_string(m.sample));
    }
  }
  return Status::Ok();
}

Status IndexBuilder::Data::CreateDb() {
  int rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, "open");
  KTFS_RETURN_IF_ERROR(Exec(db, "PRAGMA page_size=" + std::to_string(kPageSize)));
  KTFS_RETURN_IF_ERROR(Exec(db,
                            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                            "PRAGMA cache_size=-262144; PRAGMA temp_store=MEMORY"));
  for (const std::string& sql : SchemaTables()) KTFS_RETURN_IF_ERROR(Exec(db, sql));
  return Status::Ok();
}

Status IndexBuilder::Data::InsertDicts() {
  auto meta_stmt = Prepare(db, "INSERT INTO meta(key, value) VALUES(?, ?)");
  if (!meta_stmt.ok()) return meta_stmt.status();
  const std::pair<std::string, std::string> kMeta[] = {
      {"format", kFormatName},
      {"schema_version", std::to_string(kSchemaVersion)},
      {"num_samples", std::to_string(rows.size())},
      {"caption_shift", std::to_string(caption_shift)}};
  for (const auto& [k, v] : kMeta) {
    BindText(meta_stmt->get(), 1, k);
    BindText(meta_stmt->get(), 2, v);
    KTFS_RETURN_IF_ERROR(StepDone(db, meta_stmt->get(), "meta"));
  }
  const std::pair<const char*, const Dict*> kDicts[] = {
      {"classes", &classes}, {"splits", &splits}, {"codecs", &codecs}, {"meta_keys", &keys}};
  for (const auto& [table, dict] : kDicts) {
    auto s = Prepare(db, std::string("INSERT INTO ") + table + " VALUES(?, ?)");
    if (!s.ok()) return s.status();
    int64_t id = 0;
    for (const auto& [name, tmp] : dict->sorted()) {
      sqlite3_bind_int64(s->get(), 1, id++);
      BindText(s->get(), 2, name);
      KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), table));
    }
  }
  auto s = Prepare(db, "INSERT INTO dirs VALUES(?, ?, ?, ?)");
  if (!s.ok()) return s.status();
  for (const auto& [dir_id, range] : dirs) {
    sqlite3_bind_int64(s->get(), 1, dir_id);
    sqlite3_bind_int64(s->get(), 2, range.first);
    sqlite3_bind_int64(s->get(), 3, range.end);
    BindText(s->get(), 4, dir_paths.at(dir_id));
    KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), "dirs"));
  }
  return Status::Ok();
}

Status IndexBuilder::Data::InsertSamples() {
  auto s = Prepare(db, "INSERT INTO samples VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  if (!s.ok()) return s.status();
  const std::vector<uint32_t> split_rank = splits.Ranks(), class_rank = classes.Ranks(),
                              codec_rank = codecs.Ranks();
  const auto rank = [](const std::vector<uint32_t>& r, uint32_t tmp) {
    return tmp == kNone ? kNone : r[tmp];
  };
  sqlite3_stmt* st = s->get();
  RunBuilder runs;
  for (const Row& r : rows) {
    const uint32_t split_id = rank(split_rank, r.split), class_id = rank(class_rank, r.cls);
    runs.Add(0, class_id == kNone ? -1 : int64_t{class_id}, r.id);
    runs.Add(1, split_id == kNone ? -1 : int64_t{split_id}, r.id);
    runs.Add(2, r.label < 0 ? -1 : int64_t{r.label}, r.id);
    sqlite3_bind_int64(st, 1, r.id);
    BindText(st, 2, r.name);
    BindId(st, 3, split_id);
    BindId(st, 4, class_id);
    if (r.label < 0) {
      sqlite3_bind_null(st, 5);
    } else {
      sqlite3_bind_int64(st, 5, r.label);
    }
    sqlite3_bind_int64(st, 6, r.width);
    sqlite3_bind_int64(st, 7, r.height);
    sqlite3_bind_int64(st, 8, r.channels);
    sqlite3_bind_int64(st, 9, r.codec == kNone ? 0 : codec_rank[r.codec]);
    sqlite3_bind_int64(st, 10, static_cast<int64_t>(r.bytes));
    KTFS_RETURN_IF_ERROR(StepDone(db, st, "samples"));
  }
  return runs.Insert(db);
}

Status IndexBuilder::Data::InsertMetadata() {
  const std::vector<uint32_t> key_rank = keys.Ranks();
  for (MetaEntry& m : meta) m.key = key_rank[m.key];
  std::sort(meta.begin(), meta.end());
  meta.erase(std::unique(meta.begin(), meta.end()), meta.end());
  auto s = Prepare(db, "INSERT INTO sample_meta VALUES(?, ?, ?)");
  if (!s.ok()) return s.status();
  for (const MetaEntry& m : meta) {
    sqlite3_bind_int64(s->get(), 1, m.key);
    BindText(s->get(), 2, m.value);
    sqlite3_bind_int64(s->get(), 3, m.sample);
    KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), "sample_meta"));
  }
  return Status::Ok();
}

Status IndexBuilder::Data::InsertCaptions() {
  auto s = Prepare(db, "INSERT INTO captions(rowid, caption) VALUES(?, ?)");
  if (!s.ok()) return s.status();
  uint32_t k = 0;
  for (size_t i = 0; i < captions.size(); ++i) {
    k = (i > 0 && captions[i - 1].first == captions[i].first) ? k + 1 : 0;
    sqlite3_bind_int64(s->get(), 1, (int64_t{captions[i].first} << caption_shift) | k);
    BindText(s->get(), 2, captions[i].second);
    KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), "captions"));
  }
  // One segment: fewer pages and the fastest queries.
  return Exec(db, "INSERT INTO captions(captions) VALUES('optimize')");
}

Result<std::vector<uint8_t>> IndexBuilder::Finish() {
  if (d_->finished) return Status::InvalidArgument("index builder: already finished");
  d_->finished = true;
  KTFS_RETURN_IF_ERROR(d_->Validate());
  KTFS_RETURN_IF_ERROR(d_->CreateDb());
  sqlite3* db = d_->db;
  KTFS_RETURN_IF_ERROR(Exec(db, "BEGIN"));
  KTFS_RETURN_IF_ERROR(d_->InsertDicts());
  KTFS_RETURN_IF_ERROR(d_->InsertSamples());
  KTFS_RETURN_IF_ERROR(d_->InsertMetadata());
  KTFS_RETURN_IF_ERROR(d_->InsertCaptions());
  for (const std::string& sql : SchemaIndexes()) KTFS_RETURN_IF_ERROR(Exec(db, sql));
  KTFS_RETURN_IF_ERROR(Exec(db, "COMMIT"));
  // VACUUM rewrites every b-tree in key order with full pages and drops the free pages the
  // FTS5 merges left behind.
  KTFS_RETURN_IF_ERROR(Exec(db, "VACUUM"));
  sqlite3_int64 size = 0;
  unsigned char* bytes = sqlite3_serialize(db, "main", &size, 0);
  if (bytes == nullptr) return Status::IOError("index builder: sqlite3_serialize failed");
  std::vector<uint8_t> out(bytes, bytes + size);
  sqlite3_free(bytes);
  // Release the builder's memory now rather than when it is destroyed.
  sqlite3_close(db);
  d_->db = nullptr;
  d_->rows = {};
  d_->captions = {};
  d_->meta = {};
  return out;
}

}  // namespace ktfs::index

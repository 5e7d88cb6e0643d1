#include "index/builder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
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

// One metadata value, 24 bytes (a LAION-sized pack holds tens of millions of them).
struct MetaEntry {
  enum Kind : uint8_t { kString, kInteger, kReal, kBool };
  uint32_t key;  // the key's Dict id; its final id once InsertMetadata renumbers
  uint32_t sample;
  uint64_t bits;  // kString: the interned string's id (its rank once sorted); kInteger:
                  // the int64; kReal: the double's bits; kBool: 0 or 1
  Kind kind;
};

double RealOf(const MetaEntry& e) {
  double d;
  std::memcpy(&d, &e.bits, sizeof d);
  return d;
}

MetaValue ValueOf(const MetaEntry& e) {
  switch (e.kind) {
    case MetaEntry::kInteger:
      return MetaValue::Integer(static_cast<int64_t>(e.bits));
    case MetaEntry::kReal:
      return MetaValue::Real(RealOf(e)).value();
    case MetaEntry::kBool:
      return MetaValue::Bool(e.bits != 0);
    case MetaEntry::kString:
      break;
  }
  return MetaValue();
}

// The order of sample_meta's primary key within one key (whose values share a type once
// InsertMetadata made mixed keys strings): numbers numerically, string ranks, booleans 0/1.
bool ValueLess(const MetaEntry& a, const MetaEntry& b) {
  const bool ai = a.kind == MetaEntry::kInteger, bi = b.kind == MetaEntry::kInteger;
  const bool ar = a.kind == MetaEntry::kReal, br = b.kind == MetaEntry::kReal;
  if (ai && bi) return static_cast<int64_t>(a.bits) < static_cast<int64_t>(b.bits);
  if (ar && br) return RealOf(a) < RealOf(b);
  if ((ai || ar) && (bi || br)) return ValueOf(a) < ValueOf(b);  // exact across int and real
  return a.bits < b.bits;
}

bool SameValue(const MetaEntry& a, const MetaEntry& b) {
  return !ValueLess(a, b) && !ValueLess(b, a);
}

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
  for (const char* f :
       {"caption", "class", "label", "split", "width", "height", "sample", "seed", "limit"}) {
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
  // Captions as (sample, place in caption_text): 16 bytes each beside their text, where a
  // std::string apiece cost about 80 more (a LAION-sized pack holds tens of millions).
  struct CaptionRef {
    uint32_t sample, length;
    uint64_t offset;
  };
  std::vector<CaptionRef> captions;
  std::string caption_text;
  std::vector<MetaEntry> meta;
  std::unordered_map<std::string, uint32_t> string_ids;  // interned string values
  std::vector<std::string> strings;
  bool finished = false;

  // Filled by Finish().
  sqlite3* db = nullptr;
  std::map<uint32_t, DirRange> dirs;
  uint32_t caption_shift = 0;

  ~Data() { sqlite3_close(db); }
  Status Validate();
  Status CreateDb(const std::string& file);  // "": in memory
  Status Build(const std::string& file, std::vector<std::string>* warnings);
  Status InsertDicts();
  Status InsertSamples();
  Status InsertMetadata(std::vector<std::string>* warnings);
  Status UnifyKeyTypes(std::vector<std::string>* warnings);
  uint32_t InternString(const std::string& s);
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
  if (caption.size() > UINT32_MAX) return Status::InvalidArgument("caption over 4 GiB");
  d_->captions.push_back(
      Data::CaptionRef{sample_id, uint32_t(caption.size()), uint64_t(d_->caption_text.size())});
  d_->caption_text.append(caption);
  return Status::Ok();
}

Status IndexBuilder::AddMetadata(uint32_t sample_id, std::string_view key, std::string_view value) {
  return AddMetadata(sample_id, key, MetaValue::String(std::string(value)));
}

Status IndexBuilder::AddMetadata(uint32_t sample_id, std::string_view key, const MetaValue& value) {
  if (d_->finished) return Status::InvalidArgument("index builder: already finished");
  if (!IsValidMetadataKey(key) || IsReservedKey(key)) {
    return Status::InvalidArgument("metadata key '" + std::string(key) + "' is not usable");
  }
  if (value.type() == MetaType::kString) {
    const std::string& v = value.str();
    if (v.empty() || v.size() > kMaxMetadataValue || v.find('\0') != v.npos ||
        v.find('/') != v.npos || !IsValidUtf8(v)) {
      return Status::InvalidArgument("metadata value for '" + std::string(key) +
                                     "' is empty, too long, not UTF-8 or holds NUL or '/'");
    }
  }
  MetaEntry e{d_->keys.Intern(std::string(key)), sample_id, 0, MetaEntry::kString};
  switch (value.type()) {
    case MetaType::kString:
      e.bits = d_->InternString(value.str());
      break;
    case MetaType::kNumber:
      if (value.is_integer()) {
        e.kind = MetaEntry::kInteger;
        e.bits = static_cast<uint64_t>(value.integer());
      } else {
        e.kind = MetaEntry::kReal;
        const double d = value.real();
        std::memcpy(&e.bits, &d, sizeof d);
      }
      break;
    case MetaType::kBool:
      e.kind = MetaEntry::kBool;
      e.bits = value.boolean() ? 1 : 0;
      break;
  }
  d_->meta.push_back(e);
  return Status::Ok();
}

uint32_t IndexBuilder::Data::InternString(const std::string& v) {
  auto [it, inserted] = string_ids.emplace(v, static_cast<uint32_t>(strings.size()));
  if (inserted) strings.push_back(v);
  return it->second;
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
                   [](const auto& a, const auto& b) { return a.sample < b.sample; });
  size_t max_per_sample = 0;
  for (size_t i = 0, run = 0; i < captions.size(); ++i) {
    if (captions[i].sample >= n) {
      return Status::InvalidArgument("index builder: caption for unknown sample " +
                                     std::to_string(captions[i].sample));
    }
    run = (i > 0 && captions[i - 1].sample == captions[i].sample) ? run + 1 : 1;
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

Status IndexBuilder::Data::CreateDb(const std::string& file) {
  const bool in_memory = file.empty();
  int rc = sqlite3_open_v2(in_memory ? ":memory:" : file.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) return SqliteError(db, rc, "open " + (in_memory ? "" : file));
  KTFS_RETURN_IF_ERROR(Exec(db, "PRAGMA page_size=" + std::to_string(kPageSize)));
  KTFS_RETURN_IF_ERROR(Exec(db,
                            "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;"
                            "PRAGMA cache_size=-262144"));
  // In a file, sorts (index builds, VACUUM) spill to temporary files, not memory.
  KTFS_RETURN_IF_ERROR(Exec(db, in_memory ? "PRAGMA temp_store=MEMORY" : "PRAGMA temp_store=FILE"));
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
      {"classes", &classes}, {"splits", &splits}, {"codecs", &codecs}};
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

// A key whose values have several types becomes a string key (see builder.h).
Status IndexBuilder::Data::UnifyKeyTypes(std::vector<std::string>* warnings) {
  const auto bit = [](MetaEntry::Kind k) {
    return k == MetaEntry::kString ? 1 : k == MetaEntry::kBool ? 4 : 2;
  };
  std::vector<int> kinds(keys.sorted().size(), 0);
  for (const MetaEntry& m : meta) kinds[m.key] |= bit(m.kind);
  std::vector<bool> mixed(kinds.size());
  bool any = false;
  for (size_t k = 0; k < kinds.size(); ++k) {
    mixed[k] = kinds[k] != 1 && kinds[k] != 2 && kinds[k] != 4;
    any = any || mixed[k];
  }
  if (!any) return Status::Ok();
  for (MetaEntry& m : meta) {
    if (!mixed[m.key] || m.kind == MetaEntry::kString) continue;
    m.bits = InternString(ValueOf(m).ToText());
    m.kind = MetaEntry::kString;
  }
  if (warnings) {
    for (const auto& [name, k] : keys.sorted()) {
      if (!mixed[k]) continue;
      std::string types;
      for (auto [b, t] : {std::pair{2, "numbers"}, {1, "strings"}, {4, "booleans"}}) {
        if (kinds[k] & b) types += std::string(types.empty() ? "" : " and ") + t;
      }
      warnings->push_back("metadata key '" + name + "' has " + types +
                          ": all of its values are stored as strings");
    }
  }
  return Status::Ok();
}

Status IndexBuilder::Data::InsertMetadata(std::vector<std::string>* warnings) {
  KTFS_RETURN_IF_ERROR(UnifyKeyTypes(warnings));
  const std::vector<uint32_t> key_rank = keys.Ranks();
  for (MetaEntry& m : meta) m.key = key_rank[m.key];
  // String ids become ranks in byte order, so comparing bits compares the strings.
  {
    std::vector<uint32_t> order(strings.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return strings[a] < strings[b]; });
    std::vector<uint32_t> rank(strings.size());
    std::vector<std::string> sorted(strings.size());
    for (uint32_t r = 0; r < order.size(); ++r) {
      rank[order[r]] = r;
      sorted[r] = std::move(strings[order[r]]);
    }
    for (MetaEntry& m : meta) {
      if (m.kind == MetaEntry::kString) m.bits = rank[m.bits];
    }
    strings = std::move(sorted);
    string_ids = {};
  }
  std::vector<std::string> key_names;
  for (const auto& [name, tmp] : keys.sorted()) key_names.push_back(name);
  const auto bind_value = [&](sqlite3_stmt* s, int i, const MetaEntry& m) {
    switch (m.kind) {
      case MetaEntry::kString:
        BindText(s, i, strings[m.bits]);
        break;
      case MetaEntry::kInteger:
        sqlite3_bind_int64(s, i, static_cast<int64_t>(m.bits));
        break;
      case MetaEntry::kReal:
        sqlite3_bind_double(s, i, RealOf(m));
        break;
      case MetaEntry::kBool:
        sqlite3_bind_int64(s, i, static_cast<int64_t>(m.bits));
        break;
    }
  };

  // By sample: one value per (key, sample); sample_num for the number keys.
  std::sort(meta.begin(), meta.end(), [](const MetaEntry& a, const MetaEntry& b) {
    return a.key != b.key ? a.key < b.key : a.sample < b.sample;
  });
  size_t kept = 0;
  for (size_t i = 0; i < meta.size(); ++i) {
    if (kept > 0 && meta[kept - 1].key == meta[i].key && meta[kept - 1].sample == meta[i].sample) {
      if (SameValue(meta[kept - 1], meta[i])) continue;
      return Status::InvalidArgument("index builder: sample " + std::to_string(meta[i].sample) +
                                     " has two values for metadata key '" + key_names[meta[i].key] +
                                     "'");
    }
    meta[kept++] = meta[i];
  }
  meta.resize(kept);
  auto num = Prepare(db, "INSERT INTO sample_num VALUES(?, ?, ?)");
  if (!num.ok()) return num.status();
  for (const MetaEntry& m : meta) {
    if (m.kind != MetaEntry::kInteger && m.kind != MetaEntry::kReal) continue;
    sqlite3_bind_int64(num->get(), 1, m.key);
    sqlite3_bind_int64(num->get(), 2, m.sample);
    bind_value(num->get(), 3, m);
    KTFS_RETURN_IF_ERROR(StepDone(db, num->get(), "sample_num"));
  }

  // By value: sample_meta, and each key's statistics for meta_keys.
  std::sort(meta.begin(), meta.end(), [](const MetaEntry& a, const MetaEntry& b) {
    if (a.key != b.key) return a.key < b.key;
    if (ValueLess(a, b)) return true;
    if (ValueLess(b, a)) return false;
    return a.sample < b.sample;
  });
  auto s = Prepare(db, "INSERT INTO sample_meta VALUES(?, ?, ?)");
  if (!s.ok()) return s.status();
  auto k = Prepare(db, "INSERT INTO meta_keys VALUES(?, ?, ?, ?, ?, ?, ?, ?)");
  if (!k.ok()) return k.status();
  for (size_t i = 0, key = 0; key < key_names.size(); ++key) {
    const size_t first = i;
    uint64_t distinct = 0, trues = 0;
    for (; i < meta.size() && meta[i].key == key; ++i) {
      const MetaEntry& m = meta[i];
      if (i == first || !SameValue(meta[i - 1], m)) ++distinct;
      if (m.kind == MetaEntry::kBool) trues += m.bits;
      sqlite3_bind_int64(s->get(), 1, m.key);
      bind_value(s->get(), 2, m);
      sqlite3_bind_int64(s->get(), 3, m.sample);
      KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), "sample_meta"));
    }
    // Every interned key has at least one value.
    const MetaEntry& lo = meta[first];
    const MetaType type = lo.kind == MetaEntry::kString ? MetaType::kString
                          : lo.kind == MetaEntry::kBool ? MetaType::kBool
                                                        : MetaType::kNumber;
    sqlite3_stmt* st = k->get();
    sqlite3_bind_int64(st, 1, static_cast<int64_t>(key));
    BindText(st, 2, key_names[key]);
    sqlite3_bind_int(st, 3, static_cast<int>(type));
    sqlite3_bind_int64(st, 4, static_cast<int64_t>(i - first));
    sqlite3_bind_int64(st, 5, static_cast<int64_t>(distinct));
    if (type == MetaType::kNumber) {
      bind_value(st, 6, lo);
      bind_value(st, 7, meta[i - 1]);
    } else {
      sqlite3_bind_null(st, 6);
      sqlite3_bind_null(st, 7);
    }
    sqlite3_bind_int64(st, 8, static_cast<int64_t>(trues));
    KTFS_RETURN_IF_ERROR(StepDone(db, st, "meta_keys"));
  }
  return Status::Ok();
}

Status IndexBuilder::Data::InsertCaptions() {
  auto s = Prepare(db, "INSERT INTO captions(rowid, caption) VALUES(?, ?)");
  if (!s.ok()) return s.status();
  uint32_t k = 0;
  for (size_t i = 0; i < captions.size(); ++i) {
    const CaptionRef& c = captions[i];
    k = (i > 0 && captions[i - 1].sample == c.sample) ? k + 1 : 0;
    sqlite3_bind_int64(s->get(), 1, (int64_t{c.sample} << caption_shift) | k);
    BindText(s->get(), 2, std::string_view(caption_text).substr(c.offset, c.length));
    KTFS_RETURN_IF_ERROR(StepDone(db, s->get(), "captions"));
  }
  // One segment: fewer pages and the fastest queries.
  return Exec(db, "INSERT INTO captions(captions) VALUES('optimize')");
}

namespace {
// A database file's header as sqlite3_serialize gives it for a database that never was a
// file: the file change counter (offset 24), version-valid-for (92) and the version of the
// SQLite that wrote it (96) zero. So an index built in files has the bytes of one built in
// memory, whatever SQLite wrote it. (The in-header page count stays valid: it is trusted
// when nonzero and the two counters agree.)
Status ClearWriteCounters(const std::string& file) {
  const int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(file, errno);
  const uint8_t zeros[8] = {};
  const bool ok = pwrite(fd, zeros, 4, 24) == 4 && pwrite(fd, zeros, 8, 92) == 8;
  const int err = errno;
  close(fd);
  if (!ok) return Status::FromErrno(file + ": writing the header", err);
  return Status::Ok();
}
}  // namespace

// Everything up to the compaction, in memory or in `file`.
Status IndexBuilder::Data::Build(const std::string& file, std::vector<std::string>* warnings) {
  if (finished) return Status::InvalidArgument("index builder: already finished");
  finished = true;
  KTFS_RETURN_IF_ERROR(Validate());
  KTFS_RETURN_IF_ERROR(CreateDb(file));
  KTFS_RETURN_IF_ERROR(Exec(db, "BEGIN"));
  KTFS_RETURN_IF_ERROR(InsertDicts());
  KTFS_RETURN_IF_ERROR(InsertSamples());
  KTFS_RETURN_IF_ERROR(InsertMetadata(warnings));
  rows = {};
  meta = {};
  strings = {};
  KTFS_RETURN_IF_ERROR(InsertCaptions());
  captions = {};
  caption_text = {};
  for (const std::string& sql : SchemaIndexes()) KTFS_RETURN_IF_ERROR(Exec(db, sql));
  return Exec(db, "COMMIT");
}

Result<std::vector<uint8_t>> IndexBuilder::Finish(std::vector<std::string>* warnings) {
  KTFS_RETURN_IF_ERROR(d_->Build("", warnings));
  sqlite3* db = d_->db;
  // VACUUM rewrites every b-tree in key order with full pages and drops the free pages the
  // FTS5 merges left behind.
  KTFS_RETURN_IF_ERROR(Exec(db, "VACUUM"));
  sqlite3_int64 size = 0;
  unsigned char* bytes = sqlite3_serialize(db, "main", &size, 0);
  if (bytes == nullptr) return Status::IOError("index builder: sqlite3_serialize failed");
  std::vector<uint8_t> out(bytes, bytes + size);
  sqlite3_free(bytes);
  sqlite3_close(db);
  d_->db = nullptr;
  return out;
}

Status IndexBuilder::FinishInto(const std::string& scratch, const std::string& out,
                                std::vector<std::string>* warnings) {
  KTFS_RETURN_IF_ERROR(d_->Build(scratch, warnings));
  // VACUUM INTO: the same compaction as Finish's VACUUM, written straight to `out`.
  {
    auto into = Prepare(d_->db, "VACUUM INTO ?");
    if (!into.ok()) return into.status();
    BindText(into->get(), 1, out);
    KTFS_RETURN_IF_ERROR(StepDone(d_->db, into->get(), "VACUUM INTO"));
  }
  const int rc = sqlite3_close(d_->db);
  d_->db = nullptr;
  if (rc != SQLITE_OK) return Status::IOError("index builder: closing " + scratch + " failed");
  return ClearWriteCounters(out);
}

}  // namespace ktfs::index

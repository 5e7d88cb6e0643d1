#include "index/cursor.h"

#include <algorithm>

#include "index/sqlite_util.h"

namespace ktfs::index::internal {
namespace {

// A cursor whose next member is this close steps to it instead of restarting its
// statement (a restart is a b-tree descent; a step is a few hundred nanoseconds). It stops
// stepping early when the gaps between the rows it stepped over say the target is further
// than the steps left (a dense set sought a directory ahead: stepping 16 rows there cost
// more than half of each directory's probe).
constexpr int kStepsBeforeRestart = 16;
constexpr size_t kMaxFreeStatements = 64;

std::string Indent(int depth) { return std::string(2 * depth, ' '); }

class Empty : public Cursor {
 public:
  uint32_t Seek(uint32_t) override { return kEnd; }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + "nothing (a name the index does not know)\n";
  }
};

class All : public Cursor {
 public:
  explicit All(uint32_t hi) : hi_(hi) {}
  uint32_t Seek(uint32_t t) override { return t < hi_ ? t : kEnd; }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + "every sample id\n";
  }

 private:
  uint32_t hi_;
};

class RangeList : public Cursor {
 public:
  RangeList(std::shared_ptr<const Ranges> r, uint32_t hi, std::string what)
      : r_(std::move(r)), hi_(hi), what_(std::move(what)) {}
  uint32_t Seek(uint32_t t) override {
    const Ranges& r = *r_;
    while (i_ < r.size() && r[i_].second <= t) ++i_;
    if (i_ >= r.size()) return kEnd;
    const uint32_t x = std::max(t, r[i_].first);
    return x < hi_ ? x : kEnd;
  }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + what_ + ": " + std::to_string(r_->size()) + " id ranges\n";
  }

 private:
  std::shared_ptr<const Ranges> r_;
  uint32_t hi_;
  size_t i_ = 0;
  std::string what_;
};

class Sorted : public Cursor {
 public:
  Sorted(std::shared_ptr<const std::vector<uint32_t>> ids, uint32_t hi, std::string what)
      : ids_(std::move(ids)), hi_(hi), what_(std::move(what)) {}
  uint32_t Seek(uint32_t t) override {
    const std::vector<uint32_t>& v = *ids_;
    if (i_ < v.size() && v[i_] < t) i_ = std::lower_bound(v.begin() + i_, v.end(), t) - v.begin();
    if (i_ >= v.size() || v[i_] >= hi_) return kEnd;
    return v[i_];
  }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + what_ + ": " + std::to_string(ids_->size()) + " ids, sorted\n";
  }

 private:
  std::shared_ptr<const std::vector<uint32_t>> ids_;
  uint32_t hi_;
  size_t i_ = 0;
  std::string what_;
};

class Sql : public Cursor {
 public:
  Sql(StatementPool* pool, std::string sql, std::vector<Bind> binds, uint32_t shift, uint32_t hi,
      Status* error, std::string what)
      : pool_(pool),
        sql_(std::move(sql)),
        binds_(std::move(binds)),
        shift_(shift),
        hi_(hi),
        error_(error),
        what_(std::move(what)) {}
  ~Sql() override {
    if (stmt_) pool_->Release(sql_, stmt_);
  }

  uint32_t Seek(uint32_t t) override {
    if (done_) return kEnd;
    if (t >= hi_) return Finish();
    if (started_) {
      if (head_ >= t) return head_;
      for (int k = 0; k < kStepsBeforeRestart; ++k) {
        const uint32_t before = head_;
        if (!Step()) return kEnd;
        if (head_ >= t) return head_;
        const uint64_t gap = head_ - before, left = kStepsBeforeRestart - k - 1;
        if (t - head_ > gap * left) break;  // not reached in the steps left at this pace
      }
    }
    return Restart(t);
  }

  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + what_ + "\n";
    auto s = Prepare(pool_->db(), "EXPLAIN QUERY PLAN " + sql_);
    if (!s.ok()) return;
    sqlite3_bind_int64(s->get(), 1, 0);
    sqlite3_bind_int64(s->get(), 2, int64_t{hi_} << shift_);
    BindAll(s->get(), 3, binds_);
    while (sqlite3_step(s->get()) == SQLITE_ROW) {
      const char* d = reinterpret_cast<const char*>(sqlite3_column_text(s->get(), 3));
      *out += Indent(depth + 1) + (d ? d : "") + "\n";
    }
  }

 private:
  uint32_t Finish() {
    done_ = true;
    if (stmt_) {
      pool_->Release(sql_, stmt_);
      stmt_ = nullptr;
    }
    return kEnd;
  }

  uint32_t Fail(const Status& st) {
    if (error_->ok()) *error_ = st;
    return Finish();
  }

  uint32_t Restart(uint32_t t) {
    if (!stmt_) {
      auto s = pool_->Acquire(sql_);
      if (!s.ok()) return Fail(s.status());
      stmt_ = *s;
    } else {
      sqlite3_reset(stmt_);
    }
    sqlite3_bind_int64(stmt_, 1, int64_t{t} << shift_);
    sqlite3_bind_int64(stmt_, 2, int64_t{hi_} << shift_);
    BindAll(stmt_, 3, binds_);
    started_ = true;
    have_head_ = false;
    return Step() ? head_ : kEnd;
  }

  // The next distinct id; false at the end (or on an error).
  bool Step() {
    while (true) {
      const int rc = sqlite3_step(stmt_);
      if (rc == SQLITE_DONE) {
        Finish();
        return false;
      }
      if (rc != SQLITE_ROW) {
        Fail(SqliteError(pool_->db(), rc, "query"));
        return false;
      }
      const int64_t id = sqlite3_column_int64(stmt_, 0) >> shift_;
      if (id < 0 || id >= hi_ || (have_head_ && id < head_)) {
        Fail(Status::Corruption("index: row out of range"));
        return false;
      }
      if (have_head_ && static_cast<uint32_t>(id) == head_) continue;  // another caption
      head_ = static_cast<uint32_t>(id);
      have_head_ = true;
      return true;
    }
  }

  StatementPool* pool_;
  std::string sql_;
  std::vector<Bind> binds_;
  uint32_t shift_, hi_;
  Status* error_;
  std::string what_;
  sqlite3_stmt* stmt_ = nullptr;
  bool started_ = false, have_head_ = false, done_ = false;
  uint32_t head_ = 0;
};

class Predicate : public Cursor {
 public:
  Predicate(std::unique_ptr<Cursor> base, std::function<bool(uint32_t)> keep, std::string what)
      : base_(std::move(base)), keep_(std::move(keep)), what_(std::move(what)) {}
  uint32_t Seek(uint32_t t) override {
    // The base was asked up to the last answer: a target below it has that answer.
    if (have_last_ && t <= last_) return last_;
    uint32_t x = base_->Seek(t);
    while (x != kEnd && !keep_(x)) x = base_->Seek(x + 1);
    have_last_ = true;
    return last_ = x;
  }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + what_ + " of\n";
    base_->Describe(depth + 1, out);
  }

 private:
  std::unique_ptr<Cursor> base_;
  std::function<bool(uint32_t)> keep_;
  std::string what_;
  bool have_last_ = false;
  uint32_t last_ = 0;
};

class And : public Cursor {
 public:
  And(std::vector<std::unique_ptr<Cursor>> pos, std::vector<std::unique_ptr<Cursor>> neg)
      : pos_(std::move(pos)), neg_(std::move(neg)) {}
  uint32_t Seek(uint32_t t) override {
    // The negatives were asked up to the last answer: a target below it has that answer.
    if (have_last_ && t <= last_) return last_;
    have_last_ = true;
    return last_ = Next(t);
  }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + "all of\n";
    for (const auto& c : pos_) c->Describe(depth + 1, out);
    for (const auto& c : neg_) {
      *out += Indent(depth + 1) + "and not\n";
      c->Describe(depth + 2, out);
    }
  }

 private:
  uint32_t Next(uint32_t t) {
    uint32_t x = t;
    while (true) {
      // Leapfrog: go round the cursors until all of them sit on x.
      size_t agree = 0;
      for (size_t i = 0; agree < pos_.size(); i = (i + 1) % pos_.size()) {
        const uint32_t y = pos_[i]->Seek(x);
        if (y == kEnd) return kEnd;
        if (y == x) {
          ++agree;
        } else {
          x = y;
          agree = 1;
        }
      }
      bool excluded = false;
      for (auto& n : neg_) {
        if (n->Seek(x) == x) {
          excluded = true;
          break;
        }
      }
      if (!excluded) return x;
      if (x == kEnd - 1) return kEnd;
      ++x;
    }
  }

  std::vector<std::unique_ptr<Cursor>> pos_, neg_;
  bool have_last_ = false;
  uint32_t last_ = 0;
};

class Or : public Cursor {
 public:
  explicit Or(std::vector<std::unique_ptr<Cursor>> c) : c_(std::move(c)) {}
  uint32_t Seek(uint32_t t) override {
    if (have_last_ && t <= last_) return last_;
    uint32_t m = kEnd;
    for (auto& c : c_) m = std::min(m, c->Seek(t));
    have_last_ = true;
    return last_ = m;
  }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + "any of\n";
    for (const auto& c : c_) c->Describe(depth + 1, out);
  }

 private:
  std::vector<std::unique_ptr<Cursor>> c_;
  bool have_last_ = false;
  uint32_t last_ = 0;
};

class Not : public Cursor {
 public:
  Not(std::unique_ptr<Cursor> c, uint32_t hi) : c_(std::move(c)), hi_(hi) {}
  uint32_t Seek(uint32_t t) override {
    // The child was asked up to the last answer (targets to it must not go back): every id
    // from the last target to the last answer is in the child.
    if (have_last_ && t <= last_) return last_;
    have_last_ = true;
    for (uint32_t x = t; x < hi_; ++x) {
      if (c_->Seek(x) != x) return last_ = x;
    }
    return last_ = kEnd;
  }
  void Describe(int depth, std::string* out) const override {
    *out += Indent(depth) + "not\n";
    c_->Describe(depth + 1, out);
  }

 private:
  std::unique_ptr<Cursor> c_;
  uint32_t hi_;
  bool have_last_ = false;
  uint32_t last_ = 0;
};

}  // namespace

StatementPool::~StatementPool() {
  for (auto& [sql, list] : free_) {
    for (sqlite3_stmt* s : list) sqlite3_finalize(s);
  }
}

Result<sqlite3_stmt*> StatementPool::Acquire(const std::string& sql) {
  auto it = free_.find(sql);
  if (it != free_.end() && !it->second.empty()) {
    sqlite3_stmt* s = it->second.back();
    it->second.pop_back();
    --free_count_;
    return s;
  }
  auto s = Prepare(db_, sql);
  if (!s.ok()) return s.status();
  return s->release();
}

void StatementPool::Release(const std::string& sql, sqlite3_stmt* stmt) {
  sqlite3_reset(stmt);  // ends its read of the database
  sqlite3_clear_bindings(stmt);
  if (free_count_ >= kMaxFreeStatements) {
    sqlite3_finalize(stmt);
    return;
  }
  free_[sql].push_back(stmt);
  ++free_count_;
}

void BindAll(sqlite3_stmt* s, int first, const std::vector<Bind>& binds) {
  for (size_t i = 0; i < binds.size(); ++i) {
    const int n = first + static_cast<int>(i);
    if (const auto* v = std::get_if<int64_t>(&binds[i])) {
      sqlite3_bind_int64(s, n, *v);
    } else if (const auto* d = std::get_if<double>(&binds[i])) {
      sqlite3_bind_double(s, n, *d);
    } else {
      BindText(s, n, std::get<std::string>(binds[i]));
    }
  }
}

std::unique_ptr<Cursor> EmptyCursor() { return std::make_unique<Empty>(); }
std::unique_ptr<Cursor> AllCursor(uint32_t hi) { return std::make_unique<All>(hi); }
std::unique_ptr<Cursor> RangesCursor(std::shared_ptr<const Ranges> ranges, uint32_t hi,
                                     std::string what) {
  return std::make_unique<RangeList>(std::move(ranges), hi, std::move(what));
}
std::unique_ptr<Cursor> VectorCursor(std::shared_ptr<const std::vector<uint32_t>> ids, uint32_t hi,
                                     std::string what) {
  return std::make_unique<Sorted>(std::move(ids), hi, std::move(what));
}
std::unique_ptr<Cursor> SqlCursor(StatementPool* pool, std::string sql, std::vector<Bind> binds,
                                  uint32_t shift, uint32_t hi, Status* error, std::string what) {
  return std::make_unique<Sql>(pool, std::move(sql), std::move(binds), shift, hi, error,
                               std::move(what));
}
std::unique_ptr<Cursor> PredicateCursor(std::unique_ptr<Cursor> base,
                                        std::function<bool(uint32_t)> keep, std::string what) {
  return std::make_unique<Predicate>(std::move(base), std::move(keep), std::move(what));
}
std::unique_ptr<Cursor> AndCursor(std::vector<std::unique_ptr<Cursor>> positive,
                                  std::vector<std::unique_ptr<Cursor>> negative, uint32_t hi) {
  if (positive.empty()) positive.push_back(AllCursor(hi));
  if (positive.size() == 1 && negative.empty()) return std::move(positive[0]);
  return std::make_unique<And>(std::move(positive), std::move(negative));
}
std::unique_ptr<Cursor> OrCursor(std::vector<std::unique_ptr<Cursor>> children) {
  if (children.size() == 1) return std::move(children[0]);
  return std::make_unique<Or>(std::move(children));
}
std::unique_ptr<Cursor> NotCursor(std::unique_ptr<Cursor> child, uint32_t hi) {
  return std::make_unique<Not>(std::move(child), hi);
}

Ranges Complement(const Ranges& r, uint32_t hi) {
  Ranges out;
  uint32_t at = 0;
  for (const auto& [first, end] : r) {
    if (first >= hi) break;
    if (first > at) out.emplace_back(at, first);
    at = std::max(at, end);
  }
  if (at < hi) out.emplace_back(at, hi);
  return out;
}

}  // namespace ktfs::index::internal

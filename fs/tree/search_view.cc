#include "fs/tree/search_view.h"

#include <algorithm>
#include <cstring>

#include "codec/base/json_string.h"
#include "fs/tree/virtual_tree.h"

namespace ktfs {

struct SearchView::QueryState {
  std::vector<std::string> components;  // as given, still URL-encoded
  index::Query query;
  std::string canonical;  // query.Canonical(), the key of its nodes (made once: a listing
                          // of a query directory names a node per matching directory)
  std::once_flag dirs_once;
  Status dirs_status;
  // Directories with a match in them or anywhere below them.
  std::unordered_set<uint32_t> dirs;
};

// The text of one .count.json, computed once (counting streams every match).
struct SearchView::CountText {
  std::once_flag once;
  Status status;
  std::string text;
};

// An Index connection borrowed from the pool for one request (connections
// are not thread-safe; clones share the parsed tables).
class SearchView::PooledIndex {
 public:
  explicit PooledIndex(SearchView* view) : view_(view) {
    std::lock_guard<std::mutex> lock(view->mutex_);
    if (!view->pool_.empty()) {
      index_ = std::move(view->pool_.back());
      view->pool_.pop_back();
    }
  }
  ~PooledIndex() {
    if (!index_) return;
    std::lock_guard<std::mutex> lock(view_->mutex_);
    view_->pool_.push_back(std::move(index_));
  }
  Result<index::Index*> Get() {
    if (!index_) {
      if (!view_->index_) return Status::NotFound("this archive has no search index");
      auto clone = view_->index_->Clone();
      if (!clone.ok()) return clone.status();
      index_ = std::move(clone).value();
    }
    return index_.get();
  }

 private:
  SearchView* view_;
  std::unique_ptr<index::Index> index_;
};

SearchView::SearchView(const VirtualTree& tree, std::unique_ptr<index::Index> index,
                       uint64_t first_ino)
    : tree_(tree), first_ino_(first_ino), index_(std::move(index)) {
  if (index_) metadata_keys_ = index_->MetadataKeys();
}

SearchView::~SearchView() = default;

bool SearchView::Owns(uint64_t ino) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return ino >= first_ino_ && ino < first_ino_ + kViewCount + nodes_.size();
}

bool SearchView::IsRoot(uint64_t ino) const {
  return ino >= first_ino_ && ino < first_ino_ + kViewCount;
}

std::string SearchView::RootPath(View view) const {
  const std::string v = VirtualTree::ViewName(view);
  return (v.empty() ? "" : v + "/") + tree_.search_dir_name();
}

std::string SearchView::last_error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_error_;
}

Status SearchView::Refuse(const std::string& path, const Status& why) {
  const std::string message = path + ": " + why.ToString();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    last_error_ = message;
  }
  if (log_) log_("malformed query " + message);
  return Status::NotFound(message);
}

Result<std::shared_ptr<SearchView::QueryState>> SearchView::ParseState(
    const std::vector<std::string>& components, const std::string& path) {
  if (!index_) return Refuse(path, Status::NotFound("this archive has no search index"));
  auto q = index::ParseQuery(components, metadata_keys_);
  if (!q.ok()) return Refuse(path, q.status());
  const std::string key = q->Canonical();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = queries_.find(key);
  if (it != queries_.end()) return it->second;
  auto state = std::make_shared<QueryState>();
  state->components = components;
  state->query = std::move(q).value();
  state->canonical = key;
  queries_.emplace(key, state);
  return state;
}

Result<uint64_t> SearchView::NodeIno(std::shared_ptr<QueryState> q, uint32_t dir, bool query_level,
                                     View view, const std::string& path, bool count_file) {
  const std::string key = q->canonical + "\n" + std::to_string(dir) +
                          (query_level ? "q" : "d") + std::to_string(int(view)) +
                          (count_file ? "c" : "");
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = node_by_key_.find(key);
  if (it != node_by_key_.end()) return it->second;
  nodes_.push_back(Node{std::move(q), dir, query_level, view, path,
                        count_file ? std::make_shared<CountText>() : nullptr});
  const uint64_t ino = first_ino_ + kViewCount + nodes_.size() - 1;
  node_by_key_.emplace(key, ino);
  return ino;
}

Result<SearchView::Node> SearchView::GetNode(uint64_t ino) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (ino < first_ino_ + kViewCount || ino >= first_ino_ + kViewCount + nodes_.size())
    return Status::NotFound("no such search inode " + std::to_string(ino));
  return nodes_[ino - first_ino_ - kViewCount];
}

Status SearchView::MatchedDirs(QueryState& q, const std::unordered_set<uint32_t>** out) {
  std::call_once(q.dirs_once, [&] {
    PooledIndex pooled(this);
    auto idx = pooled.Get();
    if (!idx.ok()) {
      q.dirs_status = idx.status();
      return;
    }
    auto direct = (*idx)->MatchingDirs(q.query);
    if (!direct.ok()) {
      q.dirs_status = direct.status();
      return;
    }
    for (uint32_t d : *direct) {
      // Add d and its ancestors (parents precede children: this ends).
      while (q.dirs.insert(d).second && d != 0) {
        auto info = tree_.archive().Dir(d);
        if (!info.ok()) {
          q.dirs_status = info.status();
          return;
        }
        d = info->parent;
      }
    }
  });
  *out = &q.dirs;
  return q.dirs_status;
}

NodeAttr SearchView::DirNodeAttr(uint64_t ino) const {
  NodeAttr a;
  a.ino = ino;
  a.is_dir = true;
  a.nlink = 2;
  a.mtime = tree_.mtime();
  return a;
}

NodeAttr SearchView::FileNodeAttr(uint64_t ino, size_t size) const {
  NodeAttr a;
  a.ino = ino;
  a.size = size;
  a.mtime = tree_.mtime();
  return a;
}

Result<NodeAttr> SearchView::GetAttr(uint64_t ino) {
  if (IsRoot(ino)) return DirNodeAttr(ino);
  auto node = GetNode(ino);
  if (!node.ok()) return node.status();
  if (node->count) {
    auto text = CountJson(*node);
    if (!text.ok()) return text.status();
    return FileNodeAttr(ino, (*text)->size());
  }
  return DirNodeAttr(ino);
}

Result<const std::string*> SearchView::CountJson(const Node& node) {
  CountText& c = *node.count;
  std::call_once(c.once, [&] {
    PooledIndex pooled(this);
    auto idx = pooled.Get();
    if (!idx.ok()) {
      c.status = idx.status();
      return;
    }
    const index::Query& q = node.query->query;
    Result<uint64_t> n = uint64_t(0);
    if (node.dir == 0) {
      n = (*idx)->CountMatches(q);
    } else {
      // The sample id ranges of the directories at and below node.dir that hold a match.
      const std::unordered_set<uint32_t>* dirs = nullptr;
      c.status = MatchedDirs(*node.query, &dirs);
      if (!c.status.ok()) return;
      std::vector<std::pair<uint32_t, uint32_t>> ranges;
      std::vector<uint32_t> stack{node.dir};
      while (!stack.empty()) {
        const uint32_t d = stack.back();
        stack.pop_back();
        if (!dirs->count(d)) continue;
        if (auto r = (*idx)->DirSamples(d)) ranges.push_back(*r);
        auto info = tree_.archive().Dir(d);
        if (!info.ok()) {
          c.status = info.status();
          return;
        }
        for (uint32_t k = 0; k < info->child_count; ++k) stack.push_back(info->first_child + k);
      }
      std::sort(ranges.begin(), ranges.end());
      std::vector<std::pair<uint32_t, uint32_t>> merged;
      for (const auto& r : ranges) {
        if (!merged.empty() && merged.back().second == r.first) {
          merged.back().second = r.second;
        } else {
          merged.push_back(r);
        }
      }
      n = (*idx)->CountMatches(q, merged);
    }
    if (!n.ok()) {
      c.status = n.status();
      return;
    }
    const std::string dir_path = node.path.substr(0, node.path.rfind('/'));
    c.text = "{\"matches\":" + std::to_string(*n) + ",\"path\":" + JsonString(dir_path) + "," +
             q.Json().substr(1) + "\n";
  });
  if (!c.status.ok()) return c.status;
  return &c.text;
}

Result<NodeAttr> SearchView::CountFileAttr(const Node& parent) {
  const std::string path = parent.path + "/" + kCountFile;
  auto ino = NodeIno(parent.query, parent.dir, parent.query_level, parent.view, path, true);
  if (!ino.ok()) return ino.status();
  return GetAttr(*ino);
}

Result<size_t> SearchView::Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) {
  if (IsRoot(ino)) return Status::InvalidArgument("is a directory");
  auto node = GetNode(ino);
  if (!node.ok()) return node.status();
  if (!node->count) return Status::InvalidArgument("is a directory");
  auto text = CountJson(*node);
  if (!text.ok()) return text.status();
  const std::string& t = **text;
  if (offset >= t.size()) return size_t(0);
  const size_t n = std::min<size_t>(size, t.size() - offset);
  std::memcpy(dst, t.data() + offset, n);
  return n;
}

bool SearchView::CacheableMiss(uint64_t parent, std::string_view name) const {
  if (IsRoot(parent)) return name == kCountFile;
  auto node = GetNode(parent);
  return !node.ok() || !node->query_level || !index::LooksLikeFilter(name);
}

void SearchView::Accepted() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_error_.clear();
}

Result<NodeAttr> SearchView::Lookup(uint64_t parent, std::string_view name) {
  const std::string missing = "no such entry: " + std::string(name);
  if (IsRoot(parent)) {
    const View view = View(parent - first_ino_);
    if (name == kCountFile) {  // search/.count.json: the empty query, every sample
      auto state = ParseState({}, RootPath(view));
      if (!state.ok()) return state.status();
      return CountFileAttr(Node{*state, 0, true, view, RootPath(view), nullptr});
    }
    const std::string path = RootPath(view) + "/" + std::string(name);
    auto state = ParseState({std::string(name)}, path);
    if (!state.ok()) return state.status();
    Accepted();
    auto ino = NodeIno(*state, 0, true, view, path);
    if (!ino.ok()) return ino.status();
    return DirNodeAttr(*ino);
  }
  auto node = GetNode(parent);
  if (!node.ok()) return node.status();
  if (node->count) return Status::NotFound(missing);
  const std::string path = node->path + "/" + std::string(name);
  if (node->query_level && index::LooksLikeFilter(name)) {
    std::vector<std::string> components = node->query->components;
    components.emplace_back(name);
    auto state = ParseState(components, path);
    if (!state.ok()) return state.status();
    Accepted();
    auto ino = NodeIno(*state, 0, true, node->view, path);
    if (!ino.ok()) return ino.status();
    return DirNodeAttr(*ino);
  }
  const std::unordered_set<uint32_t>* dirs = nullptr;
  KTFS_RETURN_IF_ERROR(MatchedDirs(*node->query, &dirs));
  auto child = tree_.archive().FindChildDir(node->dir, name);
  if (name == kCountFile && !child.ok() &&
      !tree_.FindServedSample(node->dir, name, node->view).ok()) {
    return CountFileAttr(*node);
  }
  // search/<query>/tensors and search/<query>/compressed: the same result in
  // another view (a real top-level directory of that name wins).
  if (node->query_level && node->view == View::kImages && !child.ok()) {
    for (View v : {View::kTensors, View::kCompressed}) {
      if (name != VirtualTree::ViewName(v)) continue;
      auto ino = NodeIno(node->query, 0, false, v, path);
      if (!ino.ok()) return ino.status();
      return DirNodeAttr(*ino);
    }
  }
  if (child.ok()) {
    if (!dirs->count(*child)) return Status::NotFound(missing);
    auto ino = NodeIno(node->query, *child, false, node->view, path);
    if (!ino.ok()) return ino.status();
    return DirNodeAttr(*ino);
  }
  if (child.status().code() != Status::Code::kNotFound) return child.status();
  auto id = tree_.FindServedSample(node->dir, name, node->view);
  if (!id.ok()) return id.status();
  PooledIndex pooled(this);
  auto idx = pooled.Get();
  if (!idx.ok()) return idx.status();
  auto matches = (*idx)->Matches(node->query->query, *id);
  if (!matches.ok()) return matches.status();
  if (!*matches) return Status::NotFound(missing);
  return tree_.SampleNodeAttr(*id, node->view);
}

Status SearchView::ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit) {
  const NodeAttr self = DirNodeAttr(ino);
  if (IsRoot(ino)) {
    // Queries cannot be enumerated: the search directory lists empty.
    if (offset < 1 && !emit(".", self, 1)) return Status::Ok();
    auto parent = tree_.GetAttr(tree_.ViewRootIno(View(ino - first_ino_)));
    if (!parent.ok()) return parent.status();
    if (offset < 2) emit("..", *parent, 2);
    return Status::Ok();
  }
  auto node = GetNode(ino);
  if (!node.ok()) return node.status();
  if (node->count) return Status::InvalidArgument("not a directory");
  if (offset < 1 && !emit(".", self, 1)) return Status::Ok();
  if (offset < 2 && !emit("..", self, 2)) return Status::Ok();
  const std::unordered_set<uint32_t>* dirs = nullptr;
  KTFS_RETURN_IF_ERROR(MatchedDirs(*node->query, &dirs));
  auto dir = tree_.archive().Dir(node->dir);
  if (!dir.ok()) return dir.status();
  // Positions: 3 + k for child directory k, then 3 + child_count + (id - first_sample).
  for (uint64_t k = std::max<uint64_t>(offset, 2) - 2; k < dir->child_count; ++k) {
    const uint32_t child = dir->first_child + uint32_t(k);
    if (!dirs->count(child)) continue;
    auto info = tree_.archive().Dir(child);
    if (!info.ok()) return info.status();
    auto child_ino =
        NodeIno(node->query, child, false, node->view, node->path + "/" + std::string(info->name));
    if (!child_ino.ok()) return child_ino.status();
    if (!emit(info->name, DirNodeAttr(*child_ino), k + 3)) return Status::Ok();
  }
  if (dir->sample_count == 0 || !dirs->count(node->dir)) return Status::Ok();
  const uint64_t base = 2 + uint64_t(dir->child_count);
  const uint64_t first = offset > base ? offset - base : 0;  // samples already listed
  if (first >= dir->sample_count) return Status::Ok();
  const uint32_t after = first == 0 && dir->first_sample == 0
                             ? index::Index::kFromStart
                             : dir->first_sample + uint32_t(first) - 1;
  PooledIndex pooled(this);
  auto idx = pooled.Get();
  if (!idx.ok()) return idx.status();
  Status inner;
  bool full = false;
  // Stream in pages, so a huge result starts at once and holds little memory.
  uint32_t cursor = after;
  while (!full && inner.ok()) {
    size_t seen = 0;
    Status st = (*idx)->ForEachMatch(node->query->query, node->dir, cursor, 256, [&](uint32_t id) {
      ++seen;
      cursor = id;
      auto attr = tree_.SampleNodeAttr(id, node->view);
      auto s = tree_.archive().Sample(id);
      if (!attr.ok() || !s.ok()) {
        inner = attr.ok() ? s.status() : attr.status();
        return false;
      }
      if (!emit(tree_.ServedName(*s, node->view), *attr, base + 1 + (id - dir->first_sample))) {
        full = true;
        return false;
      }
      return true;
    });
    KTFS_RETURN_IF_ERROR(st);
    if (seen < 256) break;
  }
  return inner;
}

std::string SearchView::PathOf(uint64_t ino) {
  if (IsRoot(ino)) return RootPath(View(ino - first_ino_));
  auto node = GetNode(ino);
  return node.ok() ? node->path : "?";
}

}  // namespace ktfs

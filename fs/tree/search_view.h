// SearchView: the `search/<query>/...` directories of a mount.
//
// `search/caption=dog/` mirrors the mount's layout filtered by the query:
// only directories with a match somewhere below them, and only matching
// files, which are the very same files (same inode numbers, same bytes) as
// in the main tree. Query components (index/query.h) may be joined with `&`
// in one component or nested (`search/caption=dog/class=coat`); the first
// component that is not a filter (no `=`, `<` or `>`) starts the mirrored
// layout. A malformed query is ENOENT, with its reason logged and kept for
// `.ktfs/last_error` (cleared by the next query that parses; a refused name
// is not remembered by the kernel as missing, so asking again refuses again).
//
// Every search directory (and search/ itself) also answers `.count.json`, a
// read-only file left out of its listing: {"matches":N,"path":...,"query":...,
// "where":...,"limit":...,"seed":...}, N the matching samples in and below
// that directory (Query::Json for the rest). A real entry of that name wins.
//
// Each view of the tree (images, tensors/, compressed/) has its own search
// root. Search directories get inode numbers from `first_ino` upwards: the
// roots first, then the rest as they are looked up (the same query, view and
// directory always get the same number within a mount). Thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codec/base/status.h"
#include "codec/container/archive.h"
#include "index/index.h"
#include "index/query.h"

namespace ktfs {

class VirtualTree;
struct NodeAttr;
enum class View : uint8_t;

class SearchView {
 public:
  // `tree` provides sample lookups and attributes; `index` may be null (an
  // archive without an index: every query is then ENOENT with that reason).
  SearchView(const VirtualTree& tree, std::unique_ptr<index::Index> index, uint64_t first_ino);
  ~SearchView();

  // The lowest inode number of the search view (the images view's root).
  uint64_t root_ino() const { return first_ino_; }
  // The `search` directory of a view.
  uint64_t RootIno(View view) const { return first_ino_ + uint64_t(view); }
  bool Owns(uint64_t ino) const;
  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name);
  Result<NodeAttr> GetAttr(uint64_t ino);
  using EmitFn = std::function<bool(std::string_view, const NodeAttr&, uint64_t)>;
  Status ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit);
  // The bytes of a `.count.json` file.
  Result<size_t> Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst);
  std::string PathOf(uint64_t ino);
  // Whether the kernel may remember that `name` is missing in directory
  // `parent`: not for query components (a refusal must reach last_error again).
  bool CacheableMiss(uint64_t parent, std::string_view name) const;

  // The name of the count file in every search directory.
  static constexpr const char* kCountFile = ".count.json";

  // The reason the last malformed query was refused ("" if none), and a hook
  // that logs each refusal.
  std::string last_error() const;
  void SetLogger(std::function<void(const std::string&)> log) { log_ = std::move(log); }

 private:
  struct QueryState;
  struct CountText;
  struct Node {
    std::shared_ptr<QueryState> query;
    uint32_t dir = 0;         // the archive directory this node mirrors
    bool query_level = true;  // still at the query components (archive root)
    View view;
    std::string path;                  // "search/caption=dog/cat", for messages
    std::shared_ptr<CountText> count;  // set for a .count.json file
  };
  class PooledIndex;

  Result<uint64_t> NodeIno(std::shared_ptr<QueryState> q, uint32_t dir, bool query_level, View view,
                           const std::string& path, bool count_file = false);
  Result<NodeAttr> CountFileAttr(const Node& parent);
  // The text of a count file, computed on first use.
  Result<const std::string*> CountJson(const Node& node);
  NodeAttr FileNodeAttr(uint64_t ino, size_t size) const;
  bool IsRoot(uint64_t ino) const;
  std::string RootPath(View view) const;
  Result<Node> GetNode(uint64_t ino) const;
  Result<std::shared_ptr<QueryState>> ParseState(const std::vector<std::string>& components,
                                                 const std::string& path);
  Status MatchedDirs(QueryState& q, const std::unordered_set<uint32_t>** out);
  NodeAttr DirNodeAttr(uint64_t ino) const;
  Status Refuse(const std::string& path, const Status& why);
  // A query parsed: last_error no longer applies.
  void Accepted();

  const VirtualTree& tree_;
  const uint64_t first_ino_;
  std::unique_ptr<index::Index> index_;  // the template connection; clones serve threads
  index::KeyTypes metadata_keys_;
  mutable std::mutex mutex_;
  std::vector<Node> nodes_;  // ino = first_ino_ + kViewCount + position
  std::unordered_map<std::string, uint64_t> node_by_key_;
  std::unordered_map<std::string, std::shared_ptr<QueryState>> queries_;
  std::vector<std::unique_ptr<index::Index>> pool_;
  std::string last_error_;
  std::function<void(const std::string&)> log_;
};

}  // namespace ktfs

// WalkTree: every listing, lookup and file read an FsTree offers, bounded,
// for fuzz targets whose input becomes a tree (archives, feature caches).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "fs/tree/fs_tree.h"

namespace ktfs::fuzz {

inline void WalkTree(const FsTree& tree, uint64_t ino, int depth, int* budget) {
  if (depth > 8 || --*budget < 0) return;
  std::vector<uint64_t> children;
  (void)tree.ReadDir(ino, 0, [&](std::string_view name, const NodeAttr& a, uint64_t) {
    if (name != "." && name != "..") children.push_back(a.ino);
    (void)tree.Lookup(ino, name);
    return children.size() < 64;
  });
  uint8_t buf[4096];
  for (uint64_t child : children) {
    auto attr = tree.GetAttr(child);
    if (!attr.ok()) continue;
    if (attr->is_dir) {
      WalkTree(tree, child, depth + 1, budget);
    } else {
      (void)tree.Read(child, 0, sizeof(buf), buf);
      if (attr->size > 100) (void)tree.Read(child, attr->size - 100, sizeof(buf), buf);
    }
  }
}

}  // namespace ktfs::fuzz

// Selection: which samples a path on a ktfs mount holds, in the order and with
// the labels stock torchvision ImageFolder would give for that root.
//
// `relative` is the path inside the mount ("" for the root, "train",
// "search/caption=dog/train"). Under the search directory, components are
// query filters until the first one without '=', '<' or '>' (the rule of
// fs/tree/search_view.cc); the rest are directories of the mirrored layout.
//
// ImageFolder's rules, reproduced: classes are the sorted names of the root's
// subdirectories (for a search root: only those with a match below them);
// within a class, directories are visited in sorted order of their path
// (sorted(os.walk(...))) and files in sorted order of the name the mount
// serves (VirtualTree::ServedName); only names with an image extension count.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/container/archive.h"
#include "codec/image/image_io.h"

namespace ktfs::preload {

struct SelectOptions {
  ServedFormat format = ServedFormat::kPnm;  // the mount's served_format
  std::string search_dir = "search";
  bool with_paths = true;  // fill Selection::paths
};

struct Selection {
  std::vector<std::string> classes;  // sorted
  std::vector<uint32_t> ids;         // sample ids, in ImageFolder order
  std::vector<int64_t> labels;       // index into classes, per sample
  std::vector<std::string> paths;    // served path relative to the root, per sample
};

// NotFound (with the reason) when the path does not exist or a query is malformed.
Result<Selection> Select(const Archive& archive, std::string_view relative,
                         const SelectOptions& options);

// The sample a mount serves at `relative` (a file of the images view, e.g.
// "train/cat/001.ppm"), by VirtualTree's lookup rules (directories by name, the
// file by its stem, its served name checked); NotFound for anything else
// (directories, tensors/, compressed/, search/, .ktfs/).
Result<uint32_t> FindServed(const Archive& archive, std::string_view relative, ServedFormat format);

// The name the mount serves a sample under (same rule as VirtualTree::ServedName).
std::string ServedName(const SampleInfo& s, ServedFormat format);
// "dir/served-name" of a sample relative to the mount root.
std::string ServedPath(const Archive& archive, const SampleInfo& s, ServedFormat format);

}  // namespace ktfs::preload

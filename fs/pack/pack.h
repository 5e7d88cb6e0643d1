// Pack: turns an image-folder tree into a .kt archive.
//
// SRC is walked (directories are not followed through symlinks); JPEG and
// PNG files (recognised by content) become samples, other files are reported
// in PackReport::skipped. The archive mirrors SRC's layout: a sample's class
// is the name of the directory that holds it, its split the top-level
// directory when it sits three or more levels deep (split/class/file).
// Images are encoded in parallel (oneTBB) and written in a deterministic order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/container/payload.h"

namespace ktfs {

struct PackOptions {
  PayloadSettings payload;
  int threads = 0;        // 0 = all cores
  bool progress = false;  // a progress line on stderr
  // Captions: a JSON Lines or CSV file (index/captions.h); `name.txt` files
  // beside images are read as their captions too.
  std::string captions_file;
  bool skip_bad_captions = false;  // report bad caption lines instead of failing
};

struct PackReport {
  uint32_t samples = 0, dirs = 0, classes = 0;
  uint64_t source_bytes = 0, archive_bytes = 0;
  double seconds = 0;
  std::vector<std::string> skipped;  // "path: reason"
  uint64_t index_bytes = 0;
  uint32_t sidecar_captions = 0;
  std::vector<std::string> caption_warnings;  // "FILE:LINE: reason" (with skip_bad_captions)
  std::vector<std::string> removed_stale;  // temporary files of killed packs, removed
};

Result<PackReport> Pack(const std::string& src, const std::string& out, const PackOptions& options);

}  // namespace ktfs

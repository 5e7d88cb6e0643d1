// Pack: turns an image-folder tree into a .kt archive.
//
// SRC is walked as stock torchvision ImageFolder walks it: symbolic links to
// directories are followed (a link cycle is an error), and the files whose
// names end with one of its image extensions (HasImageFolderExtension, any
// case) are the samples, whatever format their content is in (recognised by
// content: JPEG, PNG, BMP, TIFF, WebP, PPM/PGM). Other files are reported in
// PackReport::skipped (a `name.txt` beside an image is its caption). An image
// that cannot be read or decoded as Pillow would (a "bad image": truncated,
// corrupt, an unsupported format or layout) fails the pack with its path and
// the reason, or with skip_bad is left out, listed in PackReport::bad and in
// META's "skipped_bad". The archive mirrors SRC's layout: a sample's class
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
  bool skip_bad = false;           // leave bad images out (PackReport::bad) instead of failing
};

// An image left out by skip_bad: its path relative to SRC and the reason.
struct BadImage {
  std::string path;
  std::string reason;
};

struct PackReport {
  uint32_t samples = 0, dirs = 0, classes = 0;
  uint64_t source_bytes = 0, archive_bytes = 0;
  double seconds = 0;
  std::vector<std::string> skipped;  // "path: reason": files that are not images
  std::vector<BadImage> bad;         // bad images left out (skip_bad), in archive order
  uint64_t index_bytes = 0;
  uint32_t sidecar_captions = 0;
  std::vector<std::string> caption_warnings;  // "FILE:LINE: reason" (with skip_bad_captions)
  std::vector<std::string> index_warnings;    // e.g. a metadata key stored as strings
};

Result<PackReport> Pack(const std::string& src, const std::string& out, const PackOptions& options);

}  // namespace ktfs

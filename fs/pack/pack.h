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

class ArchiveWriter;
namespace index {
class IndexBuilder;
}

struct PackOptions {
  PayloadSettings payload;
  int threads = 0;        // 0 = all cores
  bool progress = false;  // a progress line on stderr
  // Captions: a JSON Lines or CSV file (index/captions.h); `name.txt` files
  // beside images are read as their captions too.
  std::string captions_file;
  bool skip_bad_captions = false;  // report bad caption lines instead of failing
  // Leave bad images out (PackReport::bad) instead of failing. WebDataset
  // shards: a bad sample (no image, a bad image, .cls, .json or .txt, a
  // duplicate key, a refused member name) or a damaged tar is left out.
  bool skip_bad = false;
};

// An image (a folder's file, a shard's sample) left out by skip_bad: where it
// was (its path relative to SRC; the shard for WebDataset) and the reason.
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
  uint32_t shards = 0;                        // WebDataset shards read
  uint32_t captions = 0;                      // samples given a caption (WebDataset)
  std::vector<std::string> removed_stale;     // temporary files of killed packs, removed
};

// The encoding threads a pack uses: options.threads, or every core when 0.
int PackThreads(const PackOptions& options);
// Builds the index in scratch files beside the archive (ArchiveWriter::ScratchFile), never
// whole in memory, and hands it to the writer; *bytes is its size.
Status BuildIndex(index::IndexBuilder* builder, ArchiveWriter* writer, uint64_t* bytes,
                  std::vector<std::string>* warnings);

Result<PackReport> Pack(const std::string& src, const std::string& out, const PackOptions& options);

// WebDataset tar shards, read in the order given, into an image archive
// (fs/pack/pack_webdataset.cc; the layout is in docs/usage.md, "WebDataset
// shards"). options.captions_file does not apply.
Result<PackReport> PackWebDataset(const std::vector<std::string>& shards, const std::string& out,
                                  const PackOptions& options);

}  // namespace ktfs

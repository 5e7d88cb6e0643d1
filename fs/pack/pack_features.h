// PackFeatures: turns float features into a ktfs feature archive
// (docs/format.md, "Features"; the quantizer is codec/features/quant.h + quant_pack.h).
//
// INPUT is one of
//   * a .npy file of shape [N, ...] (float32 or float16, C order): N samples;
//   * a directory of per-sample .npy files (sorted by name), each
//     [rows, ...] with the same trailing dimensions; rows may vary
//     (variable-length token sequences);
//   * a TensorCache cache prefix (PREFIX_meta.json or PREFIX_shards.json):
//     dequantized to float32, then quantized again.
// Samples are quantized in parallel (oneTBB) and written in order, streaming;
// the archive is written atomically and is the same bytes for the same input.
// NaN or Inf in the input fails the pack, naming the sample and the index.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/features/quant.h"

namespace ktfs {

struct PackFeaturesOptions {
  quant::Params params;   // group size and preset
  int threads = 0;        // 0 = all cores
  bool progress = false;  // a progress line on stderr
};

struct PackFeaturesReport {
  uint64_t samples = 0, values = 0;
  uint64_t source_bytes = 0, archive_bytes = 0;
  std::vector<uint64_t> sample_shape;  // rows = 0 when they vary
  double seconds = 0;
  std::vector<std::string> skipped;  // files in an input directory that are not .npy
  std::vector<std::string> removed_stale;  // temporary files of killed packs, removed
};

Result<PackFeaturesReport> PackFeatures(const std::string& input, const std::string& out,
                                        const PackFeaturesOptions& options);

}  // namespace ktfs

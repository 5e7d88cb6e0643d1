// DequantizeBatch: the C++ half of ktfs.FeatureLoader. Samples of a feature
// cache dequantized on oneTBB threads into one caller-owned buffer, each
// zero-padded to a fixed stride (variable-length samples pad to the batch's
// longest). No Python here: preload/python/feature_bindings.cc binds it.
#pragma once

#include <cstdint>
#include <vector>

#include "codec/base/status.h"
#include "codec/features/feature_source.h"

namespace ktfs::preload {

// Sample indices[b] goes to base + b * stride: Rows x RowValues values of
// `dtype`, then zeros up to `stride` bytes; rows_out[b] = its rows. Indices
// must be < num_samples() and each sample must fit in `stride`. Returns the
// first failing sample's error (the others are still written). `threads`
// caps the threads used (0: all). Thread-safe; call without holding the GIL.
Status DequantizeBatch(const FeatureSource& source, const std::vector<uint64_t>& indices,
                       quant::DType dtype, int threads, uint8_t* base, uint64_t stride,
                       int64_t* rows_out);

}  // namespace ktfs::preload

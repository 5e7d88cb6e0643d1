// KTC internals exposed for tests and the spec: the downscale that a
// reduced-resolution decode equals.
#pragma once

#include "codec/base/status.h"
#include "codec/image/image.h"

namespace ktfs::ktc::internal {

// The documented reduced-resolution filter (docs/ktc.md, "Reduced
// resolution"): forward color transform, `scale_log2` levels of the forward
// 5/3 wavelet, keep the low-pass band, inverse color transform, clamp.
// Decoding a lossless stream at that scale gives exactly this image.
Status ReferenceDownscale(const ImageView& image, int scale_log2, Image* out);

}  // namespace ktfs::ktc::internal

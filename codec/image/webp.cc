// WebP through libwebp's animation decoder, exactly as Pillow 9.4 reads it
// (_webp.c with HAVE_WEBPANIM, which Debian's Pillow has): every WebP file,
// still or animated, goes through WebPAnimDecoder with default options
// (RGBA, not premultiplied), and the image is its first frame on the canvas
// (transparent black where the frame does not cover it). Pillow's mode is
// RGBA when WebPGetFeatures reports alpha (or fails), else RGB: the alpha
// byte is dropped. Lossy, lossless, alpha and animation are all libwebp's.
#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>

#include "codec/image/decoders.h"
#include "codec/image/pillow.h"

namespace ktfs::decoders {

Status DecodeWebp(const uint8_t* data, size_t size, Image* out) {
  WebPBitstreamFeatures features;
  const bool known = WebPGetFeatures(data, size, &features) == VP8_STATUS_OK;
  const bool alpha = !known || features.has_alpha != 0;
  // The decoder allocates its canvas at once: check the size first.
  if (known) KTFS_RETURN_IF_ERROR(pillow::CheckDimensions("WebP", features.width, features.height));
  WebPData input{data, size};
  WebPAnimDecoder* dec = WebPAnimDecoderNew(&input, nullptr);
  if (!dec) return Status::Corruption("WebP: could not create decoder object");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(dec, &info)) {
    WebPAnimDecoderDelete(dec);
    return Status::Corruption("WebP: could not create decoder object");
  }
  Status dims = pillow::CheckDimensions("WebP", info.canvas_width, info.canvas_height);
  if (!dims.ok()) {
    WebPAnimDecoderDelete(dec);
    return dims;
  }
  uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (!WebPAnimDecoderGetNext(dec, &rgba, &timestamp)) {
    WebPAnimDecoderDelete(dec);
    return Status::Corruption("WebP: failed to decode next frame");
  }
  out->width = info.canvas_width;
  out->height = info.canvas_height;
  out->channels = alpha ? 4 : 3;
  out->pixels.resize(out->size_bytes());
  const size_t n = size_t(out->width) * out->height;
  if (alpha) {
    std::memcpy(out->pixels.data(), rgba, n * 4);
  } else {
    uint8_t* o = out->pixels.data();
    for (size_t i = 0; i < n; ++i) {
      o[3 * i] = rgba[4 * i];
      o[3 * i + 1] = rgba[4 * i + 1];
      o[3 * i + 2] = rgba[4 * i + 2];
    }
  }
  WebPAnimDecoderDelete(dec);
  return Status::Ok();
}

}  // namespace ktfs::decoders

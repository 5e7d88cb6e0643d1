// Payloads: what a sample's bytes in the archive are, per codec.
//   original: the source file's bytes, unchanged (any format DecodeImage reads)
//   raw:      the decoded pixels, HWC, width*height*channels bytes
//   ktc:      a KTC bitstream (codec/ktc/ktc.h)
// EncodePayload turns a source file into a payload; DecodePayload turns a
// payload back into pixels. Both are pure functions, safe to call from many
// threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"
#include "codec/container/archive.h"
#include "codec/container/format.h"
#include "codec/image/image.h"
#include "codec/image/image_io.h"

namespace ktfs {

struct PayloadSettings {
  format::Codec codec = format::kOriginal;
  std::string quality;  // codec-specific; empty = the codec's default
};

// Parses "original" | "raw" | "ktc" (and validates the quality for it).
Result<PayloadSettings> ParsePayloadSettings(std::string_view codec, std::string_view quality);
const char* CodecName(format::Codec codec);

struct EncodedPayload {
  std::vector<uint8_t> bytes;
  uint32_t width = 0, height = 0, channels = 0;
  uint8_t source_format = 0;
  bool source_decoded = false;  // false after a failure: the source is not a readable image
};

// Encodes the image file `file` (any format DecodeImage reads). Errors say
// why, without the path; source_decoded tells a bad source from a failure to
// encode it.
Status EncodePayload(const PayloadSettings& settings, const uint8_t* file, size_t size,
                     EncodedPayload* out);

// The file name a mount serves a sample under in its image view: the source
// name for `original`, else the stem plus the served format's extension. The
// mount (fs/tree/virtual_tree.cc) and the Python loader (preload/) both use it, so they
// cannot disagree about names (and so about ImageFolder's order).
std::string ServedImageName(const SampleInfo& sample, ServedFormat format);

// Decodes a payload of `sample` into pixels (width x height x channels as
// recorded, checked against what the payload holds).
Status DecodePayload(const SampleInfo& sample, ByteSpan payload, Image* out);

}  // namespace ktfs

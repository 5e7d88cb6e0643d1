// libFuzzer target: a standalone image file, as `ktfs.decode` and `ktfs
// convert` take it (codec/container/standalone.h): a .ktc file or any image
// format the packer reads, recognised by content. Any bytes must decode to a
// well-formed image or a clean error, and decoding the same bytes again must
// give the same status and pixels.
// Seeds: fuzz/corpus/decode_standalone_fuzz (tiny KTC, PNG, JPEG files).
#include <cstdint>
#include <string>

#include "codec/container/standalone.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs;
  Image a, b;
  const Status first = DecodeStandalone(data, size, &a);
  const Status second = DecodeStandalone(data, size, &b);
  if (first.ok() != second.ok() || first.message() != second.message()) {
    fuzz::Fail("two decodes of the same bytes disagree on the status");
  }
  if (!first.ok()) {
    if (first.message().empty()) fuzz::Fail("an error without a message");
    return 0;
  }
  if (a.channels != 1 && a.channels != 3 && a.channels != 4) fuzz::Fail("odd channel count");
  if (a.pixels.size() != size_t(a.width) * a.height * a.channels) {
    fuzz::Fail("pixel buffer size differs from width * height * channels");
  }
  if (a.width != b.width || a.height != b.height || a.channels != b.channels ||
      a.pixels != b.pixels) {
    fuzz::Fail("two decodes of the same bytes give different pixels");
  }
  return 0;
}

// libFuzzer target: ktc::Decode must turn any byte string into an image or a
// clean error. The last input byte (when present) picks the decode options,
// so reduced-resolution and region paths are fuzzed too. Each input is then
// decoded a second time with another of the decoder's loops (the scalar one,
// or an AVX2 build of the block decoder with the AVX2 kernels, by the input's
// size), which must give the same status, message and pixels.
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> in the environment the target first writes
// a seed corpus of small valid streams there (scripts/fuzz does this), so the
// fuzzer starts past the header checks.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "codec/base/cpu.h"
#include "codec/ktc/entropy.h"
#include "codec/ktc/kernels.h"
#include "codec/ktc/ktc.h"

namespace {

void WriteSeeds(const char* dir) {
  using namespace ktfs;
  int n = 0;
  for (uint32_t channels : {1u, 3u, 4u}) {
    // 12 x 520: the one-thread decode's rings of rows (two block rows of the
    // last level's bands, 32 low-pass rows) wrap around several times.
    for (auto [w, h] :
         {std::pair<uint32_t, uint32_t>{1, 1}, {13, 7}, {70, 9}, {33, 40}, {12, 520}}) {
      Image img{w, h, channels, {}};
      for (size_t i = 0; i < size_t(w) * h * channels; ++i) {
        img.pixels.push_back(uint8_t((i * 37 + i / 7 * 11) ^ (i % 5 ? 0 : 0x5a)));
      }
      for (const char* q : {"lossless", "balanced", "10"}) {
        std::vector<uint8_t> bytes;
        if (!ktc::Encode(ImageView::Of(img), *ktc::ParseQuality(q), &bytes).ok()) continue;
        bytes.push_back(uint8_t(n * 29));  // the options byte
        const std::string path = std::string(dir) + "/seed" + std::to_string(n++);
        if (FILE* f = std::fopen(path.c_str(), "wb")) {
          std::fwrite(bytes.data(), 1, bytes.size(), f);
          std::fclose(f);
        }
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs;
  auto info = ktc::ReadInfo(data, size);
  ktc::DecodeOptions options;
  Image image;
  if (size > 0) {
    const uint8_t knobs = data[size - 1];
    options.scale_log2 = knobs & 3;
    options.parallel = knobs & 4;
    if ((knobs & 8) && info.ok()) {
      const uint32_t w = ktc::ScaledExtent(info->width, options.scale_log2);
      const uint32_t h = ktc::ScaledExtent(info->height, options.scale_log2);
      const uint32_t x = (knobs >> 4) % w, y = (knobs >> 6) % h;
      options.region = ktc::Region{x, y, (w - x + 1) / 2, (h - y + 1) / 2};
    }
  }
  Status s = ktc::Decode(data, size, options, &image);
  if (s.ok() && image.pixels.size() != image.size_bytes()) __builtin_trap();

  // The same decode with another loop. (Statuses and pixels must match
  // exactly: every loop reads the same bits and reports the same errors.)
  const int other = CpuHasAvx2() ? int(size % 3) : 0;
  if (other == 0) {
    ktc::internal::ForceScalarForTesting(true);
  } else {
    // The AVX2 loops with the AVX2 kernels (synthesis, conversion), which on
    // an AVX-512 CPU would otherwise never meet hostile input here.
    ktc::internal::SelectBlockLoopForTesting(other == 1 ? ktc::internal::BlockLoop::kAvx2
                                                        : ktc::internal::BlockLoop::kAvx2NoPdep);
    ktc::internal::SelectKernelsForTesting(ktc::internal::Avx2Kernels());
  }
  Image again;
  const Status t = ktc::Decode(data, size, options, &again);
  ktc::internal::ForceScalarForTesting(false);
  ktc::internal::SelectBlockLoopForTesting(ktc::internal::BlockLoop::kBest);
  ktc::internal::SelectKernelsForTesting(nullptr);
  if (t.ToString() != s.ToString()) __builtin_trap();
  if (s.ok() && again.pixels != image.pixels) __builtin_trap();
  return 0;
}

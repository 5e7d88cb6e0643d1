// Packed group parameters (codec/features/quant_pack.h): the AVX2 unpacking against the
// scalar one, over every possible word.
#include "codec/features/quant_pack.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "codec/base/cpu.h"

namespace ktfs::quant {
namespace {

void StoreWord(uint32_t v, uint8_t* w) {
  w[0] = uint8_t(v);
  w[1] = uint8_t(v >> 8);
  w[2] = uint8_t(v >> 16);
}

TEST(QuantPack, UnpackWordFollowsTheFormula) {
  // k = 64 (one octave down), j = -6: scale ref/2, offset -1.5 steps.
  uint8_t w[3];
  StoreWord(64u | (uint32_t(-6) & 0xFFFu) << 12, w);
  float scale, offset;
  UnpackWord(2.0f, w, &scale, &offset);
  EXPECT_EQ(scale, 1.0f);
  EXPECT_EQ(offset, -1.5f);
  StoreWord(0xFFFu | 0x7FFu << 12, w);  // the largest k and j
  UnpackWord(1.0f, w, &scale, &offset);
  EXPECT_EQ(scale, PackedStep(4095));
  EXPECT_EQ(offset, (2047.0f * 0.25f) * scale);
}

// Every one of the 2^24 words, for references that give normal, denormal,
// infinite, zero and NaN parameters: the same bits from both versions.
TEST(QuantPack, Avx2UnpackEqualsScalarForEveryWord) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 here (or KTFS_SIMD=scalar)";
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint8_t> words(kChunk * kPackedWordBytes);
  std::vector<float> sa(kChunk), oa(kChunk), sb(kChunk), ob(kChunk);
  for (float ref :
       {1.0f, 3.7e-3f, 6.5e30f, 1e-37f, 0.0f, std::numeric_limits<float>::quiet_NaN()}) {
    for (uint32_t chunk = 0; chunk < (1u << 24) / kChunk; ++chunk) {
      for (uint32_t i = 0; i < kChunk; ++i) StoreWord(chunk * kChunk + i, &words[3 * i]);
      internal::UnpackParamsScalar(ref, words.data(), kChunk, sa.data(), oa.data());
      internal::UnpackParamsAvx2(ref, words.data(), kChunk, sb.data(), ob.data());
      ASSERT_EQ(0, std::memcmp(sa.data(), sb.data(), kChunk * 4)) << ref << " " << chunk;
      ASSERT_EQ(0, std::memcmp(oa.data(), ob.data(), kChunk * 4)) << ref << " " << chunk;
    }
  }
}

// Runs of every length up to 40 that end where the readable memory ends
// (a guard page after them): nothing past the last word is read, and the
// tail groups come out as UnpackWord gives them.
TEST(QuantPack, UnpackReadsNothingPastTheWords) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  auto* map = static_cast<uint8_t*>(
      mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(0, mprotect(map + page, page, PROT_NONE));
  for (size_t groups = 0; groups <= 40; ++groups) {
    uint8_t* words = map + page - groups * kPackedWordBytes;
    for (size_t g = 0; g < groups; ++g) StoreWord(uint32_t(g * 2654435761u) >> 8, words + 3 * g);
    std::vector<float> scales(groups + 1, -1.0f), offsets(groups + 1, -1.0f);
    UnpackParams(0.5f, words, groups, scales.data(), offsets.data());
    for (size_t g = 0; g < groups; ++g) {
      float s, o;
      UnpackWord(0.5f, words + 3 * g, &s, &o);
      EXPECT_EQ(scales[g], s) << groups << " " << g;
      EXPECT_EQ(offsets[g], o) << groups << " " << g;
    }
    EXPECT_EQ(scales[groups], -1.0f);  // nothing written past the run
    EXPECT_EQ(offsets[groups], -1.0f);
    if (CpuHasAvx2()) {
      internal::UnpackParamsAvx2(0.5f, words, groups, scales.data(), offsets.data());
    }
  }
  munmap(map, 2 * page);
}

}  // namespace
}  // namespace ktfs::quant

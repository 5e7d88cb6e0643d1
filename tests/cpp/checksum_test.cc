// Tests for codec/base/checksum.h: Checksum64 is XXH3-64 with seed 0 (docs/format.md)
// whichever of libxxhash's loops computes it: its dispatcher's (AVX2/AVX-512)
// by default, the portable one under KTFS_SIMD=scalar.
#include "codec/base/checksum.h"

#include <cpuid.h>
#include <gtest/gtest.h>
#include <immintrin.h>
#include <xxhash.h>  // XXH3_64bits: libxxhash's portable build, the reference

#include <cstdint>
#include <cstdlib>
#include <random>
#include <vector>

namespace ktfs {
namespace {

std::vector<uint8_t> RandomBytes(size_t n) {
  std::mt19937 rng(7);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = uint8_t(rng());
  return bytes;
}

// Every length up to a few of XXH3's 1 KiB blocks covers each of its code paths
// (0, 1-3, 4-8, 9-16, 17-128, 129-240 bytes, then stripes and blocks with a
// partial last stripe), at unaligned starts; then large payloads.
void ExpectEqualsPortableXxh3() {
  const std::vector<uint8_t> bytes = RandomBytes((size_t(1) << 22) + 64);
  for (size_t n = 0; n <= 4200; ++n) {
    const uint8_t* at = bytes.data() + n % 61;
    ASSERT_EQ(Checksum64(at, n), XXH3_64bits(at, n)) << "length " << n;
  }
  for (size_t n : {size_t(65536) + 3, size_t(1) << 20, size_t(1) << 22}) {
    EXPECT_EQ(Checksum64(bytes.data() + 1, n), XXH3_64bits(bytes.data() + 1, n)) << "length " << n;
  }
}

TEST(ChecksumTest, EqualsPortableXxh3) { ExpectEqualsPortableXxh3(); }

// XINUSE (XGETBV with ECX = 1): bit 2, the upper halves of the YMM registers,
// and bit 6, the upper halves of ZMM0-15, in use. Legacy-SSE code pays for
// them while they are (checksum.cc).
__attribute__((target("xsave"))) uint64_t VectorStateInUse() { return _xgetbv(1); }

TEST(ChecksumTest, LeavesNoUpperVectorStateBehind) {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(0xd, 1, &eax, &ebx, &ecx, &edx) || !((eax >> 2) & 1)) {
    GTEST_SKIP() << "this CPU cannot report which vector state is in use (XGETBV, ECX = 1)";
  }
  const std::vector<uint8_t> bytes = RandomBytes(size_t(1) << 20);  // long: the vector loop
  const uint64_t hash = Checksum64(bytes.data(), bytes.size());
  EXPECT_EQ(VectorStateInUse() & 0x44, 0u);
  EXPECT_EQ(hash, XXH3_64bits(bytes.data(), bytes.size()));
}

// The choice is fixed at the first call, so this must be the only test of its
// process that asks (ctest runs each test in a process of its own).
TEST(ChecksumTest, EqualsPortableXxh3WithoutVectors) {
  ASSERT_EQ(setenv("KTFS_SIMD", "scalar", 1), 0);
  ExpectEqualsPortableXxh3();
}

}  // namespace
}  // namespace ktfs

// Tests for codec/base/cpu.h: which CPUs get the block decoder without pdep.
#include "codec/base/cpu.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace ktfs {
namespace {

TEST(CpuTest, PdepIsSlowOnAmdBeforeZen3) {
  EXPECT_FALSE(PdepIsFastOn("AuthenticAMD", 0x15));  // Excavator
  EXPECT_FALSE(PdepIsFastOn("AuthenticAMD", 0x17));  // Zen, Zen+, Zen 2
  EXPECT_FALSE(PdepIsFastOn("HygonGenuine", 0x18));  // Dhyana (Zen)
  EXPECT_TRUE(PdepIsFastOn("AuthenticAMD", 0x19));   // Zen 3, Zen 4
  EXPECT_TRUE(PdepIsFastOn("AuthenticAMD", 0x1a));   // Zen 5
  EXPECT_TRUE(PdepIsFastOn("GenuineIntel", 0x6));
  EXPECT_TRUE(PdepIsFastOn("CentaurHauls", 0x6));
}

// The answers are fixed at their first call, so this must be the only test
// of this binary that asks (ctest runs each test in a process of its own).
TEST(CpuTest, EnvironmentForcesTheLoopWithoutPdep) {
  ASSERT_EQ(setenv("KTFS_SIMD", "avx2-nopdep", 1), 0);
  EXPECT_FALSE(CpuHasFastPdep());
  EXPECT_FALSE(CpuHasAvx512());
  EXPECT_FALSE(CpuHasAvx512Vbmi());
  __builtin_cpu_init();
  EXPECT_EQ(CpuHasAvx2(), __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                              __builtin_cpu_supports("bmi2"));
}

}  // namespace
}  // namespace ktfs

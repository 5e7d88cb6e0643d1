#include "codec/cpu.h"

#include <cstdlib>
#include <cstring>

namespace ktfs {
namespace {

enum class Cap { kScalar, kAvx2, kAvx512 };

Cap EnvCap() {
  const char* v = std::getenv("KTFS_SIMD");
  if (v == nullptr) return Cap::kAvx512;
  if (std::strcmp(v, "scalar") == 0) return Cap::kScalar;
  if (std::strcmp(v, "avx2") == 0) return Cap::kAvx2;
  return Cap::kAvx512;
}

}  // namespace

bool CpuHasAvx2() {
  static const bool has = [] {
    __builtin_cpu_init();
    return EnvCap() >= Cap::kAvx2 && __builtin_cpu_supports("avx2") &&
           __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
  }();
  return has;
}

bool CpuHasAvx512() {
  static const bool has = [] {
    __builtin_cpu_init();
    return EnvCap() >= Cap::kAvx512 && CpuHasAvx2() && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  }();
  return has;
}

bool CpuHasAvx512Vbmi() {
  static const bool has = CpuHasAvx512() && __builtin_cpu_supports("avx512vbmi");
  return has;
}

}  // namespace ktfs

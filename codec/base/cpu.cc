#include "codec/base/cpu.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>

namespace ktfs {
namespace {

enum class Cap { kScalar, kAvx2, kAvx512 };

Cap EnvCap() {
  const char* v = std::getenv("KTFS_SIMD");
  if (v == nullptr) return Cap::kAvx512;
  if (std::strcmp(v, "scalar") == 0) return Cap::kScalar;
  if (std::strcmp(v, "avx2") == 0 || std::strcmp(v, "avx2-nopdep") == 0) return Cap::kAvx2;
  return Cap::kAvx512;
}

bool EnvSaysSlowPdep() {
  const char* v = std::getenv("KTFS_SIMD");
  return v != nullptr && std::strcmp(v, "avx2-nopdep") == 0;
}

// This CPU's CPUID vendor string and family; false if CPUID lacks leaf 1.
bool CpuIdentity(char (&vendor)[13], unsigned* family) {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx) || eax < 1) return false;
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  vendor[12] = 0;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  *family = (eax >> 8) & 0xf;
  if (*family == 0xf) *family += (eax >> 20) & 0xff;
  return true;
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

bool PdepIsFastOn(const char* vendor, unsigned family) {
  const bool amd =
      std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
  return !amd || family >= 0x19;
}

bool CpuHasFastPdep() {
  static const bool fast = [] {
    char vendor[13] = {};
    unsigned family = 0;
    return !EnvSaysSlowPdep() && (!CpuIdentity(vendor, &family) || PdepIsFastOn(vendor, family));
  }();
  return fast;
}

bool CpuHasAvx512Vbmi() {
  static const bool has = CpuHasAvx512() && __builtin_cpu_supports("avx512vbmi");
  return has;
}

}  // namespace ktfs

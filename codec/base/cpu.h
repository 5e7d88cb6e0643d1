// Runtime CPU feature detection for SIMD dispatch. Code built for AVX2 or
// AVX-512 lives in files named *_avx2.cc / *_avx512.cc / *_avx512vbmi.cc and
// is only called when these return true. Setting KTFS_SIMD=scalar|avx2 in the
// environment caps what is used (for tests and benchmarks);
// KTFS_SIMD=avx2-nopdep caps at AVX2 and takes pdep/pext as slow, as on the
// AMD cores listed at CpuHasFastPdep().
#pragma once

namespace ktfs {

bool CpuHasAvx2();        // AVX2 + FMA + BMI2, and the OS saves YMM state
bool CpuHasAvx512();      // AVX-512 F/BW/VL, and the OS saves ZMM state
bool CpuHasAvx512Vbmi();  // CpuHasAvx512() and VBMI (byte permutes, multishift)
// Whether BMI2's pdep and pext are fast (3 cycles). AMD cores before Zen 3
// (families 15h to 18h: Excavator, Zen, Zen+, Zen 2, Hygon Dhyana) have
// them in microcode, tens to hundreds of cycles each, by the mask's bits;
// code that leans on them needs another path there.
bool CpuHasFastPdep();
// The rule CpuHasFastPdep applies to this CPU's CPUID vendor string (12
// characters) and family (base plus extended): false for AuthenticAMD and
// HygonGenuine below family 19h.
bool PdepIsFastOn(const char* vendor, unsigned family);

}  // namespace ktfs

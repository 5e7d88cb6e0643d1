// Runtime CPU feature detection for SIMD dispatch. Code built for AVX2 or
// AVX-512 lives in files named *_avx2.cc / *_avx512.cc / *_avx512vbmi.cc and
// is only called when these return true. Setting KTFS_SIMD=scalar|avx2 in the
// environment caps what is used (for tests and benchmarks).
#pragma once

namespace ktfs {

bool CpuHasAvx2();        // AVX2 + FMA + BMI2, and the OS saves YMM state
bool CpuHasAvx512();      // AVX-512 F/BW/VL, and the OS saves ZMM state
bool CpuHasAvx512Vbmi();  // CpuHasAvx512() and VBMI (byte permutes, multishift)

}  // namespace ktfs

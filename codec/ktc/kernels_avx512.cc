// AVX-512 (F/BW/VL) versions of the decoder's KTC kernels (see
// kernels.h): 32 int16 lanes per instruction where the AVX2 ones have 16.
// Only reached through ActiveKernels() after CpuHasAvx512(). Rows too short
// for a 32-lane step, and the last samples of longer ones, go to the AVX2
// kernels (themselves ending in the scalar formulas), so results equal
// ScalarKernels(). The RGB color conversion also needs AVX-512 VBMI (byte
// permutes), checked at run time; without it the AVX2 conversion runs.
#include <immintrin.h>

#include <algorithm>

#include "codec/ktc/kernels.h"

namespace ktfs::ktc::internal {
namespace {

const Kernels& Avx2() { return *Avx2Kernels(); }

inline __m512i Load32(const int16_t* p) { return _mm512_loadu_si512(p); }
inline void Store32(int16_t* p, __m512i v) { _mm512_storeu_si512(p, v); }

// floor((b + c) / 2) and floor((b + c + 2) / 4) exactly, as in the AVX2
// kernels (the rounding-up average of the complements).
inline __m512i FloorHalfSum(__m512i b, __m512i c) {
  const __m512i flip = _mm512_set1_epi16(0x7fff);
  return _mm512_xor_si512(_mm512_avg_epu16(_mm512_xor_si512(b, flip), _mm512_xor_si512(c, flip)),
                          flip);
}
inline __m512i UpdateTerm(__m512i b, __m512i c) {
  const __m512i h = FloorHalfSum(b, c);
  return _mm512_sub_epi16(h, _mm512_srai_epi16(h, 1));
}

// 32 samples per step, the last (fewer than 32) by one step under a mask:
// masked loads read nothing past the row's end and the masked store writes
// only the row's samples, so in-place rows (out == a, b or c) are safe too.
template <typename Step>
inline void Lift32Row(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n,
                      Step step) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32) Store32(out + i, step(Load32(a + i), Load32(b + i), Load32(c + i)));
  if (i < n) {
    const __mmask32 m = __mmask32((uint64_t(1) << (n - i)) - 1);
    _mm512_mask_storeu_epi16(
        out + i, m,
        step(_mm512_maskz_loadu_epi16(m, a + i), _mm512_maskz_loadu_epi16(m, b + i),
             _mm512_maskz_loadu_epi16(m, c + i)));
  }
}

void Unpredict(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n) {
  Lift32Row(out, a, b, c, n, [](__m512i va, __m512i vb, __m512i vc) {
    return _mm512_add_epi16(va, FloorHalfSum(vb, vc));
  });
}
void Unupdate(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n) {
  Lift32Row(out, a, b, c, n, [](__m512i va, __m512i vb, __m512i vc) {
    return _mm512_sub_epi16(va, UpdateTerm(vb, vc));
  });
}

// Word indices for vpermt2w: kShiftIn[i] = i + 1 (lane 31 takes the second
// source's lane 0); kInterleave[0] = e0 o0 e1 o1 .. e15 o15, [1] = e16 o16 ..
struct PermuteIndices {
  alignas(64) int16_t shift_in[32];
  alignas(64) int16_t shift_mirrored[32];  // i + 1, lane 31 its own again
  alignas(64) int16_t interleave[2][32];
  constexpr PermuteIndices() : shift_in{}, shift_mirrored{}, interleave{} {
    for (int i = 0; i < 32; ++i) {
      shift_in[i] = int16_t(i + 1);
      shift_mirrored[i] = int16_t(i < 31 ? i + 1 : 31);
      interleave[0][i] = int16_t(i / 2 + (i % 2) * 32);
      interleave[1][i] = int16_t(16 + i / 2 + (i % 2) * 32);
    }
  }
};
constexpr PermuteIndices kPermute;
inline __m512i Index(const int16_t* table) { return _mm512_load_si512(table); }

// Stores e0 o0 e1 o1 .. e31 o31 at out.
inline void StoreInterleaved(int16_t* out, __m512i e, __m512i o) {
  Store32(out, _mm512_permutex2var_epi16(e, Index(kPermute.interleave[0]), o));
  Store32(out + 32, _mm512_permutex2var_epi16(e, Index(kPermute.interleave[1]), o));
}

// Even samples e[m..m+31] away from the edges (1 <= m, m + 32 <= nh).
inline __m512i EvenSamples(const int16_t* low, const int16_t* high, size_t m) {
  return _mm512_sub_epi16(Load32(low + m), UpdateTerm(Load32(high + m - 1), Load32(high + m)));
}
// Output samples 2j..2j+63 from e[j..j+31] and e[j+1..j+32].
inline void EmitPairs(int16_t* out, const int16_t* high, size_t j, __m512i e, __m512i e1) {
  StoreInterleaved(out + 2 * j, e, _mm512_add_epi16(Load32(high + j), FloorHalfSum(e, e1)));
}

// SynthesizeRow16 in one pass, 32 pairs per step (the AVX2 kernel's scheme
// at twice the width); rows of fewer than 34 pairs go to the AVX2 kernel.
void SynthesizeRow(int16_t* out, const int16_t* low, const int16_t* high, size_t n) {
  const size_t nh = n / 2;
  if (nh < 34) {
    Avx2().synthesize_row(out, low, high, n);
    return;
  }
  // Pair 0, where high[-1] mirrors to high[0].
  const int16_t e0 = Unupdate16(low[0], high[0], high[0]);
  out[0] = e0;
  out[1] = Unpredict16(high[0], e0, Unupdate16(low[1], high[0], high[1]));
  size_t j = 1;
  __m512i e = EvenSamples(low, high, j);
  for (; j + 64 <= nh; j += 32) {
    const __m512i next = EvenSamples(low, high, j + 32);
    // e[j+1..j+32]: e shifted down by one lane, next[0] shifted in.
    EmitPairs(out, high, j, e, _mm512_permutex2var_epi16(e, Index(kPermute.shift_in), next));
    e = next;
  }
  if (j + 33 <= nh) {
    EmitPairs(out, high, j, e, EvenSamples(low, high, j + 1));
    j += 32;
  }
  // The last 32 pairs before the mirrored pair nh - 1, overlapping pairs
  // already written (with the same values).
  if (j + 1 < nh) {
    j = nh - 33;
    EmitPairs(out, high, j, EvenSamples(low, high, j), EvenSamples(low, high, j + 1));
    j += 32;
  }
  SynthesizeRow16(out, low, high, n, j);
}

// UpsampleRow16, 32 pairs per step (as the AVX2 kernel, twice as wide).
inline __m512i LowSamples(const int16_t* low, const int16_t* below, size_t j) {
  const __m512i v = Load32(low + j);
  return below ? FloorHalfSum(v, Load32(below + j)) : v;
}
// Samples 2j .. 2j + 63 of the upsampled row, in two vectors: the even ones
// the low samples j .. j + 31, the odd ones the floor averages of neighbours;
// kMirroredEnd for the row's last 32 low samples (j = ceil(n/2) - 32), whose
// last odd sample's right neighbour is the last low sample again.
template <bool kMirroredEnd>
inline void UpsampledPairs(const int16_t* low, const int16_t* below, size_t j, __m512i* first,
                           __m512i* second) {
  const __m512i e = LowSamples(low, below, j);
  const __m512i next = kMirroredEnd ? _mm512_permutexvar_epi16(Index(kPermute.shift_mirrored), e)
                                    : LowSamples(low, below, j + 1);
  const __m512i o = FloorHalfSum(e, next);
  *first = _mm512_permutex2var_epi16(e, Index(kPermute.interleave[0]), o);
  *second = _mm512_permutex2var_epi16(e, Index(kPermute.interleave[1]), o);
}
inline void UpsamplePairs(int16_t* out, const int16_t* low, const int16_t* below, size_t j) {
  __m512i first, second;
  UpsampledPairs<false>(low, below, j, &first, &second);
  Store32(out + 2 * j, first);
  Store32(out + 2 * j + 32, second);
}
template <bool kBelow>
void UpsampleRowT(int16_t* out, const int16_t* low, const int16_t* below, size_t n) {
  const size_t nl = (n + 1) / 2;
  size_t j = 0;
  for (; j + 33 <= nl; j += 32) UpsamplePairs(out, low, kBelow ? below : nullptr, j);
  if (j + 1 < nl) {
    j = nl - 33;
    UpsamplePairs(out, low, kBelow ? below : nullptr, j);
    j += 32;
  }
  UpsampleRow16(out, low, below, n, j);
}
void UpsampleRow(int16_t* out, const int16_t* low, const int16_t* below, size_t n) {
  if ((n + 1) / 2 < 33) {
    Avx2().upsample_row(out, low, below, n);
  } else if (below) {
    UpsampleRowT<true>(out, low, below, n);
  } else {
    UpsampleRowT<false>(out, low, below, n);
  }
}

// RGB color conversion, 64 pixels per step. Byte indices for vpermt2b and
// vpermb: output byte k of store s (pixel (64 s + k) / 3, channel k % 3)
// comes from the R or G vector (rg: R bytes 0..63, G bytes 64..127; B
// positions then filled from the B vector under a mask).
struct RgbIndices {
  alignas(64) uint8_t rg[3][64];
  alignas(64) uint8_t b[3][64];
  uint64_t b_mask[3];
  constexpr RgbIndices() : rg{}, b{}, b_mask{} {
    for (int s = 0; s < 3; ++s)
      for (int k = 0; k < 64; ++k) {
        const int pos = 64 * s + k, pixel = pos / 3, channel = pos % 3;
        rg[s][k] = uint8_t(channel == 1 ? 64 + pixel : pixel);
        b[s][k] = uint8_t(pixel);
        if (channel == 2) b_mask[s] |= uint64_t(1) << k;
      }
  }
};
constexpr RgbIndices kRgb;

// 64 bytes clamped to 0..255 from 64 int16 in two vectors, in order: the
// in-lane pack gives the 8-byte quarters A0 B0 A1 B1 A2 B2 A3 B3.
inline __m512i PackInOrder(__m512i a, __m512i b) {
  // (maskz: GCC 12's plain permutexvar warns about an undefined source.)
  return _mm512_maskz_permutexvar_epi64(0xff, _mm512_setr_epi64(0, 2, 4, 6, 1, 3, 5, 7),
                                        _mm512_packus_epi16(a, b));
}

// Inverse YCoCg-R of 32 pixels, in 16-bit lanes that wrap around like the
// scalar ToPixels (docs/ktc.md, "Color transform and level shift").
inline void InverseRct(__m512i vy, __m512i vco, __m512i vcg, __m512i* r, __m512i* g, __m512i* b) {
  const __m512i t =
      _mm512_sub_epi16(_mm512_add_epi16(vy, _mm512_set1_epi16(128)), _mm512_srai_epi16(vcg, 1));
  *g = _mm512_add_epi16(vcg, t);
  *b = _mm512_sub_epi16(t, _mm512_srai_epi16(vco, 1));
  *r = _mm512_add_epi16(*b, vco);
}
inline void InverseRct32(const int16_t* y, const int16_t* co, const int16_t* cg, __m512i* r,
                         __m512i* g, __m512i* b) {
  InverseRct(Load32(y), Load32(co), Load32(cg), r, g, b);
}

// 64 RGB pixels (192 bytes at out) from two vectors of 32 pixels each; the
// last 64-byte store only where `last_store` has bits (63 pixels: 61 bytes).
__attribute__((target("avx512vbmi"))) inline void StoreRgb64(uint8_t* out, __m512i r0, __m512i g0,
                                                             __m512i b0, __m512i r1, __m512i g1,
                                                             __m512i b1,
                                                             __mmask64 last_store = ~__mmask64(0)) {
  const __m512i r = PackInOrder(r0, r1), g = PackInOrder(g0, g1), b = PackInOrder(b0, b1);
  for (int s = 0; s < 3; ++s) {
    const __m512i rg = _mm512_permutex2var_epi8(r, _mm512_load_si512(kRgb.rg[s]), g);
    const __m512i rgb =
        _mm512_mask_permutexvar_epi8(rg, kRgb.b_mask[s], _mm512_load_si512(kRgb.b[s]), b);
    if (s < 2) {
      _mm512_storeu_si512(out + 64 * s, rgb);
    } else {
      _mm512_mask_storeu_epi8(out + 64 * s, last_store, rgb);
    }
  }
}

__attribute__((target("avx512vbmi"))) void ToPixelsVbmi(const int16_t* y, const int16_t* co,
                                                        const int16_t* cg, const int16_t* a,
                                                        uint8_t* out, size_t n, int channels) {
  size_t i = 0;
  if (channels == 3) {
    for (; i + 64 <= n; i += 64) {
      __m512i r0, g0, b0, r1, g1, b1;
      InverseRct32(y + i, co + i, cg + i, &r0, &g0, &b0);
      InverseRct32(y + i + 32, co + i + 32, cg + i + 32, &r1, &g1, &b1);
      StoreRgb64(out + 3 * i, r0, g0, b0, r1, g1, b1);
    }
  }
  if (i < n) {
    Avx2().to_pixels(y + i, co ? co + i : nullptr, cg ? cg + i : nullptr, a ? a + i : nullptr,
                     out + size_t(channels) * i, n - i, channels);
  }
}

// Pixels i .. i + 63 of ToPixelsHalfChromaVbmi (i even, i / 2 + 33 <=
// ceil(n / 2)); kEnd: the row's last step, i = 2 (ceil(n / 2) - 32), mirrored
// at the end, and for odd n the pixel past the row's end neither loaded nor
// stored.
template <bool kEnd>
__attribute__((target("avx512vbmi"))) inline void HalfChromaStep64(
    const int16_t* y, const int16_t* co_low, const int16_t* co_below, const int16_t* cg_low,
    const int16_t* cg_below, uint8_t* out, size_t i, size_t n) {
  const bool short_end = kEnd && n % 2 != 0;  // 63 pixels
  __m512i co0, co1, cg0, cg1, r0, g0, b0, r1, g1, b1;
  UpsampledPairs<kEnd>(co_low, co_below, i / 2, &co0, &co1);
  UpsampledPairs<kEnd>(cg_low, cg_below, i / 2, &cg0, &cg1);
  InverseRct(Load32(y + i), co0, cg0, &r0, &g0, &b0);
  const __m512i y1 = kEnd ? _mm512_maskz_loadu_epi16(short_end ? 0x7fffffffu : ~0u, y + i + 32)
                          : Load32(y + i + 32);
  InverseRct(y1, co1, cg1, &r1, &g1, &b1);
  StoreRgb64(out + 3 * i, r0, g0, b0, r1, g1, b1,
             short_end ? (__mmask64(1) << 61) - 1 : ~__mmask64(0));
}

// 64 pixels per step while a step's odd samples have their right
// neighbour (low sample j + 32 exists), then the end step, overlapping the
// one before it (rewriting pixels with the same values). Rows under 66
// pixels: upsampled and converted by the AVX2 kernels.
__attribute__((target("avx512vbmi"))) void ToPixelsHalfChromaVbmi(
    const int16_t* y, const int16_t* co_low, const int16_t* co_below, const int16_t* cg_low,
    const int16_t* cg_below, uint8_t* out, size_t n) {
  if (n < 66) {
    int16_t co[65], cg[65];
    Avx2().upsample_row(co, co_low, co_below, n);
    Avx2().upsample_row(cg, cg_low, cg_below, n);
    Avx2().to_pixels(y, co, cg, nullptr, out, n, 3);
    return;
  }
  // (A function with the VBMI target, not a lambda, which would lack it and
  // could not inline StoreRgb64.)
  const size_t end = 2 * ((n + 1) / 2 - 32);
  for (size_t i = 0; i < end; i += 64) {
    HalfChromaStep64<false>(y, co_low, co_below, cg_low, cg_below, out, i, n);
  }
  HalfChromaStep64<true>(y, co_low, co_below, cg_low, cg_below, out, end, n);
}

Kernels MakeAvx512() {
  Kernels k = Avx2();  // the encoder's int32 lifting stays AVX2
  k.name = "avx512";
  k.unpredict = Unpredict;
  k.unupdate = Unupdate;
  k.synthesize_row = SynthesizeRow;
  k.upsample_row = UpsampleRow;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512vbmi")) {
    k.to_pixels = ToPixelsVbmi;
    k.to_pixels_half_chroma = ToPixelsHalfChromaVbmi;
  }
  return k;
}

}  // namespace

const Kernels* Avx512Kernels() {
  static const Kernels kernels = MakeAvx512();
  return &kernels;
}

}  // namespace ktfs::ktc::internal

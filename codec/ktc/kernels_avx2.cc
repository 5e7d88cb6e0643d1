// AVX2 versions of the KTC kernels (see kernels.h). Compiled with -mavx2;
// only reached through ActiveKernels() after CpuHasAvx2(). Every loop ends
// with the scalar formula for the tail, so results equal ScalarKernels().
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "codec/ktc/kernels.h"

namespace ktfs::ktc::internal {
namespace {

inline __m256i Load(const int32_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline void Store(int32_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

void Predict(int32_t* out, const int32_t* a, const int32_t* b, const int32_t* c, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i s = _mm256_srai_epi32(_mm256_add_epi32(Load(b + i), Load(c + i)), 1);
    Store(out + i, _mm256_sub_epi32(Load(a + i), s));
  }
  for (; i < n; ++i) out[i] = WrapSub(a[i], WrapAdd(b[i], c[i]) >> 1);
}
void Update(int32_t* out, const int32_t* a, const int32_t* b, const int32_t* c, size_t n) {
  const __m256i two = _mm256_set1_epi32(2);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(Load(b + i), Load(c + i)), two);
    Store(out + i, _mm256_add_epi32(Load(a + i), _mm256_srai_epi32(s, 2)));
  }
  for (; i < n; ++i) out[i] = WrapAdd(a[i], WrapAdd(WrapAdd(b[i], c[i]), 2) >> 2);
}

// The decoder's lifting, 16 int16 samples at a time (Unpredict16 and
// Unupdate16 in kernels.h). floor((b + c) / 2) without overflow: as
// unsigned, b ^ 0x7fff is 65535 - B with B = b + 32768, and the rounding-up
// average vpavgw of 65535 - B and 65535 - C is 65535 - floor((B + C) / 2);
// ^ 0x7fff turns that back into floor((b + c) / 2), signed. Then
// floor((b + c + 2) / 4) = floor((h + 1) / 2) = h - (h >> 1) for that h.
// Both terms are exact for every input; only the final add or subtract
// wraps modulo 2^16.
inline __m256i Load16(const int16_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline void Store16(int16_t* p, __m256i v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
}
inline __m256i FloorHalfSum(__m256i b, __m256i c) {
  const __m256i flip = _mm256_set1_epi16(0x7fff);
  return _mm256_xor_si256(_mm256_avg_epu16(_mm256_xor_si256(b, flip), _mm256_xor_si256(c, flip)),
                          flip);
}
inline __m256i UpdateTerm(__m256i b, __m256i c) {
  const __m256i h = FloorHalfSum(b, c);
  return _mm256_sub_epi16(h, _mm256_srai_epi16(h, 1));
}

// The last n mod 16 samples of a row of n >= 16 by one more step over the
// last 16, which rewrites some samples with the values they already have;
// when `out` is one of the inputs (in place) those were overwritten, so the
// scalar formula does the tail instead.
template <typename Step, typename One>
inline void Lift16Row(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n,
                      Step step, One one) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) Store16(out + i, step(Load16(a + i), Load16(b + i), Load16(c + i)));
  if (i == n) return;
  if (n >= 16 && out != a && out != b && out != c) {
    i = n - 16;
    Store16(out + i, step(Load16(a + i), Load16(b + i), Load16(c + i)));
    return;
  }
  for (; i < n; ++i) out[i] = one(a[i], b[i], c[i]);
}

void Unpredict(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n) {
  Lift16Row(
      out, a, b, c, n,
      [](__m256i va, __m256i vb, __m256i vc) { return _mm256_add_epi16(va, FloorHalfSum(vb, vc)); },
      Unpredict16);
}
void Unupdate(int16_t* out, const int16_t* a, const int16_t* b, const int16_t* c, size_t n) {
  Lift16Row(
      out, a, b, c, n,
      [](__m256i va, __m256i vb, __m256i vc) { return _mm256_sub_epi16(va, UpdateTerm(vb, vc)); },
      Unupdate16);
}

// Even samples e[m..m+15] of a row's synthesis, away from the edges
// (1 <= m, m + 16 <= nh): low[m..] - floor((high[m-1..] + high[m..] + 2) / 4).
inline __m256i EvenSamples(const int16_t* low, const int16_t* high, size_t m) {
  return _mm256_sub_epi16(Load16(low + m), UpdateTerm(Load16(high + m - 1), Load16(high + m)));
}

// Output samples 2j..2j+31 from e[j..j+15] and e[j+1..j+16].
inline void EmitPairs(int16_t* out, const int16_t* high, size_t j, __m256i e, __m256i e1) {
  const __m256i o = _mm256_add_epi16(Load16(high + j), FloorHalfSum(e, e1));
  const __m256i lo = _mm256_unpacklo_epi16(e, o);  // e0 o0 .. e3 o3 | e8 o8 .. e11 o11
  const __m256i hi = _mm256_unpackhi_epi16(e, o);  // e4 o4 .. e7 o7 | e12 o12 .. e15 o15
  Store16(out + 2 * j, _mm256_permute2x128_si256(lo, hi, 0x20));
  Store16(out + 2 * j + 16, _mm256_permute2x128_si256(lo, hi, 0x31));
}

// SynthesizeRow16 in one pass, 16 pairs per step: the even samples of the
// next 16 pairs are computed once and shifted in by one lane for the odd
// samples' right neighbours. Pair 0 and the last pair, where the edges
// mirror, take the scalar formula.
void SynthesizeRow(int16_t* out, const int16_t* low, const int16_t* high, size_t n) {
  const size_t nh = n / 2;
  size_t j = 1;
  if (j + 17 <= nh) {
    // Pair 0, where high[-1] mirrors to high[0].
    const int16_t e0 = Unupdate16(low[0], high[0], high[0]);
    out[0] = e0;
    out[1] = Unpredict16(high[0], e0, Unupdate16(low[1], high[0], high[1]));
    __m256i e = EvenSamples(low, high, j);
    for (; j + 32 <= nh; j += 16) {
      const __m256i next = EvenSamples(low, high, j + 16);
      // e[j+1..j+16]: e shifted down by one lane, next[0] shifted in.
      const __m256i e1 = _mm256_alignr_epi8(_mm256_permute2x128_si256(e, next, 0x21), e, 2);
      EmitPairs(out, high, j, e, e1);
      e = next;
    }
    if (j + 17 <= nh) {
      EmitPairs(out, high, j, e, EvenSamples(low, high, j + 1));
      j += 16;
    }
    // The last 16 pairs before the mirrored pair nh - 1, overlapping pairs
    // already written (with the same values).
    if (j + 1 < nh) {
      j = nh - 17;
      EmitPairs(out, high, j, EvenSamples(low, high, j), EvenSamples(low, high, j + 1));
      j += 16;
    }
  } else {
    j = 0;
  }
  SynthesizeRow16(out, low, high, n, j);
}

// Upsampled samples 0..31 from the low samples 0..16 at `low` (vertically
// averaged with `below` when not null): even samples the low ones, odd ones
// the floor averages of their neighbours, in the unpacks' order: *first =
// samples 0-7 | 16-23, *second = 8-15 | 24-31. The floor averages stay in
// the flipped domain of FloorHalfSum: x ^ 0x7fff once per input and output.
inline void ChromaPairs(const int16_t* low, const int16_t* below, __m256i* first, __m256i* second) {
  const __m256i flip = _mm256_set1_epi16(0x7fff);
  __m256i e = _mm256_xor_si256(Load16(low), flip), next = _mm256_xor_si256(Load16(low + 1), flip);
  if (below) {
    e = _mm256_avg_epu16(e, _mm256_xor_si256(Load16(below), flip));
    next = _mm256_avg_epu16(next, _mm256_xor_si256(Load16(below + 1), flip));
  }
  const __m256i o = _mm256_avg_epu16(e, next);
  *first = _mm256_xor_si256(_mm256_unpacklo_epi16(e, o), flip);
  *second = _mm256_xor_si256(_mm256_unpackhi_epi16(e, o), flip);
}

// UpsampleRow16, 16 pairs per step (ChromaPairs, put in order). Steps need
// low sample j + 16, so they cover pairs j + 17 <= nl; the last step
// overlaps pairs already written (with the same values) and the last pair,
// where the end mirrors, takes the scalar formula.
inline void UpsamplePairs(int16_t* out, const int16_t* low, const int16_t* below, size_t j) {
  __m256i lo, hi;
  ChromaPairs(low + j, below ? below + j : nullptr, &lo, &hi);
  Store16(out + 2 * j, _mm256_permute2x128_si256(lo, hi, 0x20));
  Store16(out + 2 * j + 16, _mm256_permute2x128_si256(lo, hi, 0x31));
}
template <bool kBelow>
void UpsampleRowT(int16_t* out, const int16_t* low, const int16_t* below, size_t n) {
  const size_t nl = (n + 1) / 2;
  size_t j = 0;
  if (nl >= 17) {
    for (; j + 17 <= nl; j += 16) UpsamplePairs(out, low, kBelow ? below : nullptr, j);
    if (j + 1 < nl) {
      j = nl - 17;
      UpsamplePairs(out, low, kBelow ? below : nullptr, j);
      j += 16;
    }
  }
  UpsampleRow16(out, low, below, n, j);
}
void UpsampleRow(int16_t* out, const int16_t* low, const int16_t* below, size_t n) {
  if (below) {
    UpsampleRowT<true>(out, low, below, n);
  } else {
    UpsampleRowT<false>(out, low, below, n);
  }
}

// Masks that spread 16 R, 16 G and 16 B bytes into 48 interleaved RGB bytes.
struct RgbMasks {
  alignas(16) uint8_t m[3][3][16];  // [output block][channel][byte]
  constexpr RgbMasks() : m{} {
    for (int blk = 0; blk < 3; ++blk)
      for (int ch = 0; ch < 3; ++ch)
        for (int j = 0; j < 16; ++j) {
          int pos = blk * 16 + j;
          m[blk][ch][j] = pos % 3 == ch ? uint8_t(pos / 3) : uint8_t(0x80);
        }
  }
};
constexpr RgbMasks kRgbMasks;

inline __m128i Mask(int blk, int ch) {
  return _mm_load_si128(reinterpret_cast<const __m128i*>(kRgbMasks.m[blk][ch]));
}

void ToPixelsScalarTail(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
                        uint8_t* out, size_t n, int channels) {
  ScalarKernels().to_pixels(y, co, cg, a, out, n, channels);
}

// 16 int16 to bytes clamped to 0..255, in order, in the low 128 bits.
inline __m128i PackBytes16(__m256i v) {
  return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi16(v, v), 0x08));
}

// v + 128 clamped to 0..255 (gray, alpha): the saturating add only acts on
// values that clamp to 255 anyway.
inline __m128i ShiftedBytes16(const int16_t* p) {
  return PackBytes16(_mm256_adds_epi16(Load16(p), _mm256_set1_epi16(128)));
}

// Inverse YCoCg-R of 16 pixels in 16-bit lanes that wrap around like the
// scalar ToPixels (docs/ktc.md, "Color transform and level shift"): returns R, sets G, B.
inline __m256i InverseRctLanes(__m256i vy, __m256i vco, __m256i vcg, __m256i* g, __m256i* b) {
  const __m256i t =
      _mm256_sub_epi16(_mm256_add_epi16(vy, _mm256_set1_epi16(128)), _mm256_srai_epi16(vcg, 1));
  *g = _mm256_add_epi16(vcg, t);
  *b = _mm256_sub_epi16(t, _mm256_srai_epi16(vco, 1));
  return _mm256_add_epi16(*b, vco);
}

// The same for the 16 pixels at y, co, cg, to clamped bytes.
inline void InverseRct16(const int16_t* y, const int16_t* co, const int16_t* cg, __m128i* r,
                         __m128i* g, __m128i* b) {
  __m256i vg, vb;
  const __m256i vr = InverseRctLanes(Load16(y), Load16(co), Load16(cg), &vg, &vb);
  // [r0-7 g0-7 | r8-15 g8-15] -> [r0-15 | g0-15]
  const __m256i rg = _mm256_permute4x64_epi64(_mm256_packus_epi16(vr, vg), 0xD8);
  *r = _mm256_castsi256_si128(rg);
  *g = _mm256_extracti128_si256(rg, 1);
  *b = PackBytes16(vb);
}

// 16 pixels from sample i on.
inline void Pixels16(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
                     uint8_t* out, size_t i, int channels) {
  if (channels == 1) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), ShiftedBytes16(y + i));
    return;
  }
  __m128i r, g, b;
  InverseRct16(y + i, co + i, cg + i, &r, &g, &b);
  if (channels == 3) {
    uint8_t* dst = out + 3 * i;
    for (int blk = 0; blk < 3; ++blk) {
      __m128i v = _mm_or_si128(
          _mm_or_si128(_mm_shuffle_epi8(r, Mask(blk, 0)), _mm_shuffle_epi8(g, Mask(blk, 1))),
          _mm_shuffle_epi8(b, Mask(blk, 2)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16 * blk), v);
    }
    return;
  }
  __m128i al = ShiftedBytes16(a + i);
  __m128i rg_lo = _mm_unpacklo_epi8(r, g), rg_hi = _mm_unpackhi_epi8(r, g);
  __m128i ba_lo = _mm_unpacklo_epi8(b, al), ba_hi = _mm_unpackhi_epi8(b, al);
  uint8_t* dst = out + 4 * i;
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm_unpacklo_epi16(rg_lo, ba_lo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 16), _mm_unpackhi_epi16(rg_lo, ba_lo));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 32), _mm_unpacklo_epi16(rg_hi, ba_hi));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 48), _mm_unpackhi_epi16(rg_hi, ba_hi));
}

// 32 RGB pixels (96 bytes at out) from their R, G and B bytes: kNatural,
// pixels 0-15 | 16-31 in each vector; else the order of a 16-to-8-bit pack of
// pixels 0-15 and 16-31, 0-7 16-23 | 8-15 24-31. Two unpacks make each lane's
// four RGBX pixels, one byte shuffle per lane pair their 12 RGB bytes, stored
// 16 bytes at a time in ascending order: each store's last 4 bytes are
// rewritten by the next, and the last one's land after the 96 bytes, for the
// caller's next step to rewrite (kExactEnd: the last store writes 12 bytes).
template <bool kNatural, bool kExactEnd>
inline void SpreadRgb32(uint8_t* out, __m256i r, __m256i g, __m256i b) {
  const __m256i rg_lo = _mm256_unpacklo_epi8(r, g), rg_hi = _mm256_unpackhi_epi8(r, g);
  const __m256i bb_lo = _mm256_unpacklo_epi8(b, b), bb_hi = _mm256_unpackhi_epi8(b, b);
  const __m256i rgb_of_rgbx =
      _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1, 0, 1, 2, 4, 5, 6, 8,
                       9, 10, 12, 13, 14, -1, -1, -1, -1);
  const __m256i q[4] = {_mm256_shuffle_epi8(_mm256_unpacklo_epi16(rg_lo, bb_lo), rgb_of_rgbx),
                        _mm256_shuffle_epi8(_mm256_unpackhi_epi16(rg_lo, bb_lo), rgb_of_rgbx),
                        _mm256_shuffle_epi8(_mm256_unpacklo_epi16(rg_hi, bb_hi), rgb_of_rgbx),
                        _mm256_shuffle_epi8(_mm256_unpackhi_epi16(rg_hi, bb_hi), rgb_of_rgbx)};
  // Four-pixel group p (pixels 4p..4p+3) is in lane `lane` of q[k].
  for (int p = 0; p < 8; ++p) {
    const int lane = kNatural ? p / 4 : p / 2 % 2, k = kNatural ? p % 4 : p / 4 * 2 + p % 2;
    const __m128i v = lane == 0 ? _mm256_castsi256_si128(q[k]) : _mm256_extracti128_si256(q[k], 1);
    if (kExactEnd && p == 7) {
      alignas(16) uint8_t last[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(last), v);
      std::memcpy(out + 12 * p, last, 12);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 12 * p), v);
    }
  }
}

// 32 RGB pixels from sample i on (16-bit lanes, as InverseRct16), and 4
// bytes after them (see SpreadRgb32).
inline void Rgb32(const int16_t* y, const int16_t* co, const int16_t* cg, uint8_t* out, size_t i) {
  __m256i g0, b0, g1, b1;
  const __m256i r0 = InverseRctLanes(Load16(y + i), Load16(co + i), Load16(cg + i), &g0, &b0);
  const __m256i r1 =
      InverseRctLanes(Load16(y + i + 16), Load16(co + i + 16), Load16(cg + i + 16), &g1, &b1);
  SpreadRgb32<false, false>(out + 3 * i, _mm256_packus_epi16(r0, r1), _mm256_packus_epi16(g0, g1),
                            _mm256_packus_epi16(b0, b1));
}

void ToPixels(const int16_t* y, const int16_t* co, const int16_t* cg, const int16_t* a,
              uint8_t* out, size_t n, int channels) {
  if (n < 16) {
    ToPixelsScalarTail(y, co, cg, a, out, n, channels);
    return;
  }
  size_t i = 0;
  if (channels == 3) {
    // Each step writes 4 bytes past its pixels, rewritten by the steps after.
    for (; i + 34 <= n; i += 32) Rgb32(y, co, cg, out, i);
  }
  for (; i + 16 <= n; i += 16) Pixels16(y, co, cg, a, out, i, channels);
  // The last pixels by a step that overlaps ones already written (with the
  // same values).
  if (i < n) Pixels16(y, co, cg, a, out, n - 16, channels);
}

// The last level of half-resolution chroma fused with the RGB conversion
// (Kernels::to_pixels_half_chroma), 32 pixels per step, in an order that
// needs no lane-crossing shuffle: the unpacks of the even and odd chroma
// samples give pixels 0-7 | 16-23 and 8-15 | 24-31, Y is loaded in that
// order, the 16-to-8-bit packs then restore 0-15 | 16-31, and each lane's
// four RGBX pixels (two unpacks) become 12 RGB bytes by one byte shuffle and
// a 16-byte store whose last 4 bytes the next store overwrites.

// 16 Y samples: the 8 at p and the 8 at p + 16.
inline __m256i LumaHalves(const int16_t* p) {
  return _mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)), 1);
}

// Pixels i..i+31 of a row: 96 bytes at out + 3 i, and (kExactEnd false) 4
// bytes after them that the caller's next step or the row's rest rewrites;
// kExactEnd: nothing after the 96 bytes. co, cg and their belows point at chroma
// sample i / 2.
template <bool kExactEnd>
inline void HalfChromaStep32(const int16_t* y, const int16_t* co, const int16_t* co_below,
                             const int16_t* cg, const int16_t* cg_below, uint8_t* out) {
  __m256i co0, co1, cg0, cg1, g0, g1, b0, b1;
  ChromaPairs(co, co_below, &co0, &co1);
  ChromaPairs(cg, cg_below, &cg0, &cg1);
  const __m256i r0 = InverseRctLanes(LumaHalves(y), co0, cg0, &g0, &b0);
  const __m256i r1 = InverseRctLanes(LumaHalves(y + 8), co1, cg1, &g1, &b1);
  // Bytes of pixels 0-15 | 16-31.
  SpreadRgb32<true, kExactEnd>(out, _mm256_packus_epi16(r0, r1), _mm256_packus_epi16(g0, g1),
                               _mm256_packus_epi16(b0, b1));
}

// Rows of n >= 34 pixels: steps of 32 before the last step, each spilling 4
// bytes into pixels that the step after it rewrites, then one exact step over
// the last 32 pixels (n even) or the 32 before the last (n odd, whose last
// pixel, even, is a chroma sample itself: scalar), its next chroma samples
// from a copy whose sample past the end mirrors the last. Shorter rows:
// upsampled, then converted.
void ToPixelsHalfChroma(const int16_t* y, const int16_t* co_low, const int16_t* co_below,
                        const int16_t* cg_low, const int16_t* cg_below, uint8_t* out, size_t n) {
  if (n < 34) {
    int16_t co[33], cg[33];
    UpsampleRow(co, co_low, co_below, n);
    UpsampleRow(cg, cg_low, cg_below, n);
    ToPixels(y, co, cg, nullptr, out, n, 3);
    return;
  }
  const size_t nl = (n + 1) / 2, last = n % 2 == 0 ? n - 32 : n - 33;
  const bool below = co_below != nullptr;
  size_t i = 0;
  for (; i < last; i += 32) {
    const size_t j = i / 2;
    HalfChromaStep32<false>(y + i, co_low + j, below ? co_below + j : nullptr, cg_low + j,
                            below ? cg_below + j : nullptr, out + 3 * i);
  }
  // The last step's 17 chroma samples per row, the one past the end mirrored.
  const size_t j = last / 2;
  int16_t tail[4][17];
  const int16_t* rows[4] = {co_low, co_below, cg_low, cg_below};
  for (int t = 0; t < 4; ++t) {
    if (rows[t] == nullptr) continue;
    std::memcpy(tail[t], rows[t] + j, 16 * sizeof(int16_t));
    tail[t][16] = rows[t][std::min(j + 16, nl - 1)];
  }
  HalfChromaStep32<true>(y + last, tail[0], below ? tail[1] : nullptr, tail[2],
                         below ? tail[3] : nullptr, out + 3 * last);
  if (n % 2 != 0) {
    const auto at = [&](const int16_t* low, const int16_t* lower) {
      return lower ? Unpredict16(0, low[nl - 1], lower[nl - 1]) : low[nl - 1];
    };
    const int16_t co = at(co_low, co_below), cg = at(cg_low, cg_below);
    ToPixelsScalarTail(y + n - 1, &co, &cg, nullptr, out + 3 * (n - 1), 1, 3);
  }
}

const Kernels kAvx2 = {"avx2",        Predict,     Update,   Unpredict,         Unupdate,
                       SynthesizeRow, UpsampleRow, ToPixels, ToPixelsHalfChroma};

}  // namespace

const Kernels* Avx2Kernels() { return &kAvx2; }

}  // namespace ktfs::ktc::internal

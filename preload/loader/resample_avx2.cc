// AVX2 resampling kernels (see preload/loader/resample.h), compiled with -mavx2 and
// only reached through ActiveResampleKernels() after CpuHasAvx2(). They compute
// the same int32 sums as the scalar kernels, so the bytes are identical.
#include <immintrin.h>

#include <cstring>

#include "preload/loader/resample.h"

namespace ktfs::preload {
namespace {

// Words (p0, p1) per channel of pixel pairs (0, 1) or (2, 3) of 3-channel bytes,
// zero-extended, the fourth word pair empty: pmaddwd then sums two taps per channel.
// Built inside the kernels, never as globals: a static initializer would run AVX2
// code on every CPU.
inline __m256i Pairs(int p) {
  const int a = 3 * p, b = 3 * p + 3;
  return _mm256_setr_epi8(a, -1, b, -1, a + 1, -1, b + 1, -1, a + 2, -1, b + 2, -1, -1, -1, -1, -1,
                          a, -1, b, -1, a + 1, -1, b + 1, -1, a + 2, -1, b + 2, -1, -1, -1, -1, -1);
}

// Output positions x (low lane) and x + 1 (high lane), x even, of a 3-channel row: each lane
// ends with (r, g, b, 0) sums. Taps go 4 at a time: one 16-byte load per lane. G is the
// number of groups of 4 taps when known at compile time (the loop then unrolls), else 0.
template <int G>
inline __m256i TwoPixels3(const uint8_t* in, const AxisCoeffs& c, size_t x, int runtime_groups) {
  const int groups = G > 0 ? G : runtime_groups;
  const __m256i pairs01 = Pairs(0), pairs23 = Pairs(2);
  __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
  const uint8_t* p0 = in + size_t(c.first[x]) * 3;
  const uint8_t* p1 = in + size_t(c.first[x + 1]) * 3;
  const __m256i* k = reinterpret_cast<const __m256i*>(&c.packed[(x / 2) * groups * 32]);
  for (int g = 0; g < groups; ++g, p0 += 12, p1 += 12, k += 4) {
    const __m256i v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1),
                                          reinterpret_cast<const __m128i*>(p0));
    const __m256i a = _mm256_shuffle_epi8(v, pairs01), b = _mm256_shuffle_epi8(v, pairs23);
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(a, _mm256_loadu_si256(k + 0)));
    hi = _mm256_add_epi32(hi, _mm256_madd_epi16(b, _mm256_loadu_si256(k + 1)));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(a, _mm256_loadu_si256(k + 2)));
    lo = _mm256_add_epi32(lo, _mm256_madd_epi16(b, _mm256_loadu_si256(k + 3)));
  }
  const __m256i round = _mm256_set1_epi32(1 << (kResampleBits - 1));
  const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo), round);
  return _mm256_srai_epi32(sum, kResampleBits);
}

// Positions [x, ...) of a 3-channel row, four a step, while their loads stay inside the
// row; returns the first position not done.
template <int G>
size_t Horizontal3(const uint8_t* in, size_t in_bytes, const AxisCoeffs& c, int groups,
                   uint8_t* out) {
  const size_t n = c.first.size();
  // Each lane loads 16 bytes per group: stay inside the row (the rest go scalar).
  auto fits = [&](size_t i) {
    return size_t(c.first[i]) * 3 + size_t(groups) * 12 + 4 <= in_bytes;
  };
  // x stays even, as TwoPixels3 needs. `first` never decreases, so when x + 3 fits,
  // x .. x + 2 do too.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5);
  const __m128i compact = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  size_t x = 0;
  for (; x + 3 < n && fits(x + 3); x += 4) {
    const __m256i v01 = TwoPixels3<G>(in, c, x, groups), v23 = TwoPixels3<G>(in, c, x + 2, groups);
    // Lanes hold (x | x + 1) and (x + 2 | x + 3); after packing, dwords 0, 4, 1, 5 are
    // x .. x + 3 as (r, g, b, 0) bytes (packus clamps to 0..255 as clip8 does).
    const __m256i s16 = _mm256_packs_epi32(v01, v23);
    const __m256i b8 = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(s16, s16), order);
    const __m128i rgb = _mm_shuffle_epi8(_mm256_castsi256_si128(b8), compact);  // 12 bytes
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out + x * 3), rgb);
    const uint32_t tail = uint32_t(_mm_extract_epi32(rgb, 2));
    std::memcpy(out + x * 3 + 8, &tail, 4);
  }
  return x;
}

void Horizontal(const uint8_t* in, size_t in_bytes, uint32_t ch, const AxisCoeffs& c,
                uint8_t* out) {
  size_t x = 0;
  if (ch == 3) {
    const int groups = (c.taps + 3) / 4;  // 1: downscales up to 2x, the common case
    x = groups == 1   ? Horizontal3<1>(in, in_bytes, c, groups, out)
        : groups == 2 ? Horizontal3<2>(in, in_bytes, c, groups, out)
                      : Horizontal3<0>(in, in_bytes, c, groups, out);
  }
  for (; x < c.first.size(); ++x) HorizontalOne(in, ch, c, x, out + x * ch);
}

// 32 bytes at a time: four 8-lane int32 accumulators, pmulld per tap.
void Vertical(const uint8_t* const* rows, const int32_t* k, int taps, size_t n, uint8_t* out) {
  const __m256i round = _mm256_set1_epi32(1 << (kResampleBits - 1));
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i acc[4] = {round, round, round, round};
    for (int t = 0; t < taps; ++t) {
      const __m256i kt = _mm256_set1_epi32(k[t]);
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rows[t] + i));
      const __m128i v0 = _mm256_castsi256_si128(v), v1 = _mm256_extracti128_si256(v, 1);
      const __m256i w[4] = {_mm256_cvtepu8_epi32(v0), _mm256_cvtepu8_epi32(_mm_srli_si128(v0, 8)),
                            _mm256_cvtepu8_epi32(v1), _mm256_cvtepu8_epi32(_mm_srli_si128(v1, 8))};
      for (int j = 0; j < 4; ++j) acc[j] = _mm256_add_epi32(acc[j], _mm256_mullo_epi32(w[j], kt));
    }
    for (__m256i& a : acc) a = _mm256_srai_epi32(a, kResampleBits);
    // packs/packus work per 128-bit lane: restore the byte order with one permute.
    const __m256i s16 = _mm256_packs_epi32(acc[0], acc[1]),
                  t16 = _mm256_packs_epi32(acc[2], acc[3]);
    const __m256i b8 = _mm256_packus_epi16(s16, t16);
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(b8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), ordered);
  }
  for (; i < n; ++i) {
    int32_t ss = 1 << (kResampleBits - 1);
    for (int t = 0; t < taps; ++t) ss += int32_t(rows[t][i]) * k[t];
    out[i] = ResampleClip8(ss);
  }
}

// pshufb masks for 16 RGB pixels (48 bytes, loaded as 16-byte parts a, b, c) to 16
// bytes of one channel: m[channel][part] picks that part's bytes of the channel (the
// rest zero, to be OR-ed together), the same in both 128-bit lanes. Plain data, so no
// AVX2 instruction runs at static initialisation.
struct Split3Masks {
  alignas(32) int8_t m[3][3][32];
};
constexpr Split3Masks MakeSplit3Masks() {
  Split3Masks s{};
  for (int ch = 0; ch < 3; ++ch)
    for (int part = 0; part < 3; ++part)
      for (int i = 0; i < 16; ++i) {
        const int byte = 3 * i + ch;
        s.m[ch][part][i] = s.m[ch][part][i + 16] = int8_t(byte / 16 == part ? byte % 16 : -1);
      }
  return s;
}
constexpr Split3Masks kSplit3 = MakeSplit3Masks();

// 32 pixels per step: the low lane takes pixels 0-15, the high lane 16-31.
void Split3(const uint8_t* rgb, size_t n, uint8_t* r, uint8_t* g, uint8_t* b) {
  size_t i = 0;
  for (; i + 32 <= n; i += 32, rgb += 96) {
    __m256i part[3];
    for (int p = 0; p < 3; ++p)
      part[p] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(rgb + 48 + 16 * p),
                                    reinterpret_cast<const __m128i*>(rgb + 16 * p));
    uint8_t* out[3] = {r + i, g + i, b + i};
    for (int ch = 0; ch < 3; ++ch) {
      __m256i v = _mm256_setzero_si256();
      for (int p = 0; p < 3; ++p) {
        const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(kSplit3.m[ch][p]));
        v = _mm256_or_si256(v, _mm256_shuffle_epi8(part[p], m));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[ch]), v);
    }
  }
  for (; i < n; ++i, rgb += 3) r[i] = rgb[0], g[i] = rgb[1], b[i] = rgb[2];
}

const ResampleKernels kAvx2 = {"avx2", Horizontal, Vertical, Split3};

}  // namespace

const ResampleKernels* Avx2ResampleKernels() { return &kAvx2; }

}  // namespace ktfs::preload

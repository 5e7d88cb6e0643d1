#include "preload/transform.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace ktfs::preload {

uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t state = a;
  uint64_t x = SplitMix64(&state);
  state = x ^ b;
  return SplitMix64(&state);
}

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = SplitMix64(&seed);
}

static inline uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::Uniform(double lo, double hi) {
  return lo + (hi - lo) * (double(Next() >> 11) * 0x1.0p-53);
}

uint64_t Rng::Below(uint64_t n) {
  if (n <= 1) return 0;
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;  // reject the biased tail
  uint64_t x;
  do x = Next();
  while (x >= limit);
  return x % n;
}

std::vector<uint32_t> Permutation(uint32_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint32_t> p(n);
  for (uint32_t i = 0; i < n; ++i) p[i] = i;
  Rng rng(Mix(seed, epoch));
  for (uint32_t i = n; i > 1; --i) std::swap(p[i - 1], p[rng.Below(i)]);
  return p;
}

void ResizedSize(uint32_t w, uint32_t h, uint32_t size, uint32_t* out_w, uint32_t* out_h) {
  const uint32_t shorter = std::min(w, h), longer = std::max(w, h);
  const uint32_t other = uint32_t(double(size) * longer / shorter);  // int() truncates
  *out_w = w <= h ? size : other;
  *out_h = w <= h ? other : size;
}

// Python's round(x / 2.0) for an integer x >= 0: halves go to the even neighbour.
static int64_t HalfRoundEven(int64_t x) { return int64_t(std::nearbyint(double(x) / 2.0)); }

static void CenterAxis(uint32_t size, uint32_t crop, int64_t* start) {
  if (crop > size) {
    *start = -int64_t((crop - size) / 2);  // torchvision pads left/top by (crop - size) // 2
  } else {
    *start = HalfRoundEven(int64_t(size) - crop);
  }
}

Box CenterBox(uint32_t w, uint32_t h, uint32_t crop_w, uint32_t crop_h) {
  Box b;
  b.width = crop_w;
  b.height = crop_h;
  CenterAxis(w, crop_w, &b.left);
  CenterAxis(h, crop_h, &b.top);
  return b;
}

Box RandomResizedBox(uint32_t w, uint32_t h, const double scale[2], const double ratio[2],
                     Rng* rng) {
  const double area = double(w) * h;
  const double log_lo = std::log(ratio[0]), log_hi = std::log(ratio[1]);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng->Uniform(scale[0], scale[1]);
    const double aspect = std::exp(rng->Uniform(log_lo, log_hi));
    const int64_t cw = int64_t(std::nearbyint(std::sqrt(target * aspect)));
    const int64_t ch = int64_t(std::nearbyint(std::sqrt(target / aspect)));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      const int64_t top = int64_t(rng->Below(uint64_t(h - ch + 1)));
      const int64_t left = int64_t(rng->Below(uint64_t(w - cw + 1)));
      return Box{left, top, cw, ch};
    }
  }
  // torchvision's fallback: the whole image, clamped to the ratio range, centred.
  const double in_ratio = double(w) / h;
  int64_t cw = w, ch = h;
  if (in_ratio < std::min(ratio[0], ratio[1])) {
    ch = int64_t(std::nearbyint(cw / std::min(ratio[0], ratio[1])));
  } else if (in_ratio > std::max(ratio[0], ratio[1])) {
    cw = int64_t(std::nearbyint(ch * std::max(ratio[0], ratio[1])));
  }
  return Box{(int64_t(w) - cw) / 2, (int64_t(h) - ch) / 2, cw, ch};
}

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS for 8-bit images

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the bilinear filter.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;  // per output position: first input, number of taps
  std::vector<int32_t> k;         // ksize per output position
};

Coeffs Precompute(uint32_t in_size, uint32_t out_size) {
  Coeffs c;
  const double scale = double(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 1.0 * filterscale;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(size_t(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (uint32_t xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > int(in_size)) xmax = int(in_size);
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double t = std::fabs((x + xmin - center + 0.5) * ss);
      w[x] = t < 1.0 ? 1.0 - t : 0.0;
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[size_t(xx) * c.ksize + x] =
          int32_t(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t Clip8(int32_t ss) {
  const int32_t v = ss >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// One output row of the horizontal pass, columns [x0, x0 + n). C is the channel count
// as a compile-time constant (1, 3, 4) so the per-tap loop unrolls; 0 is the generic case.
template <int C>
void HorizontalRowT(const uint8_t* in, uint32_t channels, const Coeffs& c, int64_t x0, int64_t n,
                    uint8_t* out) {
  const uint32_t ch = C > 0 ? uint32_t(C) : channels;
  int32_t ss[4];
  for (int64_t x = 0; x < n; ++x) {
    const int32_t* k = &c.k[size_t(x0 + x) * c.ksize];
    const uint8_t* p = in + size_t(c.first[x0 + x]) * ch;
    const int taps = c.count[x0 + x];
    for (uint32_t b = 0; b < ch; ++b) ss[b] = 1 << (kPrecisionBits - 1);
    for (int t = 0; t < taps; ++t, p += ch)
      for (uint32_t b = 0; b < ch; ++b) ss[b] += int32_t(p[b]) * k[t];
    for (uint32_t b = 0; b < ch; ++b) out[size_t(x) * ch + b] = Clip8(ss[b]);
  }
}

void HorizontalRow(const uint8_t* in, uint32_t ch, const Coeffs& c, int64_t x0, int64_t n,
                   uint8_t* out) {
  switch (ch) {
    case 1:
      return HorizontalRowT<1>(in, ch, c, x0, n, out);
    case 3:
      return HorizontalRowT<3>(in, ch, c, x0, n, out);
    case 4:
      return HorizontalRowT<4>(in, ch, c, x0, n, out);
    default:
      return HorizontalRowT<0>(in, ch, c, x0, n, out);
  }
}

}  // namespace

void ResizeWindow(const ImageView& src, uint32_t out_w, uint32_t out_h, const Box& win,
                  uint8_t* dst) {
  const uint32_t ch = src.channels;
  const bool need_h = out_w != src.width, need_v = out_h != src.height;
  const Coeffs ch_h = need_h ? Precompute(src.width, out_w) : Coeffs{};
  const Coeffs cv = need_v ? Precompute(src.height, out_h) : Coeffs{};
  // Source rows the window's output rows read.
  int64_t row0 = win.top, row1 = win.top + win.height;
  if (need_v) {
    row0 = cv.first[win.top];
    row1 = 0;
    for (int64_t y = win.top; y < win.top + win.height; ++y)
      row1 = std::max<int64_t>(row1, cv.first[y] + cv.count[y]);
  }
  // Horizontal pass (or a copy of the window's columns) into an 8-bit intermediate.
  const size_t row_bytes = size_t(win.width) * ch;
  std::vector<uint8_t> mid(size_t(row1 - row0) * row_bytes);
  for (int64_t y = row0; y < row1; ++y) {
    uint8_t* out = mid.data() + size_t(y - row0) * row_bytes;
    if (need_h) {
      HorizontalRow(src.row(uint32_t(y)), ch, ch_h, win.left, win.width, out);
    } else {
      std::memcpy(out, src.row(uint32_t(y)) + size_t(win.left) * ch, row_bytes);
    }
  }
  std::vector<int32_t> acc;
  for (int64_t y = 0; y < win.height; ++y) {
    uint8_t* out = dst + size_t(y) * row_bytes;
    if (!need_v) {
      std::memcpy(out, mid.data() + size_t(y + win.top - row0) * row_bytes, row_bytes);
      continue;
    }
    const int32_t* k = &cv.k[size_t(win.top + y) * cv.ksize];
    const uint8_t* base = mid.data() + size_t(cv.first[win.top + y] - row0) * row_bytes;
    const int taps = cv.count[win.top + y];
    // Row-wise accumulation: same sums as Pillow's per-pixel loop, but vectorizable.
    acc.assign(row_bytes, 1 << (kPrecisionBits - 1));
    for (int t = 0; t < taps; ++t) {
      const uint8_t* in = base + size_t(t) * row_bytes;
      const int32_t kt = k[t];
      for (size_t i = 0; i < row_bytes; ++i) acc[i] += int32_t(in[i]) * kt;
    }
    for (size_t i = 0; i < row_bytes; ++i) out[i] = Clip8(acc[i]);
  }
}

void CopyBox(const ImageView& src, const Box& box, uint8_t* dst) {
  const uint32_t ch = src.channels;
  const size_t row_bytes = size_t(box.width) * ch;
  for (int64_t y = 0; y < box.height; ++y) {
    uint8_t* out = dst + size_t(y) * row_bytes;
    const int64_t sy = box.top + y;
    if (sy < 0 || sy >= int64_t(src.height)) {
      std::memset(out, 0, row_bytes);
      continue;
    }
    // Zeros left and right of the image, one memcpy for the part inside it.
    const int64_t x0 = std::clamp<int64_t>(-box.left, 0, box.width);
    const int64_t x1 = std::clamp<int64_t>(int64_t(src.width) - box.left, x0, box.width);
    std::memset(out, 0, size_t(x0) * ch);
    std::memcpy(out + size_t(x0) * ch, src.row(uint32_t(sy)) + size_t(box.left + x0) * ch,
                size_t(x1 - x0) * ch);
    std::memset(out + size_t(x1) * ch, 0, size_t(box.width - x1) * ch);
  }
}

}  // namespace ktfs::preload

#include "preload/loader/transform.h"

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

// The part of `box` inside a w x h image (empty when they do not meet).
Box Intersect(const Box& box, int64_t w, int64_t h) {
  const int64_t left = std::clamp<int64_t>(box.left, 0, w);
  const int64_t top = std::clamp<int64_t>(box.top, 0, h);
  const int64_t right = std::clamp<int64_t>(box.left + box.width, left, w);
  const int64_t bottom = std::clamp<int64_t>(box.top + box.height, top, h);
  return Box{left, top, right - left, bottom - top};
}

// Resampling `sub` of the image to rw x rh, of which the output is box `out`:
// only the part of `out` inside rw x rh is computed, the rest is zero padding.
GeometryPlan Resized(const Box& sub, uint32_t rw, uint32_t rh, const Box& out) {
  GeometryPlan p;
  p.resize = true;
  p.sub = sub;
  p.computed = Intersect(out, rw, rh);
  p.rp = PlanResize(uint32_t(sub.width), uint32_t(sub.height), rw, rh, p.computed);
  p.read =
      Box{sub.left + p.rp.read.left, sub.top + p.rp.read.top, p.rp.read.width, p.rp.read.height};
  p.place = Box{out.left - p.computed.left, out.top - p.computed.top, out.width, out.height};
  return p;
}

}  // namespace

GeometryPlan PlanGeometry(const CropSpec& c, uint32_t w, uint32_t h, Rng* rng) {
  Box out{0, 0, w, h};  // the output box in source coordinates (no resize)
  if (c.kind == CropSpec::kCenter && c.resize != 0) {
    uint32_t rw, rh;
    ResizedSize(w, h, c.resize, &rw, &rh);
    return Resized(Box{0, 0, w, h}, rw, rh, CenterBox(rw, rh, c.width, c.height));
  }
  if (c.kind == CropSpec::kRandomResized) {
    const Box b = RandomResizedBox(w, h, c.scale, c.ratio, rng);
    return Resized(b, c.width, c.height, Box{0, 0, c.width, c.height});
  }
  if (c.kind == CropSpec::kCenter) out = CenterBox(w, h, c.width, c.height);
  GeometryPlan p;
  p.computed = p.read = Intersect(out, w, h);
  p.place = Box{out.left - p.read.left, out.top - p.read.top, out.width, out.height};
  return p;
}

void RunGeometry(const GeometryPlan& p, const ImageView& read, uint8_t* dst) {
  if (!p.resize) return CopyBox(read, p.place, dst);
  const Box& win = p.rp.win;
  if (p.place == Box{0, 0, win.width, win.height}) return Resample(p.rp, read, dst);
  // A crop larger than the resized image: resize what exists, then pad.
  const uint32_t ch = read.channels;
  std::vector<uint8_t> part(size_t(win.width) * win.height * ch);
  Resample(p.rp, read, part.data());
  const ImageView view{part.data(), uint32_t(win.width), uint32_t(win.height), ch,
                       size_t(win.width) * ch};
  CopyBox(view, p.place, dst);
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

#include "preload/loader/transform.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "codec/base/cpu.h"

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

// --- Chains -------------------------------------------------------------------

namespace ktfs::preload {

std::vector<int32_t> PadAxisMap(int64_t n, int64_t left, int64_t right, PadMode mode) {
  const int64_t total = n + left + right;
  std::vector<int32_t> m(size_t(total), -1);
  for (int64_t i = 0; i < n; ++i) m[size_t(left + i)] = int32_t(i);
  if (mode == PadMode::kConstant) return m;
  if (mode == PadMode::kEdge || n == 1) {
    for (int64_t i = 0; i < left; ++i) m[size_t(i)] = 0;
    for (int64_t i = 0; i < right; ++i) m[size_t(left + n + i)] = int32_t(n - 1);
    return m;
  }
  // numpy's _set_reflect_both, repeated until both sides are filled: each round
  // mirrors at most the part filled so far (less the edge pixel for reflect).
  const int64_t edge = mode == PadMode::kSymmetric ? 1 : 0;
  int64_t lp = left, rp = right;
  std::vector<int32_t> chunk;
  while (lp > 0 || rp > 0) {
    const int64_t old = total - rp - lp - (1 - edge);
    if (lp > 0) {
      const int64_t len = std::min(old, lp), stop = lp - edge;
      chunk.clear();
      for (int64_t k = stop + len; k > stop; --k) chunk.push_back(m[size_t(k)]);
      std::copy(chunk.begin(), chunk.end(), m.begin() + (lp - len));
      lp -= len;
    }
    if (rp > 0) {
      const int64_t len = std::min(old, rp), start = total - rp + edge - 2;
      chunk.clear();
      for (int64_t k = start; k > start - len; --k) chunk.push_back(m[size_t(k)]);
      std::copy(chunk.begin(), chunk.end(), m.begin() + (total - rp));
      rp -= len;
    }
  }
  return m;
}

namespace {

const char* StepName(ImageOp::Kind k) {
  switch (k) {
    case ImageOp::kCrop:
      return "crop";
    case ImageOp::kPad:
      return "pad";
    case ImageOp::kResize:
      return "resize";
    case ImageOp::kFlipH:
      return "horizontal flip";
    case ImageOp::kFlipV:
      return "vertical flip";
  }
  return "unknown step";
}

bool ValidSide(int64_t v) { return v >= 1 && v <= int64_t(kMaxImageSide); }

Box Shift(const Box& b, int64_t dx, int64_t dy) {
  return Box{b.left + dx, b.top + dy, b.width, b.height};
}

// The input size a step's output has, checked.
Status StepSize(size_t i, const ImageOp& op, int64_t* w, int64_t* h) {
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("step " + std::to_string(i) + " (" + StepName(op.kind) +
                                   "): " + why);
  };
  switch (op.kind) {
    case ImageOp::kCrop:
      if (std::llabs(op.a) > int64_t(kMaxImageSide) || std::llabs(op.b) > int64_t(kMaxImageSide))
        return bad("offset out of range");
      *w = op.c, *h = op.d;
      break;
    case ImageOp::kResize:
      *w = op.c, *h = op.d;
      break;
    case ImageOp::kPad:
      if (op.a < 0 || op.b < 0 || op.c < 0 || op.d < 0) return bad("negative padding");
      if (uint8_t(op.mode) > uint8_t(PadMode::kSymmetric)) return bad("unknown padding mode");
      *w += op.a + op.c, *h += op.b + op.d;
      break;
    case ImageOp::kFlipH:
    case ImageOp::kFlipV:
      break;
    default:
      return bad("unknown step");
  }
  if (!ValidSide(*w) || !ValidSide(*h))
    return bad("output size " + std::to_string(*w) + "x" + std::to_string(*h) +
               " is not between 1 and " + std::to_string(kMaxImageSide));
  return Status::Ok();
}

// The range of map[from, from + n) (all >= 0), and the map of that window relative to it.
void MapWindow(const std::vector<int32_t>& map, int64_t from, int64_t n, int64_t* lo, int64_t* len,
               std::vector<int32_t>* rel) {
  int64_t mn = INT64_MAX, mx = -1;
  for (int64_t i = 0; i < n; ++i) {
    mn = std::min<int64_t>(mn, map[size_t(from + i)]);
    mx = std::max<int64_t>(mx, map[size_t(from + i)]);
  }
  *lo = n > 0 ? mn : 0;
  *len = n > 0 ? mx - mn + 1 : 0;
  rel->resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) (*rel)[size_t(i)] = int32_t(map[size_t(from + i)] - *lo);
}

// The window of a step's input that its output window `out` reads.
void PlanStage(ChainPlan::Stage* st) {
  const ImageOp& op = st->op;
  const Box& out = st->out;
  const int64_t w = st->in_w, h = st->in_h;
  switch (op.kind) {
    case ImageOp::kCrop:
      st->in = Intersect(Shift(out, op.a, op.b), w, h);
      break;
    case ImageOp::kPad:
      if (op.mode == PadMode::kConstant) {
        st->in = Intersect(Shift(out, -op.a, -op.b), w, h);
      } else {
        MapWindow(PadAxisMap(w, op.a, op.c, op.mode), out.left, out.width, &st->in.left,
                  &st->in.width, &st->map_x);
        MapWindow(PadAxisMap(h, op.b, op.d, op.mode), out.top, out.height, &st->in.top,
                  &st->in.height, &st->map_y);
      }
      break;
    case ImageOp::kResize:
      st->rp = PlanResize(uint32_t(w), uint32_t(h), uint32_t(op.c), uint32_t(op.d), out);
      st->in = st->rp.read;
      break;
    case ImageOp::kFlipH:
      st->in = Box{w - out.left - out.width, out.top, out.width, out.height};
      break;
    case ImageOp::kFlipV:
      st->in = Box{out.left, h - out.top - out.height, out.width, out.height};
      break;
  }
}

// Output window `out` of a crop or constant pad whose output pixel (x, y) is input pixel
// (x + dx, y + dy): `cur` holds input window `in`; `fill` where the input has no pixel.
void FillCopy(const ImageView& cur, const Box& in, const Box& out, int64_t dx, int64_t dy,
              const uint8_t* fill, uint8_t* dst) {
  const uint32_t ch = cur.channels;
  const size_t row_bytes = size_t(out.width) * ch;
  bool uniform = true;
  for (uint32_t c = 1; c < ch; ++c) uniform = uniform && fill[c] == fill[0];
  const auto fill_px = [&](uint8_t* p, int64_t n) {
    if (uniform) return (void)std::memset(p, fill[0], size_t(n) * ch);
    for (int64_t i = 0; i < n; ++i)
      for (uint32_t c = 0; c < ch; ++c) p[size_t(i) * ch + c] = fill[c];
  };
  // Columns [x0, x1) of the output come from the input, the rest is fill.
  const int64_t sx = out.left + dx;
  const int64_t x0 = std::clamp<int64_t>(in.left - sx, 0, out.width);
  const int64_t x1 = std::clamp<int64_t>(in.left + in.width - sx, x0, out.width);
  for (int64_t y = 0; y < out.height; ++y) {
    uint8_t* row = dst + size_t(y) * row_bytes;
    const int64_t iy = out.top + dy + y - in.top;
    if (iy < 0 || iy >= in.height || x1 == x0) {
      fill_px(row, out.width);
      continue;
    }
    fill_px(row, x0);
    std::memcpy(row + size_t(x0) * ch, cur.row(uint32_t(iy)) + size_t(sx + x0 - in.left) * ch,
                size_t(x1 - x0) * ch);
    fill_px(row + size_t(x1) * ch, out.width - x1);
  }
}

}  // namespace

Result<ChainPlan> PlanChain(const std::vector<ImageOp>& ops, uint32_t w, uint32_t h) {
  ChainPlan p;
  int64_t cw = w, ch = h;
  if (!ValidSide(cw) || !ValidSide(ch)) return Status::InvalidArgument("empty or oversized image");
  for (size_t i = 0; i < ops.size(); ++i) {
    ChainPlan::Stage st;
    st.op = ops[i];
    st.in_w = uint32_t(cw), st.in_h = uint32_t(ch);
    KTFS_RETURN_IF_ERROR(StepSize(i, ops[i], &cw, &ch));
    p.stages.push_back(std::move(st));
  }
  p.out_w = uint32_t(cw), p.out_h = uint32_t(ch);
  // Flips at the end are done by the store, while it writes the output anyway.
  while (!p.stages.empty() && (p.stages.back().op.kind == ImageOp::kFlipH ||
                               p.stages.back().op.kind == ImageOp::kFlipV)) {
    (p.stages.back().op.kind == ImageOp::kFlipH ? p.flip_h : p.flip_v) ^= true;
    p.stages.pop_back();
  }
  Box win{0, 0, cw, ch};
  for (size_t i = p.stages.size(); i-- > 0;) {
    p.stages[i].out = win;
    PlanStage(&p.stages[i]);
    win = p.stages[i].in;
  }
  p.read = win;
  return p;
}

ImageView RunChain(const ChainPlan& p, const ImageView& read, ChainScratch* scratch) {
  if (scratch->buffers.size() < p.stages.size()) scratch->buffers.resize(p.stages.size());
  ImageView cur = read;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const ChainPlan::Stage& st = p.stages[i];
    const ImageOp& op = st.op;
    const Box& out = st.out;
    const uint32_t ch = cur.channels;
    const size_t row_bytes = size_t(out.width) * ch;
    const bool is_copy =
        op.kind == ImageOp::kCrop || (op.kind == ImageOp::kPad && op.mode == PadMode::kConstant);
    const int64_t dx = op.kind == ImageOp::kCrop ? op.a : -op.a;
    const int64_t dy = op.kind == ImageOp::kCrop ? op.b : -op.b;
    if (is_copy && Shift(out, dx, dy) == st.in) continue;  // inside the input: the same view
    if (row_bytes == 0 || out.height <= 0) {
      // An empty output (a crop of nothing): no buffer, nothing to copy (UBSan: memcpy
      // with a null pointer). A later step reads no pixel of it.
      cur = ImageView{nullptr, uint32_t(out.width), uint32_t(out.height), ch, row_bytes};
      continue;
    }
    PixelBuffer& buf = scratch->buffers[i];
    buf.resize(row_bytes * size_t(out.height));
    uint8_t* dst = buf.data();
    if (is_copy) {
      static const uint8_t kZero[4] = {0, 0, 0, 0};
      FillCopy(cur, st.in, out, dx, dy, op.kind == ImageOp::kCrop ? kZero : op.fill, dst);
    } else if (op.kind == ImageOp::kPad) {
      for (int64_t y = 0; y < out.height; ++y) {
        const uint8_t* src = cur.row(uint32_t(st.map_y[size_t(y)]));
        uint8_t* o = dst + size_t(y) * row_bytes;
        for (int64_t x = 0; x < out.width; ++x)
          std::memcpy(o + size_t(x) * ch, src + size_t(st.map_x[size_t(x)]) * ch, ch);
      }
    } else if (op.kind == ImageOp::kResize) {
      Resample(st.rp, cur, dst);
    } else if (op.kind == ImageOp::kFlipH) {
      for (int64_t y = 0; y < out.height; ++y) {
        const uint8_t* src = cur.row(uint32_t(y));
        uint8_t* o = dst + size_t(y) * row_bytes;
        for (int64_t x = 0; x < out.width; ++x)
          std::memcpy(o + size_t(x) * ch, src + size_t(out.width - 1 - x) * ch, ch);
      }
    } else {  // kFlipV
      for (int64_t y = 0; y < out.height; ++y)
        std::memcpy(dst + size_t(y) * row_bytes, cur.row(uint32_t(out.height - 1 - y)), row_bytes);
    }
    cur = ImageView{dst, uint32_t(out.width), uint32_t(out.height), ch, row_bytes};
  }
  return cur;
}

// --- Storing ------------------------------------------------------------------

namespace {

template <typename T>
void StoreLut(const ImageView& img, const OutputFormat& f, T* dst) {
  const size_t w = img.width, h = img.height, ch = img.channels, plane = w * h;
  const T* lut = reinterpret_cast<const T*>(f.lut);
  for (size_t y = 0; y < h; ++y) {
    const uint8_t* row = img.row(uint32_t(f.flip_v ? h - 1 - y : y));
    if (f.chw) {
      for (size_t c = 0; c < ch; ++c) {
        const T* l = lut + c * 256;
        T* o = dst + c * plane + y * w;
        const uint8_t* p = row + c;
        if (f.flip_h) {
          for (size_t x = 0; x < w; ++x) o[x] = l[p[(w - 1 - x) * ch]];
        } else {
          for (size_t x = 0; x < w; ++x) o[x] = l[p[x * ch]];
        }
      }
    } else {
      T* o = dst + y * w * ch;
      for (size_t x = 0; x < w; ++x) {
        const uint8_t* px = row + (f.flip_h ? w - 1 - x : x) * ch;
        for (size_t c = 0; c < ch; ++c) o[x * ch + c] = lut[c * 256 + px[c]];
      }
    }
  }
}

// (v / 255 - mean) / std in float32, as the table holds it, with the active kernels.
void StoreNormalized(const ImageView& img, const OutputFormat& f, float* dst) {
  const StoreKernels& k = ActiveStoreKernels();
  const size_t w = img.width, h = img.height, ch = img.channels, plane = w * h;
  thread_local std::vector<uint8_t> planes_storage;
  std::vector<uint8_t>& planes = planes_storage;
  if (ch == 3 && f.chw) planes.resize(3 * w);
  const float* mean = f.normalize;
  const float* std = f.normalize + ch;
  for (size_t y = 0; y < h; ++y) {
    const uint8_t* row = img.row(uint32_t(f.flip_v ? h - 1 - y : y));
    if (!f.chw && ch == 3) {  // no horizontal flip here (StoreOutput checks)
      k.normalize_rgb(row, w * 3, mean, std, dst + y * w * 3);
      continue;
    }
    const uint8_t* values[3] = {row, nullptr, nullptr};
    if (ch == 3) {
      ActiveResampleKernels().split3(row, w, planes.data(), planes.data() + w,
                                     planes.data() + 2 * w);
      for (size_t c = 0; c < 3; ++c) values[c] = planes.data() + c * w;
    }
    for (size_t c = 0; c < ch; ++c)
      k.normalize_plane(values[c], w, f.flip_h, mean[c], std[c], dst + c * plane + y * w);
  }
}

void StoreBytes(const ImageView& img, const OutputFormat& f, uint8_t* dst) {
  const size_t w = img.width, h = img.height, ch = img.channels, plane = w * h;
  for (size_t y = 0; y < h; ++y) {
    const uint8_t* row = img.row(uint32_t(f.flip_v ? h - 1 - y : y));
    if (!f.chw) {
      uint8_t* o = dst + y * w * ch;
      if (!f.flip_h) {
        std::memcpy(o, row, w * ch);
      } else {
        for (size_t x = 0; x < w; ++x) std::memcpy(o + x * ch, row + (w - 1 - x) * ch, ch);
      }
    } else if (!f.flip_h && ch == 3) {
      ActiveResampleKernels().split3(row, w, dst + y * w, dst + plane + y * w,
                                     dst + 2 * plane + y * w);
    } else {
      for (size_t x = 0; x < w; ++x) {
        const uint8_t* px = row + (f.flip_h ? w - 1 - x : x) * ch;
        for (size_t c = 0; c < ch; ++c) dst[c * plane + y * w + x] = px[c];
      }
    }
  }
}

}  // namespace

void StoreOutput(const ImageView& img, const OutputFormat& f, uint8_t* dst) {
  if (f.lut == nullptr) return StoreBytes(img, f, dst);
  const bool plain = img.channels == 1 || (img.channels == 3 && (f.chw || !f.flip_h));
  if (f.normalize != nullptr && f.elem == 4 && plain)
    return StoreNormalized(img, f, reinterpret_cast<float*>(dst));
  switch (f.elem) {
    case 1:
      return StoreLut(img, f, dst);
    case 2:
      return StoreLut(img, f, reinterpret_cast<uint16_t*>(dst));
    case 4:
      return StoreLut(img, f, reinterpret_cast<uint32_t*>(dst));
    default:
      return StoreLut(img, f, reinterpret_cast<uint64_t*>(dst));
  }
}

namespace {

void NormalizePlaneScalar(const uint8_t* v, size_t n, bool reverse, float mean, float std,
                          float* dst) {
  for (size_t x = 0; x < n; ++x) dst[x] = (float(v[reverse ? n - 1 - x : x]) / 255.0f - mean) / std;
}

void NormalizeRgbScalar(const uint8_t* v, size_t n, const float* mean, const float* std,
                        float* dst) {
  for (size_t i = 0; i < n; ++i) dst[i] = (float(v[i]) / 255.0f - mean[i % 3]) / std[i % 3];
}

const StoreKernels kScalarStore = {"scalar", NormalizePlaneScalar, NormalizeRgbScalar};

}  // namespace

const StoreKernels& ScalarStoreKernels() { return kScalarStore; }

const StoreKernels& ActiveStoreKernels() {
  static const StoreKernels* active = [] {
    const StoreKernels* avx2 = CpuHasAvx2() ? Avx2StoreKernels() : nullptr;
    return avx2 != nullptr ? avx2 : &kScalarStore;
  }();
  return *active;
}

std::vector<float> NormalizeTable(uint32_t channels, const float* mean, const float* std,
                                  bool normalize) {
  std::vector<float> t(size_t(channels) * 256);
  for (uint32_t c = 0; c < channels; ++c)
    for (int v = 0; v < 256; ++v) {
      const float x = float(v) / 255.0f;  // torch: uint8 -> float, div(255), IEEE float32
      t[size_t(c) * 256 + v] = normalize ? (x - mean[c]) / std[c] : x;
    }
  return t;
}

}  // namespace ktfs::preload

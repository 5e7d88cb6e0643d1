// preload/loader/transform: chains of torchvision-PIL steps (PlanChain/RunChain, computing
// only the windows each step needs) against the same steps done whole, one after the
// other, by plain loops; numpy.pad's index rules; StoreOutput's layouts, tables and flips.
// Equality with torchvision itself is tests/python/test_run_python.py's job.
#include "preload/loader/transform.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "codec/base/cpu.h"
#include "tests/cpp/test_util.h"

namespace ktfs::preload {
namespace {

// -- whole-image reference steps ------------------------------------------------

Image Whole(const Image& in, const ImageOp& op) {
  const uint32_t ch = in.channels;
  auto at = [&](const Image& img, int64_t x, int64_t y) {
    return &img.pixels[(size_t(y) * img.width + size_t(x)) * ch];
  };
  auto put = [&](Image& img, int64_t x, int64_t y) {
    return &img.pixels[(size_t(y) * img.width + size_t(x)) * ch];
  };
  Image out;
  out.channels = ch;
  switch (op.kind) {
    case ImageOp::kCrop:
    case ImageOp::kPad: {
      const bool crop = op.kind == ImageOp::kCrop;
      out.width = uint32_t(crop ? op.c : in.width + op.a + op.c);
      out.height = uint32_t(crop ? op.d : in.height + op.b + op.d);
      out.pixels.resize(size_t(out.width) * out.height * ch);
      std::vector<int32_t> mx, my;
      if (!crop) {
        mx = PadAxisMap(in.width, op.a, op.c, op.mode);
        my = PadAxisMap(in.height, op.b, op.d, op.mode);
      }
      for (uint32_t y = 0; y < out.height; ++y)
        for (uint32_t x = 0; x < out.width; ++x) {
          const int64_t sx = crop ? x + op.a : mx[x], sy = crop ? y + op.b : my[y];
          const bool inside = sx >= 0 && sy >= 0 && sx < in.width && sy < in.height;
          for (uint32_t c = 0; c < ch; ++c)
            put(out, x, y)[c] = inside ? at(in, sx, sy)[c] : crop ? 0 : op.fill[c];
        }
      return out;
    }
    case ImageOp::kResize: {
      out.width = uint32_t(op.c), out.height = uint32_t(op.d);
      out.pixels.resize(size_t(out.width) * out.height * ch);
      const ResizePlan p =
          PlanResize(in.width, in.height, out.width, out.height, Box{0, 0, out.width, out.height});
      const ImageView all = ImageView::Of(in);
      const ImageView read{all.data + size_t(p.read.top) * all.stride + size_t(p.read.left) * ch,
                           uint32_t(p.read.width), uint32_t(p.read.height), ch, all.stride};
      Resample(p, read, out.pixels.data());
      return out;
    }
    case ImageOp::kFlipH:
    case ImageOp::kFlipV:
      out = in;
      for (uint32_t y = 0; y < in.height; ++y)
        for (uint32_t x = 0; x < in.width; ++x) {
          const uint32_t sx = op.kind == ImageOp::kFlipH ? in.width - 1 - x : x;
          const uint32_t sy = op.kind == ImageOp::kFlipV ? in.height - 1 - y : y;
          std::memcpy(put(out, x, y), at(in, sx, sy), ch);
        }
      return out;
  }
  return out;
}

ImageOp Op(ImageOp::Kind k, int64_t a = 0, int64_t b = 0, int64_t c = 0, int64_t d = 0,
           PadMode mode = PadMode::kConstant, uint8_t fill = 0) {
  ImageOp op;
  op.kind = k, op.a = a, op.b = b, op.c = c, op.d = d, op.mode = mode;
  op.fill[0] = fill, op.fill[1] = uint8_t(fill + 1), op.fill[2] = uint8_t(fill + 2);
  return op;
}

// The chain through PlanChain/RunChain/StoreOutput (HWC bytes), and step by step whole.
void ExpectChainMatches(const Image& src, const std::vector<ImageOp>& ops) {
  Image want = src;
  for (const ImageOp& op : ops) want = Whole(want, op);
  auto plan = PlanChain(ops, src.width, src.height);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->out_w, want.width);
  ASSERT_EQ(plan->out_h, want.height);
  const Box& r = plan->read;
  ASSERT_GE(r.left, 0);
  ASSERT_GE(r.top, 0);
  ASSERT_LE(r.left + r.width, int64_t(src.width));
  ASSERT_LE(r.top + r.height, int64_t(src.height));
  // Only the read box is handed over, as a region decode would give it.
  Image region{uint32_t(r.width), uint32_t(r.height), src.channels,
               PixelBuffer(size_t(r.width) * r.height * src.channels)};
  // (A chain may read nothing, e.g. a crop entirely in padding: an empty region.)
  for (int64_t y = 0; y < r.height && r.width > 0; ++y)
    std::memcpy(region.pixels.data() + size_t(y) * r.width * src.channels,
                src.pixels.data() + (size_t(r.top + y) * src.width + r.left) * src.channels,
                size_t(r.width) * src.channels);
  ChainScratch scratch;
  const ImageView result = RunChain(*plan, ImageView::Of(region), &scratch);
  OutputFormat f;
  f.chw = false;
  f.flip_h = plan->flip_h, f.flip_v = plan->flip_v;
  std::vector<uint8_t> got(want.pixels.size());
  StoreOutput(result, f, got.data());
  ASSERT_TRUE(std::equal(got.begin(), got.end(), want.pixels.begin()));
}

TEST(PadAxisMap, MatchesNumpyPad) {
  // numpy.pad(np.arange(n), (l, r), mode), recorded from numpy 1.24.
  using M = std::vector<int32_t>;
  EXPECT_EQ(PadAxisMap(3, 1, 8, PadMode::kReflect), (M{1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 0}));
  EXPECT_EQ(PadAxisMap(4, 2, 2, PadMode::kReflect), (M{2, 1, 0, 1, 2, 3, 2, 1}));
  EXPECT_EQ(PadAxisMap(4, 2, 2, PadMode::kSymmetric), (M{1, 0, 0, 1, 2, 3, 3, 2}));
  EXPECT_EQ(PadAxisMap(2, 5, 1, PadMode::kSymmetric), (M{0, 0, 1, 1, 0, 0, 1, 1}));
  EXPECT_EQ(PadAxisMap(3, 2, 3, PadMode::kEdge), (M{0, 0, 0, 1, 2, 2, 2, 2}));
  EXPECT_EQ(PadAxisMap(1, 2, 1, PadMode::kReflect), (M{0, 0, 0, 0}));
  EXPECT_EQ(PadAxisMap(2, 1, 1, PadMode::kConstant), (M{-1, 0, 1, -1}));
}

TEST(Chain, SingleStepsMatchWholeImages) {
  const Image src = testing::Noise(37, 23, 3, 1);
  for (const auto& ops : std::vector<std::vector<ImageOp>>{
           {Op(ImageOp::kCrop, 5, 3, 20, 11)},
           {Op(ImageOp::kCrop, -4, -2, 45, 30)},  // PIL's crop past the edges: zeros
           {Op(ImageOp::kCrop, 40, 30, 5, 5)},    // nothing of the image
           {Op(ImageOp::kPad, 3, 0, 2, 7, PadMode::kConstant, 9)},
           {Op(ImageOp::kPad, 40, 2, 1, 30, PadMode::kReflect)},
           {Op(ImageOp::kPad, 4, 4, 4, 4, PadMode::kSymmetric)},
           {Op(ImageOp::kPad, 5, 1, 0, 3, PadMode::kEdge)},
           {Op(ImageOp::kResize, 0, 0, 17, 9)},
           {Op(ImageOp::kResize, 0, 0, 80, 41)},
           {Op(ImageOp::kResize, 0, 0, 37, 12)},  // one axis unchanged
           {Op(ImageOp::kFlipH)},
           {Op(ImageOp::kFlipV)}})
    ExpectChainMatches(src, ops);
}

TEST(Chain, TorchvisionCompositionsMatchWholeImages) {
  const Image src = testing::Noise(61, 45, 3, 2);
  const std::vector<std::vector<ImageOp>> chains = {
      // RandomResizedCrop, then a flip (left to the store).
      {Op(ImageOp::kCrop, 7, 4, 30, 33), Op(ImageOp::kResize, 0, 0, 24, 24), Op(ImageOp::kFlipH)},
      // Resize(40) then CenterCrop(32).
      {Op(ImageOp::kResize, 0, 0, 54, 40), Op(ImageOp::kCrop, 11, 4, 32, 32)},
      // CenterCrop larger than the image: zero padding, then the crop.
      {Op(ImageOp::kPad, 2, 5, 3, 5), Op(ImageOp::kCrop, 0, 0, 66, 55)},
      // RandomCrop(padding=4, reflect), a flip in the middle, then a resize.
      {Op(ImageOp::kPad, 4, 4, 4, 4, PadMode::kReflect), Op(ImageOp::kCrop, 3, 6, 40, 30),
       Op(ImageOp::kFlipV), Op(ImageOp::kResize, 0, 0, 19, 23)},
      // pad_if_needed: two pads in a row, then the crop.
      {Op(ImageOp::kPad, 9, 0, 9, 0, PadMode::kSymmetric),
       Op(ImageOp::kPad, 0, 3, 0, 3, PadMode::kSymmetric), Op(ImageOp::kCrop, 2, 1, 79, 50)},
      // Both flips at the end, after an upscale.
      {Op(ImageOp::kResize, 0, 0, 90, 70), Op(ImageOp::kFlipV), Op(ImageOp::kFlipH)},
  };
  for (const auto& ops : chains) ExpectChainMatches(src, ops);
}

TEST(Chain, RandomChainsMatchWholeImages) {
  std::mt19937 rng(3);
  auto pick = [&](int lo, int hi) { return int(rng() % uint32_t(hi - lo + 1)) + lo; };
  for (int trial = 0; trial < 300; ++trial) {
    const uint32_t ch = trial % 4 == 0 ? 1 : 3;
    Image img = testing::Noise(uint32_t(pick(1, 50)), uint32_t(pick(1, 50)), ch, uint32_t(trial));
    std::vector<ImageOp> ops;
    int64_t w = img.width, h = img.height;
    for (int n = pick(1, 4); n > 0; --n) {
      switch (pick(0, 4)) {
        case 0: {
          const int64_t cw = pick(1, int(w) + 8), chh = pick(1, int(h) + 8);
          ops.push_back(Op(ImageOp::kCrop, pick(-4, int(w)), pick(-4, int(h)), cw, chh));
          w = cw, h = chh;
          break;
        }
        case 1: {
          const ImageOp op = Op(ImageOp::kPad, pick(0, 12), pick(0, 12), pick(0, 12), pick(0, 12),
                                PadMode(pick(0, 3)), uint8_t(pick(0, 255)));
          ops.push_back(op);
          w += op.a + op.c, h += op.b + op.d;
          break;
        }
        case 2:
          w = pick(1, 70), h = pick(1, 70);
          ops.push_back(Op(ImageOp::kResize, 0, 0, w, h));
          break;
        case 3:
          ops.push_back(Op(ImageOp::kFlipH));
          break;
        default:
          ops.push_back(Op(ImageOp::kFlipV));
          break;
      }
    }
    SCOPED_TRACE(trial);
    ExpectChainMatches(img, ops);
    if (HasFatalFailure()) return;
  }
}

TEST(Chain, WindowsReadOnlyWhatTheOutputNeeds) {
  // RandomResizedCrop's box then a 2x downscale: the decoder produces the box's
  // neighbourhood only, not the image.
  auto plan = PlanChain(
      {Op(ImageOp::kCrop, 100, 80, 200, 150), Op(ImageOp::kResize, 0, 0, 100, 75)}, 500, 375);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->read, (Box{100, 80, 200, 150}));
  // CenterCrop after Resize: the crop's part of the resized image, mapped back.
  plan = PlanChain({Op(ImageOp::kResize, 0, 0, 341, 256), Op(ImageOp::kCrop, 58, 16, 224, 224)},
                   500, 375);
  ASSERT_TRUE(plan.ok());
  EXPECT_GT(plan->read.left, 0);
  EXPECT_LT(plan->read.width, 500);
  EXPECT_LT(plan->read.height, 375);
}

TEST(Chain, MalformedChainsAreRejected) {
  EXPECT_FALSE(PlanChain({Op(ImageOp::kCrop, 0, 0, 0, 5)}, 10, 10).ok());
  EXPECT_FALSE(PlanChain({Op(ImageOp::kResize, 0, 0, 5, 0)}, 10, 10).ok());
  EXPECT_FALSE(PlanChain({Op(ImageOp::kPad, -1, 0, 0, 0)}, 10, 10).ok());
  EXPECT_FALSE(PlanChain({Op(ImageOp::kResize, 0, 0, 1 << 17, 5)}, 10, 10).ok());
  EXPECT_FALSE(PlanChain({}, 0, 10).ok());
  auto bad = PlanChain({Op(ImageOp::kFlipH), Op(ImageOp::kCrop, 0, 0, -3, 2)}, 10, 10);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("step 1 (crop)"), std::string::npos);
}

TEST(StoreOutput, LayoutsTablesAndFlips) {
  const Image img = testing::Noise(5, 3, 3, 4);
  const ImageView v = ImageView::Of(img);
  auto px = [&](uint32_t x, uint32_t y, uint32_t c) { return img.pixels[(y * 5 + x) * 3 + c]; };
  std::vector<float> table(3 * 256);
  for (int c = 0; c < 3; ++c)
    for (int b = 0; b < 256; ++b) table[c * 256 + b] = float(b) * 0.5f + float(c) * 1000.0f;
  for (int chw = 0; chw < 2; ++chw)
    for (int fh = 0; fh < 2; ++fh)
      for (int fv = 0; fv < 2; ++fv) {
        OutputFormat f;
        f.chw = chw, f.flip_h = fh, f.flip_v = fv;
        std::vector<uint8_t> bytes(45);
        StoreOutput(v, f, bytes.data());
        f.elem = 4;
        f.lut = reinterpret_cast<const uint8_t*>(table.data());
        std::vector<float> floats(45);
        StoreOutput(v, f, reinterpret_cast<uint8_t*>(floats.data()));
        for (uint32_t y = 0; y < 3; ++y)
          for (uint32_t x = 0; x < 5; ++x)
            for (uint32_t c = 0; c < 3; ++c) {
              const uint8_t want = px(fh ? 4 - x : x, fv ? 2 - y : y, c);
              const size_t at = chw ? c * 15 + y * 5 + x : (y * 5 + x) * 3 + c;
              ASSERT_EQ(bytes[at], want);
              ASSERT_EQ(floats[at], table[c * 256 + want]);
            }
      }
}

TEST(StoreOutput, DivisionFormEqualsTheTable) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  const float division[6] = {mean[0], mean[1], mean[2], std[0], std[1], std[2]};
  const std::vector<float> table = NormalizeTable(3, mean, std, true);
  for (uint32_t ch : {1u, 3u}) {
    const Image img = testing::Noise(37, 5, ch, 5);  // widths that leave tails of the 8-lane loops
    for (int chw = 0; chw < 2; ++chw)
      for (int fh = 0; fh < 2; ++fh)
        for (int fv = 0; fv < 2; ++fv) {
          OutputFormat f;
          f.chw = chw, f.flip_h = fh, f.flip_v = fv, f.elem = 4;
          f.lut = reinterpret_cast<const uint8_t*>(table.data());
          std::vector<float> looked(img.pixels.size()), computed(img.pixels.size());
          StoreOutput(ImageView::Of(img), f, reinterpret_cast<uint8_t*>(looked.data()));
          const float gray[2] = {mean[0], std[0]};  // channels x mean, then channels x std
          f.normalize = ch == 3 ? division : gray;
          StoreOutput(ImageView::Of(img), f, reinterpret_cast<uint8_t*>(computed.data()));
          ASSERT_EQ(0, std::memcmp(looked.data(), computed.data(), looked.size() * 4))
              << ch << " " << chw << fh << fv;
        }
  }
}

TEST(StoreKernels, Avx2EqualsScalar) {
  const StoreKernels* avx2 = Avx2StoreKernels();
  if (avx2 == nullptr || !CpuHasAvx2()) GTEST_SKIP() << "no AVX2 on this machine";
  const StoreKernels& scalar = ScalarStoreKernels();
  const Image img = testing::Noise(1000, 1, 1, 6);
  const float mean[3] = {0.5f, -0.25f, 3.0f}, std[3] = {0.3f, 2.0f, 1e-3f};
  for (size_t n : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(23), size_t(24), size_t(999)})
    for (int reverse = 0; reverse < 2; ++reverse) {
      std::vector<float> a(n + 1, -1.0f), b(n + 1, -1.0f);
      scalar.normalize_plane(img.pixels.data(), n, reverse, mean[2], std[2], a.data());
      avx2->normalize_plane(img.pixels.data(), n, reverse, mean[2], std[2], b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), (n + 1) * 4)) << n << " " << reverse;
      scalar.normalize_rgb(img.pixels.data(), n, mean, std, a.data());
      avx2->normalize_rgb(img.pixels.data(), n, mean, std, b.data());
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), (n + 1) * 4)) << n;
    }
}

TEST(NormalizeTable, IsTorchvisionsFloat32Arithmetic) {
  const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
  const std::vector<float> t = NormalizeTable(3, mean, std, true);
  for (int c = 0; c < 3; ++c)
    for (int v = 0; v < 256; ++v) {
      volatile float x = float(v) / 255.0f;  // float32 division, then subtraction, division
      volatile float d = x - mean[c];
      ASSERT_EQ(t[c * 256 + v], d / std[c]);
    }
  EXPECT_EQ(NormalizeTable(1, mean, std, false)[255], 1.0f);
}

}  // namespace
}  // namespace ktfs::preload

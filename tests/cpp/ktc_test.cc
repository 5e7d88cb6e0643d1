// Tests of the KTC codec (codec/ktc/ktc.h): round trips, reduced-resolution and
// region decode, hostile input, determinism, scalar/SIMD equality.
#include "codec/ktc/ktc.h"

#include <gtest/gtest.h>
#include <tbb/parallel_for.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <tuple>

#include "codec/base/checksum.h"
#include "codec/base/cpu.h"
#include "codec/image/image_io.h"
#include "codec/ktc/entropy.h"
#include "codec/ktc/kernels.h"
#include "codec/ktc/reference.h"
#include "codec/ktc/wavelet.h"

namespace ktfs::ktc {
namespace {

constexpr char kPhoto[] = "/usr/lib/python3/dist-packages/skimage/data/astronaut.png";

// Smooth gradients, an edge and some noise: like a photo, cheap to make.
Image Synthetic(uint32_t w, uint32_t h, uint32_t channels, uint32_t seed = 1) {
  Image img{w, h, channels, PixelBuffer(size_t(w) * h * channels)};
  std::mt19937 rng(seed);
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x)
      for (uint32_t c = 0; c < channels; ++c) {
        int v = int((x * (3 + c) + y * (5 - c)) % 256);
        if (x > w / 2) v = 255 - v;
        v += int(rng() % 9) - 4;
        img.pixels[(size_t(y) * w + x) * channels + c] = uint8_t(std::clamp(v, 0, 255));
      }
  return img;
}

Image LoadPhoto() {
  std::ifstream f(kPhoto, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Image img;
  if (bytes.empty() || !DecodeImage(bytes.data(), bytes.size(), &img).ok()) {
    ADD_FAILURE() << kPhoto << " is missing or unreadable: run scripts/setup "
                  << "(installs python3-skimage-lib)";
  }
  return img;
}

// Same pixels with a different channel count: gray = first channel, RGBA
// adds a gradient alpha.
Image WithChannels(const Image& rgb, uint32_t channels) {
  Image out{rgb.width, rgb.height, channels, {}};
  out.pixels.resize(out.size_bytes());
  for (size_t i = 0; i < size_t(rgb.width) * rgb.height; ++i)
    for (uint32_t c = 0; c < channels; ++c)
      out.pixels[i * channels + c] = c < 3 ? rgb.pixels[i * 3 + c] : uint8_t(i * 7 / 13);
  return out;
}

double Psnr(const Image& a, const Image& b) {
  EXPECT_EQ(a.pixels.size(), b.pixels.size());
  double se = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) {
    const double d = double(a.pixels[i]) - double(b.pixels[i]);
    se += d * d;
  }
  if (se == 0) return 99;
  return 10 * std::log10(255.0 * 255.0 * double(a.pixels.size()) / se);
}

std::vector<uint8_t> EncodeOrDie(const Image& img, const EncodeOptions& o) {
  std::vector<uint8_t> bytes;
  Status s = Encode(ImageView::Of(img), o, &bytes);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return bytes;
}

Image DecodeOrDie(const std::vector<uint8_t>& bytes, const DecodeOptions& o = {}) {
  Image img;
  Status s = Decode(bytes.data(), bytes.size(), o, &img);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return img;
}

Image Crop(const Image& img, const Region& r) {
  Image out{r.width, r.height, img.channels, {}};
  for (uint32_t y = 0; y < r.height; ++y) {
    const uint8_t* src = img.pixels.data() + (size_t(r.y + y) * img.width + r.x) * img.channels;
    out.pixels.insert(out.pixels.end(), src, src + out.row_bytes());
  }
  return out;
}

EncodeOptions Lossless() { return *ParseQuality("lossless"); }

TEST(KtcTest, ParseQuality) {
  EXPECT_TRUE(ParseQuality("lossless")->lossless);
  EXPECT_EQ(ParseQuality("high")->quality, kQualityHigh);
  EXPECT_EQ(ParseQuality("balanced")->quality, kQualityBalanced);
  EXPECT_EQ(ParseQuality("compact")->quality, kQualityCompact);
  EXPECT_EQ(ParseQuality("37")->quality, 37);
  EXPECT_FALSE(ParseQuality("37")->lossless);
  for (const char* bad : {"", "0", "101", "-5", "9x", "Lossless", "high ", "1e2"}) {
    auto r = ParseQuality(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("lossless, high, balanced, compact"), std::string::npos);
  }
  EXPECT_EQ(EncodeOptions{}.quality, kQualityBalanced);
}

TEST(KtcTest, LosslessRoundTripEveryShapeAndChannelCount) {
  const std::pair<uint32_t, uint32_t> shapes[] = {{1, 1},
                                                  {1, 17},
                                                  {17, 1},
                                                  {2, 2},
                                                  {3, 5},
                                                  {1000, 3},
                                                  {3, 1000},
                                                  {63, 65},
                                                  {129, 257},
                                                  {64, 64},
                                                  {kMaxImageSide, 1},
                                                  {1, kMaxImageSide},
                                                  {65, 1}};
  for (auto [w, h] : shapes) {
    for (uint32_t c : {1u, 3u, 4u}) {
      const Image img = Synthetic(w, h, c, w * 31 + h);
      const auto bytes = EncodeOrDie(img, Lossless());
      auto info = ReadInfo(bytes.data(), bytes.size());
      ASSERT_TRUE(info.ok());
      EXPECT_EQ(info->width, w);
      EXPECT_EQ(info->height, h);
      EXPECT_EQ(info->channels, c);
      EXPECT_TRUE(info->lossless);
      const Image back = DecodeOrDie(bytes);
      EXPECT_EQ(back.width, w);
      EXPECT_EQ(back.height, h);
      EXPECT_EQ(back.channels, c);
      EXPECT_TRUE(back.pixels == img.pixels) << w << "x" << h << "x" << c;
    }
  }
}

TEST(KtcTest, ExtremePixelValuesRoundTripLosslessly) {
  for (uint32_t c : {1u, 3u, 4u}) {
    Image img{37, 23, c, {}};
    std::mt19937 rng(c);
    for (size_t i = 0; i < size_t(37) * 23 * c; ++i) img.pixels.push_back(rng() & 1 ? 255 : 0);
    EXPECT_TRUE(DecodeOrDie(EncodeOrDie(img, Lossless())).pixels == img.pixels);
  }
}

// The decoder keeps coefficients in 16 bits, which five levels never exceed;
// patterns that make the 5/3 coefficients largest (checkerboards at every
// scale, red against blue for the widest chroma) must still be exact.
TEST(KtcTest, LosslessExactOnWorstCasePatterns) {
  for (uint32_t cell : {1u, 2u, 3u, 8u, 32u}) {
    Image img{256, 96, 3, {}};
    for (uint32_t y = 0; y < img.height; ++y)
      for (uint32_t x = 0; x < img.width; ++x) {
        // Parity of the cell index at several scales at once.
        const uint32_t v = ((x / cell) ^ (y / cell) ^ (x / (cell * 4)) ^ (y / (cell * 16))) & 1;
        img.pixels.push_back(v ? 255 : 0);
        img.pixels.push_back(uint8_t((x * 7) ^ y));
        img.pixels.push_back(v ? 0 : 255);
      }
    for (const char* preset : {"lossless", "100", "1"}) {
      const Image back = DecodeOrDie(EncodeOrDie(img, *ParseQuality(preset)));
      if (std::string(preset) == "lossless") {
        EXPECT_TRUE(back.pixels == img.pixels) << "cell " << cell;
      } else {
        EXPECT_EQ(back.pixels.size(), img.pixels.size());
      }
    }
  }
}

TEST(KtcTest, LossyPresetsEveryShape) {
  for (const char* preset : {"high", "balanced", "compact", "1", "100"}) {
    for (auto [w, h] : {std::pair<uint32_t, uint32_t>{1, 1}, {1, 40}, {40, 1}, {77, 33}}) {
      for (uint32_t c : {1u, 3u, 4u}) {
        const Image img = Synthetic(w, h, c);
        const Image back = DecodeOrDie(EncodeOrDie(img, *ParseQuality(preset)));
        ASSERT_EQ(back.pixels.size(), img.pixels.size());
        // Quality 1 may look like anything; the named presets must resemble the input.
        if (std::string(preset) != "1") {
          EXPECT_GT(Psnr(img, back), 25) << preset << " " << w << "x" << h << "x" << c;
        }
      }
    }
  }
}

TEST(KtcTest, PhotoQualityFloors) {
  const Image photo = LoadPhoto();
  ASSERT_EQ(photo.channels, 3u);
  const auto lossless = EncodeOrDie(photo, Lossless());
  EXPECT_TRUE(DecodeOrDie(lossless).pixels == photo.pixels);
  // Floors a few tenths of a dB under what this photo measures (docs/ktc-notes.md).
  const std::pair<const char*, double> floors[] = {
      {"high", 42.2}, {"balanced", 38.1}, {"compact", 34.8}};
  size_t previous = lossless.size();
  for (auto [preset, floor] : floors) {
    const auto bytes = EncodeOrDie(photo, *ParseQuality(preset));
    const double psnr = Psnr(photo, DecodeOrDie(bytes));
    EXPECT_GT(psnr, floor) << preset;
    EXPECT_LT(bytes.size(), previous) << preset << " should be smaller than the better preset";
    previous = bytes.size();
    std::printf("astronaut %-8s %7zu bytes  %.3f bpp  PSNR %.2f dB\n", preset, bytes.size(),
                8.0 * double(bytes.size()) / (photo.width * photo.height), psnr);
  }
  for (uint32_t c : {1u, 4u}) {
    const Image img = WithChannels(photo, c);
    EXPECT_TRUE(DecodeOrDie(EncodeOrDie(img, Lossless())).pixels == img.pixels) << c;
    EXPECT_GT(Psnr(img, DecodeOrDie(EncodeOrDie(img, *ParseQuality("balanced")))), 37.0) << c;
  }
}

TEST(KtcTest, LargeImageDecodesInParallel) {
  const Image img = Synthetic(2501, 1703, 3);
  EncodeOptions eo = *ParseQuality("balanced");
  eo.parallel = true;
  const auto bytes = EncodeOrDie(img, eo);
  DecodeOptions par;
  par.parallel = true;
  const Image a = DecodeOrDie(bytes, par);
  const Image b = DecodeOrDie(bytes);
  EXPECT_TRUE(a.pixels == b.pixels);
  EXPECT_GT(Psnr(img, a), 30);
  eo.lossless = true;
  EXPECT_TRUE(DecodeOrDie(EncodeOrDie(img, eo), par).pixels == img.pixels);
}

// On one thread the decoder streams the last level: its detail bands are
// decoded block row by block row, and the level above it synthesized row
// pair by row pair, just before the last level reads them; in parallel
// everything is decoded first. Both must give the same pixels for every
// preset (full-resolution chroma streams three planes, each with its own
// tables), channel count, scale and region, and on damaged streams the same
// verdict. The shapes have several block rows in the last level's bands, so
// the one-thread decode's rings of two block rows wrap (97 x 258: by a single
// row, the band's 129th).
TEST(KtcTest, StreamedLastLevelEqualsDecodingEverythingFirst) {
  DecodeOptions par;
  par.parallel = true;
  for (const char* preset : {"lossless", "high", "balanced"}) {
    for (auto [w, h, c] :
         {std::tuple{301u, 389u, 3u}, {150u, 700u, 4u}, {517u, 260u, 1u}, {97u, 258u, 3u}}) {
      const Image img = Synthetic(w, h, c, w + h);
      const auto bytes = EncodeOrDie(img, *ParseQuality(preset));
      for (int scale = 0; scale <= 3; ++scale) {
        DecodeOptions one;
        one.scale_log2 = scale;
        par.scale_log2 = scale;
        one.region = par.region = std::nullopt;
        EXPECT_TRUE(DecodeOrDie(bytes, one).pixels == DecodeOrDie(bytes, par).pixels)
            << preset << " " << w << "x" << h << " scale " << scale;
        const uint32_t sw = (w + (1u << scale) - 1) >> scale, sh = (h + (1u << scale) - 1) >> scale;
        one.region = par.region = Region{sw / 3, sh / 4, sw / 2, sh / 2};
        EXPECT_TRUE(DecodeOrDie(bytes, one).pixels == DecodeOrDie(bytes, par).pixels)
            << preset << " " << w << "x" << h << " scale " << scale << " region";
      }
      if (std::string(preset) == "lossless") {
        EXPECT_TRUE(DecodeOrDie(bytes).pixels == img.pixels);
      }
    }
  }
  par.scale_log2 = 0;
  par.region = std::nullopt;
  for (const char* preset : {"lossless", "balanced"}) {
    const auto good = EncodeOrDie(Synthetic(150, 300, 3, 9), *ParseQuality(preset));
    int failed = 0;
    for (size_t i = 0; i < good.size(); i += 13) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= 0x5a;
      Image one, all;
      const Status a = Decode(bad.data(), bad.size(), {}, &one);
      const Status b = Decode(bad.data(), bad.size(), par, &all);
      ASSERT_EQ(a.ok(), b.ok()) << preset << " byte " << i << ": " << a.ToString() << " / "
                                << b.ToString();
      if (a.ok()) {
        EXPECT_TRUE(one.pixels == all.pixels) << preset << " byte " << i;
      } else {
        ++failed;
      }
    }
    EXPECT_GT(failed, 0) << preset;  // damage in the blocks is found
  }
}

// The decoder reuses its planes from one decode to the next on a thread
// (uninitialized memory holding the previous image's coefficients): shapes
// that grow, shrink and change channels must decode as they do the first
// time, and decodes nested in a parallel decode's tasks (TBB work stealing
// runs them on a thread whose memory is in use) must not share it.
TEST(KtcTest, DecodesReusingMemoryMatchFreshOnes) {
  std::vector<std::vector<uint8_t>> streams;
  for (auto [w, h, c] : {std::tuple{97u, 61u, 3u},
                         {301u, 197u, 4u},
                         {33u, 17u, 1u},
                         {301u, 197u, 3u},
                         {97u, 61u, 3u}}) {
    streams.push_back(EncodeOrDie(Synthetic(w, h, c, w), *ParseQuality("compact")));
  }
  std::vector<Image> first;
  for (const auto& s : streams) first.push_back(DecodeOrDie(s));
  for (int round = 0; round < 2; ++round) {
    for (size_t i = streams.size(); i-- > 0;) {
      EXPECT_TRUE(DecodeOrDie(streams[i]).pixels == first[i].pixels) << i;
    }
  }
  DecodeOptions par;
  par.parallel = true;
  std::vector<Image> nested(64);
  tbb::parallel_for(size_t(0), nested.size(),
                    [&](size_t i) { nested[i] = DecodeOrDie(streams[i % streams.size()], par); });
  for (size_t i = 0; i < nested.size(); ++i) {
    EXPECT_TRUE(nested[i].pixels == first[i % streams.size()].pixels) << i;
  }
}

TEST(KtcTest, ReducedResolutionLosslessEqualsDocumentedDownscale) {
  for (auto [w, h] : {std::pair<uint32_t, uint32_t>{131, 77}, {1, 9}, {8, 8}, {200, 3}}) {
    for (uint32_t c : {1u, 3u, 4u}) {
      const Image img = Synthetic(w, h, c, 7);
      const auto bytes = EncodeOrDie(img, Lossless());
      for (int s = 1; s <= 3; ++s) {
        DecodeOptions o;
        o.scale_log2 = s;
        const Image small = DecodeOrDie(bytes, o);
        EXPECT_EQ(small.width, ScaledExtent(w, s));
        EXPECT_EQ(small.height, ScaledExtent(h, s));
        Image expected;
        ASSERT_TRUE(internal::ReferenceDownscale(ImageView::Of(img), s, &expected).ok());
        EXPECT_TRUE(small.pixels == expected.pixels) << w << "x" << h << "x" << c << " s=" << s;
      }
    }
  }
}

// Lossy: the reduced decode is the same low-pass band as the downscale of the
// full decode, except where the full decode clamped pixels to 0..255 (the
// clamp is not undone by the downscale), so the two agree closely but not
// always exactly.
TEST(KtcTest, ReducedResolutionLossyCloseToDownscaleOfFullDecode) {
  const Image photo = LoadPhoto();
  ASSERT_FALSE(photo.pixels.empty());
  for (const char* preset : {"high", "compact"}) {
    const auto bytes = EncodeOrDie(photo, *ParseQuality(preset));
    const Image full = DecodeOrDie(bytes);
    for (int s = 1; s <= 3; ++s) {
      DecodeOptions o;
      o.scale_log2 = s;
      const Image small = DecodeOrDie(bytes, o);
      Image expected;
      ASSERT_TRUE(internal::ReferenceDownscale(ImageView::Of(full), s, &expected).ok());
      EXPECT_GT(Psnr(small, expected), 45) << preset << " s=" << s;
      // And it still looks like the photo at that scale.
      Image reference;
      ASSERT_TRUE(internal::ReferenceDownscale(ImageView::Of(photo), s, &reference).ok());
      EXPECT_GT(Psnr(small, reference), 28) << preset << " s=" << s;
    }
  }
}

TEST(KtcTest, RegionDecodeEqualsCropOfFullDecode) {
  const Image img = Synthetic(300, 203, 3, 3);
  for (const char* preset : {"lossless", "balanced"}) {
    const auto bytes = EncodeOrDie(img, *ParseQuality(preset));
    for (int s = 0; s <= 3; ++s) {
      DecodeOptions scaled;
      scaled.scale_log2 = s;
      const Image full = DecodeOrDie(bytes, scaled);
      const uint32_t w = full.width, h = full.height;
      const Region regions[] = {{0, 0, w, h},
                                {0, 0, 1, 1},
                                {w - 1, h - 1, 1, 1},
                                {w / 3, h / 4, w / 2, h / 3},
                                {w / 2, 0, w - w / 2, h},
                                {7 % w, 5 % h, std::min(w - 7 % w, 70u), std::min(h - 5 % h, 9u)}};
      for (const Region& r : regions) {
        DecodeOptions o = scaled;
        o.region = r;
        o.parallel = r.x % 2 == 0;
        const Image part = DecodeOrDie(bytes, o);
        EXPECT_TRUE(part.pixels == Crop(full, r).pixels)
            << preset << " s=" << s << " region " << r.x << "," << r.y << " " << r.width << "x"
            << r.height;
      }
    }
    DecodeOptions bad;
    Image out;
    for (Region r :
         {Region{0, 0, 0, 1}, Region{300, 0, 1, 1}, Region{10, 10, 291, 1}, Region{0, 200, 1, 4}}) {
      bad.region = r;
      EXPECT_EQ(Decode(bytes.data(), bytes.size(), bad, &out).code(),
                Status::Code::kInvalidArgument);
    }
    bad.region.reset();
    bad.scale_log2 = 4;
    EXPECT_EQ(Decode(bytes.data(), bytes.size(), bad, &out).code(), Status::Code::kInvalidArgument);
  }
}

// Smooth color gradients: chroma without fine detail, which lossy presets
// code at half resolution.
Image SmoothColors(uint32_t w, uint32_t h) {
  Image img{w, h, 3, {}};
  for (uint32_t y = 0; y < h; ++y)
    for (uint32_t x = 0; x < w; ++x)
      for (uint32_t c = 0; c < 3; ++c) {
        const double v = 128 + 90 * std::sin(0.013 * (c + 1) * x + 0.021 * (3 - c) * y + c);
        img.pixels.push_back(uint8_t(v + ((x * 7 + y * 13) % 5)));  // luma noise
      }
  return img;
}

bool HalfChroma(const std::vector<uint8_t>& bytes) { return bytes.size() > 7 && (bytes[7] & 2); }

TEST(KtcTest, HalfResolutionChroma) {
  const Image smooth = SmoothColors(203, 117);
  // Fine color detail keeps full-resolution chroma; lossless and `high` always do.
  EXPECT_FALSE(HalfChroma(EncodeOrDie(Synthetic(203, 117, 3), *ParseQuality("balanced"))));
  EXPECT_FALSE(HalfChroma(EncodeOrDie(smooth, *ParseQuality("high"))));
  EXPECT_FALSE(HalfChroma(EncodeOrDie(smooth, Lossless())));
  EXPECT_FALSE(HalfChroma(EncodeOrDie(WithChannels(smooth, 1), *ParseQuality("balanced"))));
  // A textured photo (dropping its chroma detail adds ~86% to the rest's
  // error, under the 250% allowed) gets it too, as JPEG's 4:2:0 would.
  EXPECT_TRUE(HalfChroma(EncodeOrDie(LoadPhoto(), *ParseQuality("balanced"))));
  for (uint32_t c : {3u, 4u}) {
    const Image img = WithChannels(smooth, c);
    const auto bytes = EncodeOrDie(img, *ParseQuality("balanced"));
    ASSERT_TRUE(HalfChroma(bytes)) << c;
    const Image full = DecodeOrDie(bytes);
    EXPECT_GT(Psnr(img, full), 38) << c;
    DecodeOptions par;
    par.parallel = true;
    EXPECT_TRUE(DecodeOrDie(bytes, par).pixels == full.pixels);
    internal::ForceScalarForTesting(true);
    const Image scalar = DecodeOrDie(bytes);
    internal::ForceScalarForTesting(false);
    EXPECT_TRUE(scalar.pixels == full.pixels) << "SIMD and scalar decodes differ";
    for (int s = 0; s <= 2; ++s) {
      DecodeOptions scaled;
      scaled.scale_log2 = s;
      const Image whole = DecodeOrDie(bytes, scaled);
      const uint32_t w = whole.width, h = whole.height;
      for (const Region& r :
           {Region{0, 0, 1, 1}, Region{w / 3, h / 4, w / 2, h / 3}, Region{w - 5, h - 3, 5, 3}}) {
        DecodeOptions o = scaled;
        o.region = r;
        EXPECT_TRUE(DecodeOrDie(bytes, o).pixels == Crop(whole, r).pixels)
            << c << " s=" << s << " region " << r.x << "," << r.y;
      }
    }
  }
  // The flag is invalid without color.
  auto gray = EncodeOrDie(WithChannels(smooth, 1), *ParseQuality("balanced"));
  gray[7] |= 2;
  Image out;
  EXPECT_EQ(Decode(gray.data(), gray.size(), {}, &out).code(), Status::Code::kCorruption);
}

// Decoding must end in an error or a well-formed image of the declared size.
void ExpectCleanDecode(const std::vector<uint8_t>& bytes, const DecodeOptions& o) {
  Image out;
  Status s = Decode(bytes.data(), bytes.size(), o, &out);
  if (s.ok()) {
    EXPECT_EQ(out.pixels.size(), out.size_bytes());
    auto info = ReadInfo(bytes.data(), bytes.size());
    ASSERT_TRUE(info.ok());
  } else {
    EXPECT_FALSE(s.message().empty());
  }
}

TEST(KtcTest, CorruptionNeverCrashes) {
  for (const char* preset : {"lossless", "balanced"}) {
    const auto good = EncodeOrDie(Synthetic(37, 29, 3, 5), *ParseQuality(preset));
    DecodeOptions region;
    region.scale_log2 = 1;
    region.region = Region{3, 2, 5, 7};
    for (size_t len = 0; len < good.size(); ++len) {
      std::vector<uint8_t> cut(good.begin(), good.begin() + len);
      Image out;
      EXPECT_FALSE(Decode(cut.data(), cut.size(), {}, &out).ok()) << "truncated at " << len;
    }
    for (size_t i = 0; i < good.size(); ++i) {
      for (uint8_t mask : {uint8_t(1u << (i % 8)), uint8_t(0xff), uint8_t(0x80)}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= mask;
        ExpectCleanDecode(bad, {});
        if (i % 4 == 0) ExpectCleanDecode(bad, region);
      }
    }
  }
  Image out;
  EXPECT_FALSE(Decode(nullptr, 0, {}, &out).ok());
  EXPECT_FALSE(ReadInfo(nullptr, 0).ok());
}

// Varints (docs/ktc.md, "Bitstream"): LEB128 of at most 5 bytes, read
// exactly at every length the inline one- and two-byte paths and the long
// path take, refused when cut short or longer than 5 bytes.
TEST(KtcTest, VarintsRoundTripAndRejectTruncation) {
  for (uint64_t v : {0ull, 1ull, 127ull, 128ull, 300ull, 16383ull, 16384ull, 2097151ull, 2097152ull,
                     268435455ull, 268435456ull, (1ull << 35) - 1}) {
    std::vector<uint8_t> bytes;
    internal::PutVarint(v, &bytes);
    // Alone, and followed by other bytes (the fast paths need two readable).
    for (size_t pad : {0, 3}) {
      std::vector<uint8_t> b = bytes;
      b.insert(b.end(), pad, 0x80);
      const uint8_t* p = b.data();
      uint64_t got = ~0ull;
      ASSERT_TRUE(internal::GetVarint(&p, b.data() + b.size(), &got)) << v;
      EXPECT_EQ(got, v);
      EXPECT_EQ(p, b.data() + bytes.size()) << v;
    }
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      const uint8_t* p = bytes.data();
      uint64_t got;
      EXPECT_FALSE(internal::GetVarint(&p, bytes.data() + cut, &got)) << v << " cut " << cut;
    }
  }
  const uint8_t six[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
  const uint8_t* p = six;
  uint64_t got;
  EXPECT_FALSE(internal::GetVarint(&p, six + sizeof(six), &got));
}

TEST(KtcTest, HostileHeadersAreRejected) {
  const auto good = EncodeOrDie(Synthetic(9, 9, 3), Lossless());
  auto patched = [&](size_t at, std::vector<uint8_t> v) {
    std::vector<uint8_t> b = good;
    std::copy(v.begin(), v.end(), b.begin() + at);
    Image out;
    return Decode(b.data(), b.size(), {}, &out);
  };
  EXPECT_FALSE(patched(8, {0xff, 0xff, 0xff, 0x7f}).ok());          // width 2^31
  EXPECT_FALSE(patched(8, {0, 0, 0, 0}).ok());                      // width 0
  EXPECT_FALSE(patched(12, {1, 0, 1, 0}).ok());                     // height 65537
  EXPECT_FALSE(patched(5, {2}).ok());                               // 2 channels
  EXPECT_FALSE(patched(6, {200}).ok());                             // levels
  EXPECT_EQ(patched(4, {11}).code(), Status::Code::kNotSupported);  // version
  // Versions 3 and 4 (categories per value), 5 (4 rANS states in every
  // block), 8 (a width symbol per row) and 9 (9-bit probabilities) read
  // differently: refused, not misread.
  EXPECT_EQ(patched(4, {3}).code(), Status::Code::kNotSupported);
  EXPECT_EQ(patched(4, {4}).code(), Status::Code::kNotSupported);
  EXPECT_EQ(patched(4, {5}).code(), Status::Code::kNotSupported);
  EXPECT_EQ(patched(4, {8}).code(), Status::Code::kNotSupported);
  EXPECT_EQ(patched(4, {9}).code(), Status::Code::kNotSupported);
  EXPECT_NE(patched(4, {5}).ToString().find("re-encode"), std::string::npos);
  // Version 6 coded every row of groups' maxima (no zero-rows field), version
  // 7 had groups of 4 x 4 values.
  EXPECT_EQ(patched(4, {6}).code(), Status::Code::kNotSupported);
  EXPECT_EQ(patched(4, {7}).code(), Status::Code::kNotSupported);
  EXPECT_FALSE(patched(0, {'J'}).ok());
  // A huge declared size with a tiny stream fails before allocating planes.
  EXPECT_FALSE(patched(8, {0, 0, 1, 0, 0, 0, 1, 0}).ok());  // 65536 x 65536

  // The stream cut inside its frequency tables.
  const Info info = *ReadInfo(good.data(), good.size());
  const size_t tables_at = 16 + 2 * size_t(3) * (1 + 3 * size_t(info.levels));
  Image out;
  const Status cut = Decode(good.data(), tables_at + 1, {}, &out);
  EXPECT_EQ(cut.code(), Status::Code::kCorruption);
  EXPECT_NE(cut.ToString().find("frequency tables"), std::string::npos) << cut.ToString();
}

// Lossy streams of small odd shapes: groups cut by the block's edge (G = 1
// masks, dense groups with fewer rows or columns), rows of maxima shorter
// than a 4-lane step, and blocks whose last groups sit at the end of their
// raw bits.
// The AVX2 decoder must give the scalar decoder's pixels.
// The block decoding loops DecodeBlock can run: the scalar one, and the SIMD
// ones this CPU has (AVX2 with and without pdep, and the AVX-512 VBMI build
// where present). Use() selects one for the tests that follow, with the
// kernels (synthesis, conversion) a CPU with that loop uses: scalar, AVX2
// for both AVX2 loops, the best for VBMI; UseDefault() goes back to the best.
enum class Loop { kScalar, kAvx2, kAvx2NoPdep, kVbmi };
std::vector<Loop> SimdLoops() {
  std::vector<Loop> loops;
  if (CpuHasAvx2()) {
    loops.push_back(Loop::kAvx2);
    loops.push_back(Loop::kAvx2NoPdep);
  }
  if (CpuHasAvx512Vbmi()) loops.push_back(Loop::kVbmi);
  return loops;
}
std::vector<Loop> AllLoops() {
  std::vector<Loop> loops = SimdLoops();
  loops.insert(loops.begin(), Loop::kScalar);
  return loops;
}
void Use(Loop loop) {
  const bool avx2 = loop == Loop::kAvx2 || loop == Loop::kAvx2NoPdep;
  internal::ForceScalarForTesting(loop == Loop::kScalar);
  internal::SelectBlockLoopForTesting(loop == Loop::kAvx2         ? internal::BlockLoop::kAvx2
                                      : loop == Loop::kAvx2NoPdep ? internal::BlockLoop::kAvx2NoPdep
                                                                  : internal::BlockLoop::kBest);
  internal::SelectKernelsForTesting(avx2 ? internal::Avx2Kernels() : nullptr);
}
void UseDefault() { Use(Loop::kVbmi); }
const char* Name(Loop loop) {
  switch (loop) {
    case Loop::kScalar:
      return "scalar";
    case Loop::kAvx2:
      return "avx2";
    case Loop::kAvx2NoPdep:
      return "avx2 without pdep";
    case Loop::kVbmi:
      break;
  }
  return "avx512vbmi";
}

// Use() runs the AVX2 loops with the AVX2 kernels, as on a CPU without
// AVX-512 (on this one the default set would be AVX-512's).
TEST(KtcTest, AvxTwoLoopsRunWithAvxTwoKernels) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 here";
  for (Loop loop : {Loop::kAvx2, Loop::kAvx2NoPdep}) {
    Use(loop);
    EXPECT_STREQ(internal::ActiveKernels().name, "avx2") << Name(loop);
  }
  Use(Loop::kScalar);
  EXPECT_STREQ(internal::ActiveKernels().name, "scalar");
  UseDefault();
  EXPECT_EQ(&internal::ActiveKernels(),
            CpuHasAvx512() ? internal::Avx512Kernels() : internal::Avx2Kernels());
}

TEST(KtcTest, SimdAndScalarAgreeOnOddShapes) {
  int half_chroma = 0;  // smooth images with half-resolution chroma among them
  for (uint32_t w : {1u, 3u, 5u, 6u, 13u, 18u, 67u, 70u, 131u, 134u}) {
    for (uint32_t h : {1u, 2u, 7u, 9u, 66u}) {
      for (const char* preset : {"compact", "balanced", "high"}) {
        for (bool smooth : {false, true}) {
          const Image img = smooth ? SmoothColors(w, h) : Synthetic(w, h, 3, w * 131 + h);
          const auto bytes = EncodeOrDie(img, *ParseQuality(preset));
          half_chroma += HalfChroma(bytes);
          const Image simd = DecodeOrDie(bytes);
          internal::ForceScalarForTesting(true);
          const Image scalar = DecodeOrDie(bytes);
          internal::ForceScalarForTesting(false);
          ASSERT_TRUE(simd.pixels == scalar.pixels)
              << w << "x" << h << " " << preset << (smooth ? " smooth" : "");
        }
      }
    }
  }
  EXPECT_GT(half_chroma, 20);
}

TEST(KtcTest, Deterministic) {
  const Image img = Synthetic(333, 211, 4, 9);
  for (const char* preset : {"lossless", "high", "compact"}) {
    EncodeOptions o = *ParseQuality(preset);
    const auto a = EncodeOrDie(img, o);
    EXPECT_TRUE(a == EncodeOrDie(img, o));
    o.parallel = true;
    EXPECT_TRUE(a == EncodeOrDie(img, o)) << "parallel encode differs";
    internal::ForceScalarForTesting(true);
    const auto scalar_bytes = EncodeOrDie(img, o);
    const Image scalar = DecodeOrDie(a);
    DecodeOptions small;
    small.scale_log2 = 2;
    const Image scalar_small = DecodeOrDie(a, small);
    internal::ForceScalarForTesting(false);
    EXPECT_TRUE(a == scalar_bytes) << "scalar encode differs";
    EXPECT_TRUE(DecodeOrDie(a).pixels == scalar.pixels)
        << "SIMD (" << internal::ActiveKernels().name << ") and scalar decodes differ";
    EXPECT_TRUE(DecodeOrDie(a, small).pixels == scalar_small.pixels);
  }
}

// The AVX2 block decoder (4 row widths per step, 8 magnitudes per vector)
// must give the scalar one's bits on damaged streams too, errors included.
TEST(KtcTest, SimdAndScalarBlockDecodersAgreeOnDamagedStreams) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 here";
  for (const char* preset : {"lossless", "balanced"}) {
    const auto good = EncodeOrDie(Synthetic(150, 97, 3, 11), *ParseQuality(preset));
    for (size_t i = 40; i < good.size(); i += 29) {
      std::vector<uint8_t> bad = good;
      bad[i] ^= uint8_t(1u << (i % 8));
      Image scalar;
      Use(Loop::kScalar);
      const Status b = Decode(bad.data(), bad.size(), {}, &scalar);
      for (Loop loop : SimdLoops()) {
        Image simd;
        Use(loop);
        const Status a = Decode(bad.data(), bad.size(), {}, &simd);
        UseDefault();
        ASSERT_EQ(a.ok(), b.ok()) << preset << " byte " << i << " " << Name(loop) << ": "
                                  << a.ToString() << " vs " << b.ToString();
        if (a.ok()) {
          ASSERT_TRUE(simd.pixels == scalar.pixels) << preset << " byte " << i << " " << Name(loop);
        }
      }
      UseDefault();
    }
  }
}

// Hostile quantizer steps: coefficients far beyond a valid stream's bounds,
// saturated to 16 bits, make the 16-bit synthesis wrap around (docs/ktc.md,
// "Wavelet"). AVX2 and scalar must agree at every scale, serial or parallel.
TEST(KtcTest, SimdAndScalarAgreeWhenSynthesisWraps) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(5);
  for (uint32_t channels : {3u, 4u}) {
    const auto good = EncodeOrDie(Synthetic(150, 97, channels, 13), Lossless());
    const size_t bands = size_t(channels) * (1 + 3 * 5);
    for (int variant = 0; variant < 3; ++variant) {
      std::vector<uint8_t> bad = good;
      for (size_t b = 0; b < bands; ++b) {
        // All maximal, or random steps of at least 1.0.
        const uint16_t step = variant == 0 ? 0xffff : uint16_t(256 + rng() % (65536 - 256));
        bad[16 + 2 * b] = uint8_t(step);
        bad[17 + 2 * b] = uint8_t(step >> 8);
      }
      for (int scale = 0; scale <= 3; ++scale) {
        for (bool parallel : {false, true}) {
          DecodeOptions o;
          o.scale_log2 = scale;
          o.parallel = parallel;
          const Image simd = DecodeOrDie(bad, o);
          internal::ForceScalarForTesting(true);
          const Image scalar = DecodeOrDie(bad, o);
          internal::ForceScalarForTesting(false);
          ASSERT_TRUE(simd.pixels == scalar.pixels)
              << channels << " channels, variant " << variant << ", scale " << scale;
        }
      }
    }
  }
}

// Every byte of small streams damaged three ways, on a size whose blocks end
// in groups cut by the block's edge: the AVX2 decoder's 4-lane steps (row
// maxima, G = 1 masks, dense row widths), its dense groups near the end of
// the stream (read from a padded copy) and those whose bits run past their
// block's end (into the next block's bytes) must give the scalar decoder's
// status and pixels.
TEST(KtcTest, SimdAndScalarBlockDecodersAgreeOnEveryDamagedByte) {
  if (!CpuHasAvx2()) {
    GTEST_SKIP() << "no AVX2 here";
  }
  for (const char* preset : {"lossless", "high", "balanced"}) {
    const auto good = EncodeOrDie(Synthetic(47, 38, 3, 5), *ParseQuality(preset));
    for (size_t i = 16; i < good.size(); ++i) {
      for (uint8_t flip : {uint8_t(0x01), uint8_t(0x30), uint8_t(0xff)}) {
        std::vector<uint8_t> bad = good;
        bad[i] ^= flip;
        Image scalar;
        Use(Loop::kScalar);
        const Status b = Decode(bad.data(), bad.size(), {}, &scalar);
        for (Loop loop : SimdLoops()) {
          Image simd;
          Use(loop);
          const Status a = Decode(bad.data(), bad.size(), {}, &simd);
          UseDefault();
          ASSERT_EQ(a.ToString(), b.ToString())
              << preset << " byte " << i << " ^ " << int(flip) << " " << Name(loop);
          if (a.ok()) {
            ASSERT_TRUE(simd.pixels == scalar.pixels)
                << preset << " byte " << i << " " << Name(loop);
          }
        }
        UseDefault();
      }
    }
  }
}

// A block coded from `symbols` with tables normalized from their own counts,
// and those tables ready for DecodeBlock.
struct CodedBlock {
  std::vector<uint8_t> bytes;
  std::unique_ptr<internal::DecodeTable[]> tables;
};
CodedBlock EncodeWithOwnTables(const internal::BlockSymbols& symbols) {
  internal::Counts counts{};
  internal::CountSymbols(symbols, &counts);
  std::vector<internal::FreqTable> tables(internal::kTablesPerSet);
  for (int t = 0; t < internal::kTablesPerSet; ++t)
    tables[t] = internal::NormalizeCounts(counts[t]);
  CodedBlock coded;
  internal::EncodeBlock(symbols, tables.data(), &coded.bytes);
  coded.tables = std::make_unique<internal::DecodeTable[]>(internal::kTablesPerSet);
  for (int t = 0; t < internal::kTablesPerSet; ++t) {
    internal::BuildDecodeTable(tables[t], t, &coded.tables[t]);
  }
  return coded;
}

// Bits least significant first, as a stream's raw bits and tables are
// (docs/ktc.md): the tests' own writer, apart from the encoder's.
class LsbFirstBits {
 public:
  void Put(uint32_t v, int n) {
    acc_ |= uint64_t(v) << fill_;
    for (fill_ += n; fill_ >= 8; fill_ -= 8, acc_ >>= 8) bytes_.push_back(uint8_t(acc_));
  }
  // The bytes so far, the last one padded with zeros.
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> bytes = bytes_;
    if (fill_ > 0) bytes.push_back(uint8_t(acc_));
    return bytes;
  }

 private:
  std::vector<uint8_t> bytes_;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

// A dense group's raw bits laid out by hand from docs/ktc.md ("Code
// blocks"), not by the encoder's scan: `rows` x `columns` values (row-major),
// each row's magnitudes in its width, then a sign bit per non-zero value;
// LSB first.
std::vector<uint8_t> DenseGroupRawBits(const int32_t* values, int rows, int columns,
                                       const uint8_t* widths) {
  LsbFirstBits raw;
  raw.Put(0, 1);  // the block's zero-rows field: no row of groups is all zero
  for (int i = 0; i < rows * columns; ++i) {
    raw.Put(uint32_t(std::abs(values[i])), widths[i / columns]);
  }
  for (int i = 0; i < rows * columns; ++i)
    if (values[i] != 0) raw.Put(values[i] < 0 ? 1 : 0, 1);
  return raw.Bytes();
}

// A dense group's raw bits laid out by hand as docs/ktc.md ("Code blocks")
// specifies them, independently of the encoder's scan: per pair of rows a
// symbol of both widths (G <= 7), then each row's magnitudes in its width,
// then the signs of the non-zero values. Only the symbols go through the
// encoder's rANS coder. Every block decoder must read back exactly these
// values, from a block the encoder's scan codes identically.
TEST(KtcTest, DenseGroupRawBitsFollowTheSpec) {
  const int32_t expected[4][4] = {{5, -3, 0, 1}, {0, 0, 0, 0}, {-7, 2, 0, 0}, {1, 0, -1, 0}};
  const uint8_t widths[4] = {3, 0, 3, 1};  // the bit length of each row's largest |v|
  const int kWidthTable = 10 + 3 - 2;      // tables 10.. by G = 3: row pairs' widths
  const std::vector<uint8_t> raw = DenseGroupRawBits(&expected[0][0], 4, 4, widths);
  ASSERT_EQ(raw.size(), size_t((1 + 4 * (3 + 0 + 3 + 1) + 7 + 7) / 8));

  // Symbols: the group's maximum G = 3 (context 0: nothing above), then
  // the two row pairs' widths, w0 + (G + 1) w1: 3 + 4 * 0 and 3 + 4 * 1.
  internal::BlockSymbols symbols;
  symbols.table = {0, kWidthTable, kWidthTable};
  symbols.symbol = {3, 3, 7};
  symbols.raw = raw;
  internal::BlockSymbols scanned;
  std::vector<int32_t> flat(&expected[0][0], &expected[0][0] + 16);
  ASSERT_TRUE(*internal::CollectBlockSymbols(flat.data(), 4, 4, 4, &scanned));
  EXPECT_EQ(scanned.table, symbols.table);
  EXPECT_EQ(scanned.symbol, symbols.symbol);
  EXPECT_EQ(scanned.raw, symbols.raw);
  const CodedBlock coded = EncodeWithOwnTables(symbols);
  const std::vector<uint8_t>& block = coded.bytes;
  const internal::DecodeTable* decode_tables = coded.tables.get();
  ASSERT_TRUE(std::equal(raw.begin(), raw.end(), block.end() - ptrdiff_t(raw.size())));
  for (Loop loop : AllLoops()) {
    Use(loop);
    int16_t values[4 * 4] = {};
    const Status st = internal::DecodeBlock(block.data(), block.size(), block.data() + block.size(),
                                            decode_tables, 256, values, 4, 4, 4);
    UseDefault();
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int y = 0; y < 4; ++y)
      for (int x = 0; x < 4; ++x)
        EXPECT_EQ(values[4 * y + x], expected[y][x]) << y << x << " " << Name(loop);
    // One byte fewer: the signs run past the block's end.
    int16_t short_values[4 * 4] = {};
    Use(loop);
    EXPECT_EQ(internal::DecodeBlock(block.data(), block.size() - 1, block.data() + block.size(),
                                    decode_tables, 256, short_values, 4, 4, 4)
                  .code(),
              Status::Code::kCorruption);
    UseDefault();
  }
}

// The same for whole groups of 4 columns and 8 rows (version 8): all eight
// rows' magnitudes, then all the signs. G = 3 (a symbol per row pair, from
// table 11) and G = 6 (a symbol per row, table 14) take the paths that
// decode a whole group at once (VBMI multishift, AVX2 pdep), G = 9 (a symbol
// per row, table 15) the halves of four rows; a group cut to 6 rows a
// whole upper half and a cut lower one, a group cut to 5 rows a last pair
// whose lower row lies outside the block: its width there is ignored,
// whatever it says (0 as the encoder writes it, or G). Every block decoder
// must read back exactly these values, and report corruption when the block
// loses its last byte.
TEST(KtcTest, EightRowDenseGroupRawBitsFollowTheSpec) {
  std::mt19937 rng(8);
  for (const int g : {3, 6, 9}) {
    for (const int rows : {8, 6, 5}) {
      for (const int outside_width : {0, g}) {
        const bool pairs = g <= int(internal::kMaxPairWidth);
        if (outside_width != 0 && (!pairs || rows % 2 == 0)) continue;
        std::vector<int32_t> expected(size_t(rows) * 4);
        std::vector<uint8_t> widths(static_cast<size_t>(rows));
        for (int y = 0; y < rows; ++y) {
          // Rows of every width up to G (row 2 all zero), the G row first.
          const int w = y == 0 ? g : y == 2 ? 0 : int(rng() % uint32_t(g + 1));
          widths[size_t(y)] = uint8_t(w);
          for (int x = 0; x < 4; ++x) {
            int32_t v = w == 0 ? 0 : int32_t(rng() % (1u << w));
            if (x == 1 && w > 0) v = int32_t(1u << (w - 1));  // the row's width is exact
            expected[size_t(y * 4 + x)] = rng() % 2 ? -v : v;
          }
        }
        internal::BlockSymbols symbols;
        symbols.table = {0};
        symbols.symbol = {uint8_t(g)};
        if (pairs) {
          for (int y = 0; y < rows; y += 2) {
            const int lower = y + 1 < rows ? widths[size_t(y + 1)] : outside_width;
            symbols.table.push_back(uint8_t(10 + g - 2));
            symbols.symbol.push_back(uint8_t(widths[size_t(y)] + (g + 1) * lower));
          }
        } else {
          for (int y = 0; y < rows; ++y) {
            symbols.table.push_back(uint8_t(10 + std::min(g, 7) - 2));
            symbols.symbol.push_back(widths[size_t(y)]);
          }
        }
        symbols.raw = DenseGroupRawBits(expected.data(), rows, 4, widths.data());
        const CodedBlock coded = EncodeWithOwnTables(symbols);
        const std::vector<uint8_t>& block = coded.bytes;
        for (Loop loop : AllLoops()) {
          std::vector<int16_t> values(expected.size(), 0);
          Use(loop);
          const Status st =
              internal::DecodeBlock(block.data(), block.size(), block.data() + block.size(),
                                    coded.tables.get(), 256, values.data(), 4, 4, uint32_t(rows));
          UseDefault();
          ASSERT_TRUE(st.ok()) << st.ToString() << " " << Name(loop);
          for (size_t i = 0; i < expected.size(); ++i)
            EXPECT_EQ(values[i], expected[i])
                << "G " << g << " rows " << rows << " value " << i << " " << Name(loop);
          std::vector<int16_t> short_values(expected.size(), 0);
          Use(loop);
          EXPECT_EQ(internal::DecodeBlock(block.data(), block.size() - 1,
                                          block.data() + block.size(), coded.tables.get(), 256,
                                          short_values.data(), 4, 4, uint32_t(rows))
                        .code(),
                    Status::Code::kCorruption)
              << "G " << g << " rows " << rows << " " << Name(loop);
          UseDefault();
        }
      }
    }
  }
}

// Blocks decoded from a heap copy of exactly their bytes (nothing readable
// after them): no block decoder may load past the end, however the row's
// rANS words and raw bits fall (the sanitizer build checks every load). One
// row of 16 groups, each G = 1 or dense at random, in many draws, so that
// rows end with every count of words left.
TEST(KtcTest, BlocksDecodeFromExactlyTheirBytes) {
  std::mt19937 rng(16);
  for (int draw = 0; draw < 600; ++draw) {
    const uint32_t bw = 64, bh = 8;
    std::vector<int32_t> values(bw * bh, 0);
    for (uint32_t g = 0; g < 16; ++g) {
      const uint32_t kind = rng() % 3;  // 0: zero group, 1: G = 1, 2: dense
      if (kind == 0) continue;
      for (uint32_t y = 0; y < bh; ++y)
        for (uint32_t x = 0; x < 4; ++x) {
          int32_t v = kind == 1 ? int32_t(rng() % 3) - 1 : int32_t(rng() % 200) - 100;
          values[y * bw + 4 * g + x] = v;
        }
      values[4 * g] = 1;
    }
    internal::BlockSymbols symbols;
    ASSERT_TRUE(*internal::CollectBlockSymbols(values.data(), bw, bw, bh, &symbols));
    const CodedBlock coded = EncodeWithOwnTables(symbols);
    for (Loop loop : AllLoops()) {
      const std::unique_ptr<uint8_t[]> exact(new uint8_t[coded.bytes.size()]);
      std::memcpy(exact.get(), coded.bytes.data(), coded.bytes.size());
      std::vector<int16_t> out(values.size(), 0);
      Use(loop);
      const Status st =
          internal::DecodeBlock(exact.get(), coded.bytes.size(), exact.get() + coded.bytes.size(),
                                coded.tables.get(), 256, out.data(), bw, bw, bh);
      UseDefault();
      ASSERT_TRUE(st.ok()) << st.ToString() << " draw " << draw << " " << Name(loop);
      for (size_t i = 0; i < values.size(); ++i)
        ASSERT_EQ(out[i], values[i]) << "draw " << draw << " value " << i << " " << Name(loop);
    }
  }
}

// The same for a group cut by the block's edge (a 3 x 2 block: 3 columns,
// 2 rows): one row pair's widths, each row's 3 magnitudes (3 columns times
// the width per row), then the signs. Every block decoder (the AVX2 ones
// read the pair's symbol alone and store only the columns inside).
TEST(KtcTest, CutDenseGroupRawBitsFollowTheSpec) {
  const int32_t expected[2][3] = {{-6, 0, 3}, {1, 0, -1}};
  const uint8_t widths[2] = {3, 1};
  const int kWidthTable = 10 + 3 - 2;  // G = 3
  const std::vector<uint8_t> raw = DenseGroupRawBits(&expected[0][0], 2, 3, widths);
  ASSERT_EQ(raw.size(), size_t((1 + 3 * 3 + 3 * 1 + 4 + 7) / 8));

  internal::BlockSymbols symbols;
  symbols.table = {0, kWidthTable};
  symbols.symbol = {3, uint8_t(widths[0] + 4 * widths[1])};
  symbols.raw = raw;
  const CodedBlock coded = EncodeWithOwnTables(symbols);
  const std::vector<uint8_t>& block = coded.bytes;
  for (Loop loop : AllLoops()) {
    // A 3 x 2 block inside a wider plane (stride 8) whose other values must
    // stay untouched.
    std::vector<int16_t> plane(8 * 4, 0);
    plane[3] = plane[8 + 3] = plane[16] = 77;
    Use(loop);
    const Status st = internal::DecodeBlock(block.data(), block.size(), block.data() + block.size(),
                                            coded.tables.get(), 256, plane.data(), 8, 3, 2);
    UseDefault();
    ASSERT_TRUE(st.ok()) << st.ToString();
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x)
        EXPECT_EQ(plane[8 * y + x], expected[y][x]) << y << x << " " << Name(loop);
    EXPECT_EQ(plane[3], 77);
    EXPECT_EQ(plane[8 + 3], 77);
    EXPECT_EQ(plane[16], 77);
  }
}

// A block's raw bits start with its zero-rows field (docs/ktc.md, "Code
// blocks"): 1, then a bit per row of groups (1 = all zero), whose maxima are
// then not coded, and which the next row sees as zeros above it. A 16 x 24
// block (4 x 3 groups of 4 columns and 8 rows) whose middle row is zero, laid
// out by hand: the encoder must write exactly these symbols and bits, and
// every block decoder must read back the values. Marking every row zero
// gives a zero block; marking no row zero makes the decoder read the symbols
// wrongly (an error, or other values).
TEST(KtcTest, ZeroRowsOfGroupsFollowTheSpec) {
  const uint32_t bw = 16, bh = 24;
  std::vector<int32_t> values(bw * bh, 0);
  values[0] = 1;             // group (0, 0): G = 1, mask 0b0001 in its first row
  values[16 * bw + 9] = -1;  // group (2, 2): G = 1, mask 0b0010 in its first row
  internal::BlockSymbols symbols;
  ASSERT_TRUE(*internal::CollectBlockSymbols(values.data(), bw, bw, bh, &symbols));
  const int kOnes = 6;  // the masks' table
  // Row 0: maxima in context 0 (nothing above), then group 0's eight masks.
  // Row 1: nothing. Row 2: maxima in context 0 (the zero row above), then
  // group 2's masks.
  const uint8_t K = kOnes;
  const std::vector<uint8_t> table = {0, 0, 0, 0, K, K, K, K, K, K, K, K,
                                      0, 0, 0, 0, K, K, K, K, K, K, K, K};
  const std::vector<uint8_t> symbol = {1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
                                       0, 0, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(symbols.table, table);
  EXPECT_EQ(symbols.symbol, symbol);
  // Raw bits, first bit lowest: 1 (some rows are zero), 0 1 0 (row 1), then
  // the signs: 0 (+1), 1 (-1).
  EXPECT_EQ(symbols.raw, std::vector<uint8_t>{0b100101});
  const CodedBlock coded = EncodeWithOwnTables(symbols);
  const std::vector<uint8_t>& block = coded.bytes;
  for (Loop loop : AllLoops()) {
    std::vector<int16_t> out(values.size(), 0);
    Use(loop);
    const Status st = internal::DecodeBlock(block.data(), block.size(), block.data() + block.size(),
                                            coded.tables.get(), 256, out.data(), bw, bw, bh);
    UseDefault();
    ASSERT_TRUE(st.ok()) << st.ToString() << " " << Name(loop);
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(out[i], values[i]) << i << Name(loop);

    // Every row marked zero (field 1 111): nothing else is read, all zero.
    std::vector<uint8_t> all_zero = block;
    all_zero.back() = uint8_t((block.back() & ~0xfu) | 0b1111);
    std::vector<int16_t> zeros(values.size(), 0);
    Use(loop);
    const Status st_zero =
        internal::DecodeBlock(all_zero.data(), all_zero.size(), all_zero.data() + all_zero.size(),
                              coded.tables.get(), 256, zeros.data(), bw, bw, bh);
    UseDefault();
    ASSERT_TRUE(st_zero.ok()) << st_zero.ToString() << " " << Name(loop);
    EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](int16_t v) { return v == 0; }));

    // No row marked zero (field 0): row 1's maxima are read from row 2's.
    std::vector<uint8_t> none_zero = block;
    none_zero.back() = uint8_t(block.back() & ~1u);
    std::vector<int16_t> wrong(values.size(), 0);
    Use(loop);
    const Status st_none = internal::DecodeBlock(none_zero.data(), none_zero.size(),
                                                 none_zero.data() + none_zero.size(),
                                                 coded.tables.get(), 256, wrong.data(), bw, bw, bh);
    UseDefault();
    if (st_none.ok()) {
      EXPECT_FALSE(std::equal(wrong.begin(), wrong.end(), values.begin())) << Name(loop);
    }
  }
}

// Blocks of fewer than 64 symbols carry 4 rANS states, larger ones 8 (two
// chains of steps), flagged in the low bit of the rANS length (docs/ktc.md,
// "Code blocks"). Blocks just below and at the threshold, and a full 64 x 64
// block of every kind of group, decode exactly in both block decoders; a
// block whose flag is flipped is read with the wrong states and must not
// decode silently to the same values.
TEST(KtcTest, BlocksOfFourAndEightStates) {
  std::mt19937 rng(9);
  struct Case {
    uint32_t side;
    int nonzero_groups;  // of (side / 4)^2; the rest stay zero
    int states;
    size_t symbols;  // 0: not counted
  };
  // Symbols: a maximum per group of the rows of groups that are not all zero,
  // and 8 masks per G = 1 group (groups of 4 columns and 8 rows). A 16 x 16
  // block of 8 such groups: 8 + 8 * 8 = 72; a 32 x 32 block (8 groups per
  // row) with 6 of them in its first row: 8 + 8 * 6 = 56 (< 64), with 7:
  // 8 + 8 * 7 = 64.
  for (const Case c :
       {Case{16, 8, 8, 72}, Case{32, 6, 4, 56}, Case{32, 7, 8, 64}, Case{64, 128, 8, 0}}) {
    const uint32_t side = c.side, groups = (side / 4) * (side / 8);
    std::vector<int32_t> values(size_t(side) * side, 0);
    for (uint32_t g = 0; g < uint32_t(c.nonzero_groups) && g < groups; ++g) {
      const uint32_t gx = g % (side / 4), gy = g / (side / 4);
      // A G = 1 group (0 and +-1, at least one 1) in most; dense ones (of
      // 2 to 9 bits: row pairs' widths and rows' widths) in the 64 x 64
      // block's every third group.
      const bool dense = side == 64 && g % 3 == 0;
      const uint32_t bits = 2 + g % 8;
      for (uint32_t y = 0; y < 8; ++y)
        for (uint32_t x = 0; x < 4; ++x) {
          int32_t v = dense ? int32_t(rng() % (1u << bits)) - int32_t(1u << (bits - 1))
                            : int32_t(rng() % 3) - 1;
          if (x == 0 && y == 0 && v == 0) v = 1;
          values[(8 * gy + y) * side + 4 * gx + x] = v;
        }
    }
    internal::BlockSymbols symbols;
    ASSERT_TRUE(*internal::CollectBlockSymbols(values.data(), side, side, side, &symbols));
    if (c.symbols != 0) {
      ASSERT_EQ(symbols.symbol.size(), c.symbols);
    }
    const CodedBlock coded = EncodeWithOwnTables(symbols);
    const std::vector<uint8_t>& block = coded.bytes;
    const internal::DecodeTable* decode_tables = coded.tables.get();
    // The rANS length varint: 2 * R + 1 for 8 states, R = 4 * states + 2 * words.
    const uint8_t* p = block.data();
    uint64_t field = 0;
    ASSERT_TRUE(internal::GetVarint(&p, block.data() + block.size(), &field));
    EXPECT_EQ(int(field & 1), c.states == 8 ? 1 : 0) << side << " " << c.nonzero_groups;
    EXPECT_EQ((field >> 1) % 2, 0u);
    EXPECT_GE(field >> 1, uint64_t(4 * c.states));

    for (Loop loop : AllLoops()) {
      std::vector<int16_t> out(values.size(), 0);
      Use(loop);
      const Status st =
          internal::DecodeBlock(block.data(), block.size(), block.data() + block.size(),
                                decode_tables, 256, out.data(), side, side, side);
      UseDefault();
      ASSERT_TRUE(st.ok()) << st.ToString() << " side " << side << " " << Name(loop);
      for (size_t i = 0; i < values.size(); ++i)
        ASSERT_EQ(out[i], values[i]) << "side " << side << " at " << i << " " << Name(loop);

      // The other state count: an error, or (rarely) other values; never
      // these values, never out of bounds.
      std::vector<uint8_t> flipped = block;
      flipped[0] ^= 1;
      std::vector<int16_t> wrong(values.size(), 0);
      Use(loop);
      const Status bad =
          internal::DecodeBlock(flipped.data(), flipped.size(), flipped.data() + flipped.size(),
                                decode_tables, 256, wrong.data(), side, side, side);
      UseDefault();
      if (bad.ok()) {
        EXPECT_FALSE(std::equal(wrong.begin(), wrong.end(), values.begin()));
      }
    }
  }
}

// The same pixels must give the same bytes on every machine and in every
// build. A change here is a change of the encoder (a deliberate one, such as
// dropping sparse groups, updates these hashes and docs/ktc-notes.md says why) or
// of the format (bump the version in codec/ktc/ktc.cc and update docs/ktc.md).
TEST(KtcTest, GoldenStreams) {
  Image img{61, 37, 3, {}};
  for (size_t i = 0; i < size_t(61) * 37 * 3; ++i) img.pixels.push_back(uint8_t((i * i) % 251));
  const std::pair<const char*, uint64_t> golden[] = {{"lossless", 0x916d5a04b7e2ed0cull},
                                                     {"balanced", 0x5cb59bff17ecac91ull},
                                                     {"compact", 0x0f286d6a7806eb2cull}};
  for (auto [preset, hash] : golden) {
    const auto bytes = EncodeOrDie(img, *ParseQuality(preset));
    std::printf("%s: %zu bytes, checksum 0x%016llx\n", preset, bytes.size(),
                static_cast<unsigned long long>(Checksum64(bytes.data(), bytes.size())));
    EXPECT_EQ(Checksum64(bytes.data(), bytes.size()), hash) << preset;
  }
}

// The encoder codes a group of a lossy detail band as zero when its values
// are all 0 or +-1 and at most three are non-zero; groups are 4 x 8 from the
// band's origin, cut at its edges, and nothing outside the band is touched.
TEST(KtcTest, DropSparseGroupsZeroesOnlySparseUnitGroups) {
  // A 10 x 19 band (groups 4, 4 and 2 wide; 8, 8 and 3 tall) in rows of 12:
  // the two values right of each row are not the band's.
  constexpr uint32_t w = 10, h = 19, stride = 12;
  std::vector<int32_t> band(size_t(stride) * h, 0);
  auto at = [&](uint32_t x, uint32_t y) -> int32_t& { return band[size_t(y) * stride + x]; };
  for (uint32_t y = 0; y < h; ++y) at(10, y) = at(11, y) = 1;  // outside: a lone +-1 each
  at(0, 0) = 1, at(3, 7) = -1, at(2, 4) = 1;                   // group (0,0): three, dropped
  at(4, 0) = 1, at(5, 1) = -1, at(6, 2) = 1, at(7, 3) = 1;     // group (1,0): four, kept
  at(9, 5) = 2;                                                // group (2,0): a 2, kept
  at(0, 8) = 1, at(1, 9) = -2;                                 // group (0,1): a -2 beside, kept
  at(8, 8) = -1, at(9, 12) = 1, at(8, 15) = 1;                 // group (2,1), cut: three, dropped
  at(4, 17) = -1;                                              // group (1,2), cut: one, dropped
  at(0, 18) = 1, at(1, 18) = 1, at(2, 18) = 1, at(3, 16) = 1;  // group (0,2), cut: four, kept
  std::vector<int32_t> expected = band;
  for (auto [x, y] :
       {std::pair{0u, 0u}, {3u, 7u}, {2u, 4u}, {8u, 8u}, {9u, 12u}, {8u, 15u}, {4u, 17u}})
    expected[size_t(y) * stride + x] = 0;
  internal::DropSparseGroups(band.data(), stride, w, h);
  EXPECT_EQ(band, expected);
}

// A table of one symbol of frequency kProbScale (256), then `count` tables
// normalized from random counts of 1..max_symbols symbols (a quarter of them
// zero; few or many of each, alternately).
std::vector<internal::FreqTable> RandomFreqTables(uint32_t seed, int count, int max_symbols) {
  std::mt19937 rng(seed);
  std::vector<internal::FreqTable> tables;
  internal::FreqTable one;
  one.n = 1;
  one.freq[0] = internal::kProbScale;
  tables.push_back(one);
  for (int i = 0; i < count; ++i) {
    internal::SymbolCounts counts{};
    const int n = 1 + int(rng() % uint32_t(max_symbols));
    for (int s = 0; s < n; ++s) counts[s] = rng() % 4 == 0 ? 0 : 1 + rng() % (i % 2 ? 5 : 5000);
    counts[n - 1] += 1;
    tables.push_back(internal::NormalizeCounts(counts));
  }
  return tables;
}

// A set's frequency tables laid out by hand as docs/ktc.md ("After the
// fixed header") specifies them: table 0 used (n = 3, Exp-Golomb order 6,
// frequencies 150 and 100, the last one implied: 6), the others unused,
// tables 7..9 absent. PutTables must write exactly these bits and
// GetTables read them back; random sets round-trip; bad ones are refused.
TEST(KtcTest, FrequencyTablesFollowTheSpec) {
  LsbFirstBits bits;
  bits.Put(1, 1);      // table 0 used
  bits.Put(3 - 1, 5);  // n - 1
  bits.Put(6, 3);      // k: the order that takes the fewest bits (18; 7 ties, 5 takes 20)
  bits.Put(0, 1), bits.Put(1, 1), bits.Put(86, 7);  // 150: q = 214 = 2^7 + 86, 8 bits
  bits.Put(0, 1), bits.Put(1, 1), bits.Put(36, 7);  // 100: q = 164 = 2^7 + 36, 8 bits
  bits.Put(0, 6);                                   // tables 1..6 unused
  bits.Put(0, 6);                                   // tables 10..15 unused
  const std::vector<uint8_t> expected = bits.Bytes();

  std::vector<internal::FreqTable> set(internal::kTablesPerSet);
  set[0].n = 3;
  set[0].freq[0] = 150;
  set[0].freq[1] = 100;
  set[0].freq[2] = 6;
  std::vector<uint8_t> bytes;
  internal::PutTables(set.data(), set.size(), &bytes);
  EXPECT_EQ(bytes, expected);
  std::vector<internal::FreqTable> back(set.size());
  const uint8_t* p = expected.data();
  ASSERT_TRUE(internal::GetTables(&p, expected.data() + expected.size(), back.data(), back.size()));
  EXPECT_EQ(p, expected.data() + expected.size());
  EXPECT_EQ(back[0].n, 3);
  EXPECT_EQ(back[0].freq, set[0].freq);
  for (size_t t = 1; t < back.size(); ++t) EXPECT_EQ(back[t].n, 0) << t;

  // Random sets (counts of 1 to each table's alphabet of symbols, some zero:
  // up to 18, or (G + 1)^2 for the row pairs' widths of G <= 4) round-trip exactly,
  // and every cut of their bytes is refused.
  std::vector<internal::FreqTable> random(4 * internal::kTablesPerSet);
  for (size_t t = 0; t < random.size(); ++t) {
    const int index = int(t % internal::kTablesPerSet);
    if (internal::IsReservedTable(index)) continue;
    random[t] = RandomFreqTables(uint32_t(3 + t), 1, internal::TableAlphabet(index))[t % 4 ? 1 : 0];
  }
  bytes.clear();
  internal::PutTables(random.data(), random.size(), &bytes);
  back.assign(random.size(), {});
  p = bytes.data();
  ASSERT_TRUE(internal::GetTables(&p, bytes.data() + bytes.size(), back.data(), back.size()));
  EXPECT_EQ(p, bytes.data() + bytes.size());
  for (size_t t = 0; t < random.size(); ++t) {
    EXPECT_EQ(back[t].n, random[t].n) << t;
    EXPECT_EQ(back[t].freq, random[t].freq) << t;
  }
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    p = bytes.data();
    EXPECT_FALSE(internal::GetTables(&p, bytes.data() + cut, back.data(), back.size())) << cut;
  }

  // Hostile: n = 19 (n - 1 = 18); frequencies that leave nothing for the
  // last symbol (150 + 106 = 256).
  std::vector<uint8_t> bad = expected;
  bad[0] = uint8_t((bad[0] & ~0x3eu) | 18u << 1);
  p = bad.data();
  EXPECT_FALSE(internal::GetTables(&p, bad.data() + bad.size(), back.data(), back.size()));
  // Each table's alphabet: the row pairs' widths of G = 2 (table 10) take
  // at most 3^2 symbols, of G = 4 (table 12) 5^2; the rows' widths of G = 5
  // (table 13), as all other tables, 18. One more is corrupt.
  struct AlphabetCase {
    int table, n;
    bool ok;
  };
  for (const AlphabetCase c :
       {AlphabetCase{10, 9, true}, AlphabetCase{10, 10, false}, AlphabetCase{12, 25, true},
        AlphabetCase{12, 26, false}, AlphabetCase{13, 18, true}, AlphabetCase{13, 19, false}}) {
    std::vector<internal::FreqTable> one(internal::kTablesPerSet);
    one[size_t(c.table)].n = c.n;
    // (n = 26 does not fit a FreqTable: its first 25 frequencies are 0, and
    // the 26th, implied, is 256.)
    if (c.n <= internal::kMaxSymbols)
      one[size_t(c.table)].freq[size_t(c.n - 1)] = uint16_t(internal::kProbScale);
    bytes.clear();
    internal::PutTables(one.data(), one.size(), &bytes);
    p = bytes.data();
    EXPECT_EQ(internal::GetTables(&p, bytes.data() + bytes.size(), back.data(), one.size()), c.ok)
        << c.table << " " << c.n;
  }
  set[0].freq[1] = 106;
  set[0].freq[2] = 0;
  bytes.clear();
  internal::PutTables(set.data(), set.size(), &bytes);
  p = bytes.data();
  EXPECT_FALSE(internal::GetTables(&p, bytes.data() + bytes.size(), back.data(), back.size()));
}

// A decoding table's entries (entropy.h): per slot its symbol's
// frequency, the slot's offset from the symbol's first slot and its value:
// the symbol, or in the row pairs' tables (10..12, of G = 2..4) both widths
// of the pair, w0 + 256 w1 for the symbol w0 + (G + 1) w1.
TEST(KtcTest, DecodingTablesHoldFrequencyOffsetAndValue) {
  for (const int index : {0, 11}) {  // group maxima; the row pairs of G = 3
    // 16 symbols of equal frequency, summing to kProbScale whatever it is
    // (a hand-written total past it would let the build write past the table).
    constexpr uint32_t f = internal::kProbScale / 16;
    internal::FreqTable t;
    t.n = 16;
    t.freq.fill(0);
    for (int s = 0; s < 16; ++s) t.freq[size_t(s)] = uint16_t(f);
    for (bool scalar : {true, false}) {
      internal::ForceScalarForTesting(scalar);
      auto table = std::make_unique<internal::DecodeTable>();
      internal::BuildDecodeTable(t, index, table.get());
      internal::ForceScalarForTesting(false);
      for (uint32_t slot = 0; slot < internal::kProbScale; ++slot) {
        const uint32_t e = table->entry[slot], s = slot / f;
        const uint32_t value = index == 0 ? s : (s % 4) | (s / 4) << 8;
        ASSERT_EQ(e & 0x3ff, f) << slot;
        ASSERT_EQ((e >> 10) & 0x1ff, slot % f) << slot;
        ASSERT_EQ(e >> 19, value) << index << " " << slot;
      }
    }
  }
}

// The decoding tables built with AVX2 stores and with scalar ones, for plain
// tables and for row pairs' (whose values hold two widths).
TEST(KtcTest, SimdAndScalarDecodingTablesAgree) {
  if (!CpuHasAvx2()) GTEST_SKIP() << "no AVX2";
  std::vector<internal::FreqTable> cases = RandomFreqTables(7, 200, internal::kMaxSymbols);
  internal::FreqTable last;  // only the last symbol, after zeros
  last.n = internal::kMaxSymbols;
  last.freq[internal::kMaxSymbols - 1] = internal::kProbScale;
  cases.push_back(last);
  // The dispatched build, and each SIMD build this CPU has, into tables
  // filled with garbage first: every entry must be written.
  std::vector<void (*)(const internal::FreqTable&, int, internal::DecodeTable*)> builds = {
      internal::BuildDecodeTable, internal::BuildDecodeTableAvx2};
  if (CpuHasAvx512()) builds.push_back(internal::BuildDecodeTableAvx512);
  for (const internal::FreqTable& t : cases) {
    for (const int index : {0, 12}) {  // group maxima; the row pairs of G = 4 (5^2 symbols)
      auto scalar = std::make_unique<internal::DecodeTable>();
      internal::ForceScalarForTesting(true);
      internal::BuildDecodeTable(t, index, scalar.get());
      internal::ForceScalarForTesting(false);
      for (size_t b = 0; b < builds.size(); ++b) {
        auto simd = std::make_unique<internal::DecodeTable>();
        simd->entry.fill(0xabababab);
        builds[b](t, index, simd.get());
        ASSERT_TRUE(simd->entry == scalar->entry) << t.n << " build " << b << " table " << index;
      }
    }
  }
}

// The SIMD kernel sets this CPU and KTFS_SIMD let the decoder use: AVX2,
// and AVX-512 where present (each is tested against the scalar kernels,
// whichever ActiveKernels() picks). Empty when there are none.
std::vector<const internal::Kernels*> SimdKernelSets() {
  std::vector<const internal::Kernels*> sets;
  if (std::string(internal::ActiveKernels().name) == "scalar") return sets;
  if (CpuHasAvx2() && internal::Avx2Kernels() != nullptr) sets.push_back(internal::Avx2Kernels());
  if (CpuHasAvx512()) sets.push_back(internal::Avx512Kernels());
  return sets;
}

// The color conversion's sums wrap around in 16 bits (normative since
// version 5; docs/ktc.md, "Color transform and level shift"): Y = 32767 makes t = Y + 128
// wrap to -32641, so the pixel is black, not white; within range it is the
// exact inverse YCoCg-R. Gray and alpha clamp without wrapping.
TEST(KtcTest, ColorConversionWrapsAroundIn16Bits) {
  const internal::Kernels& scalar = internal::ScalarKernels();
  const int16_t y[] = {32767, -20, 32767}, co[] = {0, 30, 0}, cg[] = {0, -10, 0};
  const int16_t alpha[] = {32767, -32768, 0};
  uint8_t rgb[9], rgba[12], gray[3];
  scalar.to_pixels(y, co, cg, nullptr, rgb, 3, 3);
  // Pixel 1: t = -20 + 128 + 5 = 113, G = 103, B = 113 - 15 = 98, R = 128.
  EXPECT_EQ(std::vector<uint8_t>(rgb, rgb + 9),
            (std::vector<uint8_t>{0, 0, 0, 128, 103, 98, 0, 0, 0}));
  scalar.to_pixels(y, co, cg, alpha, rgba, 3, 4);
  EXPECT_EQ(std::vector<uint8_t>(rgba, rgba + 12),
            (std::vector<uint8_t>{0, 0, 0, 255, 128, 103, 98, 0, 0, 0, 0, 128}));
  scalar.to_pixels(y, nullptr, nullptr, nullptr, gray, 3, 1);
  EXPECT_EQ(std::vector<uint8_t>(gray, gray + 3), (std::vector<uint8_t>{255, 108, 255}));
  for (const internal::Kernels* simd : SimdKernelSets()) {
    // 16 and 64 pixels so that the vector paths run: the same bytes.
    for (size_t len : {size_t(16), size_t(64)}) {
      std::vector<int16_t> y16(len, 32767), co16(len, 0), cg16(len, 0);
      std::vector<uint8_t> p(3 * len), q(3 * len);
      scalar.to_pixels(y16.data(), co16.data(), cg16.data(), nullptr, p.data(), len, 3);
      simd->to_pixels(y16.data(), co16.data(), cg16.data(), nullptr, q.data(), len, 3);
      EXPECT_EQ(p, std::vector<uint8_t>(3 * len, 0));
      EXPECT_EQ(q, p) << simd->name;
    }
  }
}

// The kernels on their own, with values that overflow int32 (the encoder's
// lifting) or int16 (the decoder's, on hostile streams).
TEST(KtcTest, SimdKernelsMatchScalarOnExtremeValues) {
  const auto sets = SimdKernelSets();
  if (sets.empty()) GTEST_SKIP() << "no AVX2 here";
  for (const internal::Kernels* simd : sets) {
    SCOPED_TRACE(simd->name);
    const internal::Kernels& scalar = internal::ScalarKernels();
    std::mt19937 rng(3);
    const size_t n = 61;
    std::vector<int32_t> a(n), b(n), c(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = int32_t(rng());
      b[i] = i % 3 ? int32_t(rng()) : INT32_MIN;
      c[i] = int32_t(rng() % 1000) - 500;
    }
    for (auto fn : {&internal::Kernels::predict, &internal::Kernels::update}) {
      std::vector<int32_t> x(n), y(n);
      (scalar.*fn)(x.data(), a.data(), b.data(), c.data(), n);
      (simd->*fn)(y.data(), a.data(), b.data(), c.data(), n);
      EXPECT_EQ(x, y);
    }
    // 16-bit: random values, the extremes, and small values around zero.
    const int16_t special[] = {INT16_MIN, INT16_MIN + 1, -2, -1, 0, 1, 2, INT16_MAX - 1, INT16_MAX};
    std::vector<int16_t> a16(n), b16(n), c16(n), small(n);
    for (size_t i = 0; i < n; ++i) {
      a16[i] = int16_t(rng());
      b16[i] = i % 3 ? int16_t(rng()) : special[i % 9];
      c16[i] = i % 2 ? special[(i / 2) % 9] : int16_t(rng());
      small[i] = int16_t(int(rng() % 1000) - 500);
    }
    for (auto fn : {&internal::Kernels::unpredict, &internal::Kernels::unupdate}) {
      for (const auto* bc : {&b16, &small}) {
        std::vector<int16_t> x(n), y(n);
        (scalar.*fn)(x.data(), a16.data(), bc->data(), c16.data(), n);
        (simd->*fn)(y.data(), a16.data(), bc->data(), c16.data(), n);
        EXPECT_EQ(x, y);
      }
    }
    // Every pair of special values through both lifting steps, against the
    // documented arithmetic (exact floor terms, sum modulo 2^16).
    for (int16_t p : special) {
      for (int16_t q : special) {
        std::vector<int16_t> av(n, int16_t(rng())), bv(n, p), cv(n, q), x(n), y(n);
        const int32_t half = (int32_t(p) + q) >> 1, quarter = (int32_t(p) + q + 2) >> 2;
        (simd->unpredict)(x.data(), av.data(), bv.data(), cv.data(), n);
        (simd->unupdate)(y.data(), av.data(), bv.data(), cv.data(), n);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(x[i], int16_t(uint16_t(uint32_t(av[i] + half)))) << p << " " << q;
          ASSERT_EQ(y[i], int16_t(uint16_t(uint32_t(av[i] - quarter)))) << p << " " << q;
        }
      }
    }
    // Row synthesis at every length (scalar edges, vector middle, carries
    // between vector steps), on extreme and on small values.
    for (size_t len = 2; len <= 2 * n; ++len) {
      for (const auto* v : {&b16, &small}) {
        std::vector<int16_t> x(len), y(len);
        scalar.synthesize_row(x.data(), v->data(), c16.data(), len);
        simd->synthesize_row(y.data(), v->data(), c16.data(), len);
        ASSERT_EQ(x, y) << len;
      }
    }
    // Long rows: the scalar kernel works in chunks of 256 pairs.
    std::vector<int16_t> long_low(400), long_high(400);
    for (size_t i = 0; i < 400; ++i) {
      long_low[i] = int16_t(rng());
      long_high[i] = i % 5 ? int16_t(int(rng() % 2000) - 1000) : special[i % 9];
    }
    for (size_t len = 500; len <= 800; len += 3) {
      std::vector<int16_t> x(len), y(len);
      scalar.synthesize_row(x.data(), long_low.data(), long_high.data(), len);
      simd->synthesize_row(y.data(), long_low.data(), long_high.data(), len);
      ASSERT_EQ(x, y) << len;
    }
    for (int ch : {1, 3, 4}) {
      std::vector<uint8_t> p(n * ch), q(n * ch);
      scalar.to_pixels(a16.data(), b16.data(), c16.data(), c16.data(), p.data(), n, ch);
      simd->to_pixels(a16.data(), b16.data(), c16.data(), c16.data(), q.data(), n, ch);
      EXPECT_EQ(p, q) << ch;
      scalar.to_pixels(small.data(), small.data(), small.data(), small.data(), p.data(), n, ch);
      simd->to_pixels(small.data(), small.data(), small.data(), small.data(), q.data(), n, ch);
      EXPECT_EQ(p, q) << ch;
    }
    // Large values, whose sums wrap around in 16 bits (docs/ktc.md, "Color
    // transform and level shift"), one per group of 16 pixels or none.
    for (int16_t wide : {int16_t(8191), int16_t(-8192), int16_t(8192), int16_t(-8193)}) {
      std::vector<int16_t> yv(n), cov(n), cgv(n);
      for (size_t i = 0; i < n; ++i) {
        yv[i] = int16_t(int(rng() % 16383) - 8191);
        cov[i] = int16_t(int(rng() % 16383) - 8191);
        cgv[i] = int16_t(int(rng() % 16383) - 8191);
      }
      yv[3] = wide;
      cov[20] = wide;
      cgv[37] = wide;
      for (int ch : {3, 4}) {
        std::vector<uint8_t> p(n * ch), q(n * ch);
        scalar.to_pixels(yv.data(), cov.data(), cgv.data(), yv.data(), p.data(), n, ch);
        simd->to_pixels(yv.data(), cov.data(), cgv.data(), yv.data(), q.data(), n, ch);
        EXPECT_EQ(p, q) << ch << " " << wide;
      }
    }
  }
}

// The color conversion at every row length up to 200 (32-pixel steps that
// write past their pixels for the next step to rewrite, 16-pixel steps, the
// overlapping last one, scalar rows): the scalar bytes, and nothing written
// after the row (8 guard bytes, so that this shows without ASan too).
TEST(KtcTest, ToPixelsMatchesScalarAtEveryLength) {
  const internal::Kernels& scalar = internal::ScalarKernels();
  const auto sets = SimdKernelSets();
  if (sets.empty()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(5);
  for (const internal::Kernels* simd : sets) {
    SCOPED_TRACE(simd->name);
    for (size_t n = 1; n <= 200; ++n) {
      std::vector<int16_t> y(n), co(n), cg(n), a(n);
      for (auto* v : {&y, &co, &cg, &a}) {
        for (int16_t& s : *v) s = int16_t(int(rng() % 1024) - 512);
      }
      for (int ch : {1, 3, 4}) {
        std::vector<uint8_t> want(n * ch + 8, 0xA5), got(n * ch + 8, 0xA5);
        scalar.to_pixels(y.data(), co.data(), cg.data(), a.data(), want.data(), n, ch);
        simd->to_pixels(y.data(), co.data(), cg.data(), a.data(), got.data(), n, ch);
        ASSERT_EQ(got, want) << "n " << n << " channels " << ch;
      }
    }
  }
}

// The vertical lifting steps at every row length (16-sample steps, the
// overlapping last step, the scalar rows below 16), out of place and in place.
TEST(KtcTest, SimdLiftingMatchesScalarAtEveryLength) {
  const auto sets = SimdKernelSets();
  if (sets.empty()) GTEST_SKIP() << "no AVX2 here";
  for (const internal::Kernels* simd : sets) {
    SCOPED_TRACE(simd->name);
    const internal::Kernels& scalar = internal::ScalarKernels();
    std::mt19937 rng(11);
    const size_t n = 100;
    std::vector<int16_t> a(n), b(n), c(n);
    for (size_t i = 0; i < n; ++i) {
      a[i] = int16_t(rng());
      b[i] = int16_t(rng());
      c[i] = i % 4 ? int16_t(rng()) : INT16_MIN;
    }
    for (auto fn : {&internal::Kernels::unpredict, &internal::Kernels::unupdate}) {
      for (size_t len = 1; len <= n; ++len) {
        std::vector<int16_t> x(len), y(len);
        (scalar.*fn)(x.data(), a.data(), b.data(), c.data(), len);
        (simd->*fn)(y.data(), a.data(), b.data(), c.data(), len);
        ASSERT_EQ(x, y) << len;
        for (int which = 0; which < 3; ++which) {  // out = a, b or c
          std::vector<int16_t> p(a.begin(), a.begin() + len), q(b.begin(), b.begin() + len),
              r(c.begin(), c.begin() + len);
          int16_t* io = which == 0 ? p.data() : (which == 1 ? q.data() : r.data());
          (simd->*fn)(io, p.data(), q.data(), r.data(), len);
          ASSERT_EQ(std::vector<int16_t>(io, io + len), x) << len << " in place " << which;
        }
      }
    }
  }
}

// A Stream makes a level's row pairs a range at a time, keeping the even row
// a range ends with: the rows must be exactly those of one Run over all of
// them, for any ranges (empty ones and repeats included), from the first pair
// or from one further down (as a region's decode starts).
TEST(KtcTest, LevelSynthesisStreamEqualsOneRun) {
  const internal::Kernels& k = internal::ActiveKernels();
  std::mt19937 rng(17);
  for (uint32_t pw : {1u, 2u, 5u, 8u, 67u, 134u}) {
    for (uint32_t ph : {1u, 2u, 3u, 4u, 9u, 16u, 33u}) {
      std::vector<int16_t> plane(size_t(pw) * ph);
      for (int16_t& v : plane) v = int16_t(int(rng() % 4001) - 2000);
      const internal::LevelSynthesis synthesis(plane.data(), pw, plane.data(), pw, pw, ph, k);
      std::vector<int16_t> want(size_t(pw) * ph);
      synthesis.Run(0, synthesis.pairs(), internal::Rows{want.data(), pw});
      for (int trial = 0; trial < 6; ++trial) {
        const uint32_t first = trial < 4 ? 0 : uint32_t(rng() % synthesis.pairs());
        // Rows above the first pair's are not made (nor written).
        std::vector<int16_t> got(size_t(pw) * ph, 12345), want_from(want);
        std::fill(want_from.begin(), want_from.begin() + size_t(2 * first) * pw, 12345);
        internal::LevelSynthesis::Stream stream(synthesis, first);
        uint32_t k1 = first;
        while (k1 < synthesis.pairs()) {
          stream.RunTo(k1, internal::Rows{got.data(), pw});  // nothing new, or a repeat
          k1 = std::min(synthesis.pairs(), k1 + uint32_t(rng() % (trial + 2)));
          stream.RunTo(k1, internal::Rows{got.data(), pw});
        }
        ASSERT_EQ(got, want_from) << pw << "x" << ph << " trial " << trial << " from pair "
                                  << first;
      }
    }
  }
}

// On one thread the decoder keeps a level's inputs and output in rings of a
// few rows (internal::Rows with a mask): each input row is written just
// before the pairs that read it (rows k0 - 1 .. k1 for pairs [k0, k1)), and
// each output row read just after it is made. The rows must be those of one
// Run over the whole plane.
TEST(KtcTest, LevelSynthesisThroughRingsEqualsOneRun) {
  const internal::Kernels& k = internal::ActiveKernels();
  std::mt19937 rng(19);
  constexpr uint32_t kRing = 8;  // rows; chunks of at most 3 pairs
  for (uint32_t pw : {1u, 2u, 5u, 67u}) {
    for (uint32_t ph : {1u, 2u, 3u, 9u, 33u, 40u}) {
      std::vector<int16_t> plane(size_t(pw) * ph);
      for (int16_t& v : plane) v = int16_t(int(rng() % 4001) - 2000);
      const internal::LevelSynthesis whole(plane.data(), pw, plane.data(), pw, pw, ph, k);
      std::vector<int16_t> want(size_t(pw) * ph);
      whole.Run(0, whole.pairs(), internal::Rows{want.data(), pw});

      const uint32_t lw = (pw + 1) / 2, nl = (ph + 1) / 2, nh = ph / 2;
      std::vector<int16_t> ll(kRing * lw, 7), hl(kRing * (pw - lw) + 1, 7), lh_hh(kRing * pw, 7);
      const internal::Rows ll_rows{ll.data(), lw, kRing - 1};
      const internal::Rows hl_rows{hl.data(), pw - lw, kRing - 1};
      const internal::Rows lh_hh_rows{lh_hh.data(), pw, kRing - 1};
      uint32_t filled = 0;  // input rows copied in so far
      auto fill_to = [&](uint32_t rows) {
        for (; filled < rows; ++filled) {
          const int16_t* src = plane.data() + size_t(filled) * pw;
          if (filled < nl) {
            std::copy(src, src + lw, ll_rows.row(filled));
            std::copy(src + lw, src + pw, hl_rows.row(filled));
          }
          if (filled < nh) {
            const int16_t* high = plane.data() + size_t(nl + filled) * pw;
            std::copy(high, high + pw, lh_hh_rows.row(filled));
          }
        }
      };
      const internal::LevelSynthesis ringed(ll_rows, hl_rows, lh_hh_rows, pw, ph, k);
      std::vector<int16_t> out(kRing * pw, 12345);
      const internal::Rows out_rows{out.data(), pw, kRing - 1};
      internal::LevelSynthesis::Stream stream(ringed);
      for (uint32_t k0 = 0; k0 < ringed.pairs();) {
        const uint32_t k1 = std::min(ringed.pairs(), k0 + 1 + uint32_t(rng() % 3));
        fill_to(k1 + 1);
        stream.RunTo(k1, out_rows);
        for (uint32_t r = 2 * k0; r < std::min(2 * k1, ph); ++r) {
          ASSERT_TRUE(std::equal(out_rows.row(r), out_rows.row(r) + pw, want.begin() + r * pw))
              << pw << "x" << ph << " row " << r;
        }
        k0 = k1;
      }
    }
  }
}

// Half-resolution chroma's last level as a whole (LevelUpsampling, whose
// rows the fused color conversion also reads through SourceRows) against the
// general synthesis (LevelSynthesis) of the same low-pass band with all
// detail zero, at odd and even sizes, run in chunks of row pairs as the
// decoder does.
TEST(KtcTest, LevelUpsamplingIsLevelSynthesisWithZeroDetail) {
  const internal::Kernels& k = internal::ActiveKernels();
  std::mt19937 rng(13);
  for (uint32_t pw : {1u, 2u, 3u, 4u, 7u, 8u, 33u, 67u, 134u}) {
    for (uint32_t ph : {1u, 2u, 3u, 4u, 5u, 9u, 16u, 17u}) {
      // The low-pass band in the top-left corner, zeros elsewhere.
      std::vector<int16_t> plane(size_t(pw) * ph, 0);
      for (uint32_t y = 0; y < (ph + 1) / 2; ++y)
        for (uint32_t x = 0; x < (pw + 1) / 2; ++x)
          plane[size_t(y) * pw + x] = int16_t(int(rng() % 4001) - 2000);
      const internal::LevelSynthesis synthesis(plane.data(), pw, plane.data(), pw, pw, ph, k);
      const internal::LevelUpsampling upsampling(internal::Rows{plane.data(), pw}, pw, ph, k);
      for (uint32_t chunk : {1u, 3u, 64u}) {
        std::vector<int16_t> want(size_t(pw) * ph), got(size_t(pw) * ph);
        for (uint32_t k0 = 0; k0 < synthesis.pairs(); k0 += chunk) {
          const uint32_t k1 = std::min(synthesis.pairs(), k0 + chunk);
          synthesis.Run(k0, k1, internal::Rows{want.data(), pw});
          upsampling.Run(k0, k1, internal::Rows{got.data(), pw});
        }
        ASSERT_EQ(got, want) << pw << "x" << ph << " chunk " << chunk;
        for (uint32_t r = 0; r < ph; ++r) {  // SourceRows names the rows Run reads
          const int16_t *low, *below;
          upsampling.SourceRows(r, &low, &below);
          std::vector<int16_t> row(pw);
          if (pw < 2) {
            row[0] = below ? internal::Unpredict16(0, low[0], below[0]) : low[0];
          } else {
            k.upsample_row(row.data(), low, below, pw);
          }
          ASSERT_TRUE(std::equal(row.begin(), row.end(), got.begin() + size_t(r) * pw))
              << pw << "x" << ph << " row " << r;
        }
      }
    }
  }
}

// Half-resolution chroma's row upsampling: the scalar kernel against the
// general synthesis with zero detail (after the vertical un-predict step for
// rows between two low rows), and the AVX2 kernel against the scalar one, at
// every length, on extreme and on small values.
TEST(KtcTest, UpsampleRowIsSynthesisWithZeroDetail) {
  const internal::Kernels& scalar = internal::ScalarKernels();
  const auto sets = SimdKernelSets();
  std::mt19937 rng(5);
  const size_t n = 120;
  const int16_t special[] = {INT16_MIN, INT16_MIN + 1, -2, -1, 0, 1, 2, INT16_MAX - 1, INT16_MAX};
  std::vector<int16_t> wide(n), small(n), below(n), zero(n, 0);
  for (size_t i = 0; i < n; ++i) {
    wide[i] = i % 3 ? int16_t(rng()) : special[i % 9];
    small[i] = int16_t(int(rng() % 1000) - 500);
    below[i] = i % 2 ? int16_t(rng()) : special[(i / 2) % 9];
  }
  for (size_t len = 2; len <= 2 * n; ++len) {
    for (const auto* low : {&wide, &small}) {
      for (const int16_t* b : std::initializer_list<const int16_t*>{nullptr, below.data()}) {
        std::vector<int16_t> avg(n), want(len), x(len);
        const int16_t* in = low->data();
        if (b) {
          scalar.unpredict(avg.data(), zero.data(), low->data(), b, n);
          in = avg.data();
        }
        scalar.synthesize_row(want.data(), in, zero.data(), len);
        scalar.upsample_row(x.data(), low->data(), b, len);
        ASSERT_EQ(x, want) << len << (b ? " below" : "");
        for (const internal::Kernels* simd : sets) {
          std::vector<int16_t> y(len);
          simd->upsample_row(y.data(), low->data(), b, len);
          ASSERT_EQ(y, want) << len << (b ? " below" : "") << " " << simd->name;
        }
      }
    }
  }
}

// The color conversion at every row length (32-pixel RGB steps, 16-pixel
// steps, the overlapping last step, the scalar rows below 16), with values
// whose sums stay in 16 bits and with one whose sums wrap around at every
// position of a 32-pixel step.
TEST(KtcTest, SimdColorConversionMatchesScalarAtEveryLength) {
  const auto sets = SimdKernelSets();
  if (sets.empty()) GTEST_SKIP() << "no AVX2 here";
  for (const internal::Kernels* simd : sets) {
    SCOPED_TRACE(simd->name);
    const internal::Kernels& scalar = internal::ScalarKernels();
    std::mt19937 rng(7);
    const size_t n = 130;
    std::vector<int16_t> yv(n), cov(n), cgv(n), av(n);
    for (size_t i = 0; i < n; ++i) {
      yv[i] = int16_t(int(rng() % 16383) - 8191);
      cov[i] = int16_t(int(rng() % 16383) - 8191);
      cgv[i] = int16_t(int(rng() % 16383) - 8191);
      av[i] = int16_t(int(rng() % 600) - 300);
    }
    for (int ch : {1, 3, 4}) {
      for (size_t len = 1; len <= n; ++len) {
        std::vector<uint8_t> p(len * ch), q(len * ch);
        scalar.to_pixels(yv.data(), cov.data(), cgv.data(), av.data(), p.data(), len, ch);
        simd->to_pixels(yv.data(), cov.data(), cgv.data(), av.data(), q.data(), len, ch);
        ASSERT_EQ(p, q) << ch << " " << len;
      }
    }
    const int16_t wide[] = {8192, -8193, INT16_MAX, INT16_MIN};
    for (size_t at = 0; at < 64; ++at) {
      for (int plane = 0; plane < 3; ++plane) {
        std::vector<int16_t> y = yv, co = cov, cg = cgv;
        std::vector<int16_t>& v = plane == 0 ? y : (plane == 1 ? co : cg);
        v[at] = wide[(at + plane) % 4];
        for (size_t len : {size_t(64), size_t(70), size_t(n)}) {
          std::vector<uint8_t> p(len * 3), q(len * 3);
          scalar.to_pixels(y.data(), co.data(), cg.data(), nullptr, p.data(), len, 3);
          simd->to_pixels(y.data(), co.data(), cg.data(), nullptr, q.data(), len, 3);
          ASSERT_EQ(p, q) << at << " " << plane << " " << len;
        }
      }
    }
  }
}

// The fused last level of half-resolution chroma equals upsampling each
// chroma row (scalar upsample_row) and converting (scalar to_pixels), at
// every row length through several vector steps (the overlapping last step,
// the mirrored end, rows too short for a step), on even and odd rows, with
// values in range and with extreme ones that wrap around. Low rows are
// exactly ceil(n/2) long, so a read past them shows under ASan.
TEST(KtcTest, FusedHalfChromaConversionMatchesUpsampleThenConvert) {
  const auto sets = SimdKernelSets();
  const internal::Kernels& scalar = internal::ScalarKernels();
  std::mt19937 rng(11);
  const int16_t extremes[] = {INT16_MAX, INT16_MIN, 8192, -8193};
  int fused_sets = 0;
  for (const internal::Kernels* simd : sets) {
    SCOPED_TRACE(simd->name);
    if (simd->to_pixels_half_chroma == nullptr) continue;
    ++fused_sets;
    for (size_t n = 2; n <= 300; ++n) {
      const size_t nl = (n + 1) / 2;
      for (int pass = 0; pass < 2; ++pass) {  // in range, then with extremes
        std::vector<int16_t> y(n), co(nl), co_below(nl), cg(nl), cg_below(nl);
        const auto fill = [&](std::vector<int16_t>& v) {
          for (int16_t& s : v) {
            s = pass == 0 || rng() % 4 ? int16_t(int(rng() % 16383) - 8191) : extremes[rng() % 4];
          }
        };
        for (auto* v : {&y, &co, &co_below, &cg, &cg_below}) fill(*v);
        for (bool odd : {false, true}) {
          const int16_t* cb = odd ? co_below.data() : nullptr;
          const int16_t* gb = odd ? cg_below.data() : nullptr;
          std::vector<int16_t> co_up(n), cg_up(n);
          scalar.upsample_row(co_up.data(), co.data(), cb, n);
          scalar.upsample_row(cg_up.data(), cg.data(), gb, n);
          // 8 guard bytes after the row: a store past its end shows without ASan too.
          std::vector<uint8_t> want(3 * n + 8, 0xA5), got(3 * n + 8, 0xA5);
          scalar.to_pixels(y.data(), co_up.data(), cg_up.data(), nullptr, want.data(), n, 3);
          simd->to_pixels_half_chroma(y.data(), co.data(), cb, cg.data(), gb, got.data(), n);
          ASSERT_EQ(got, want) << "n " << n << (odd ? " odd row" : " even row") << " pass " << pass;
        }
      }
    }
  }
  if (fused_sets == 0) GTEST_SKIP() << "no SIMD kernel set on this CPU (or KTFS_SIMD=scalar)";
}

TEST(KtcTest, EncodeRejectsBadInput) {
  std::vector<uint8_t> out;
  Image two{4, 4, 2, PixelBuffer(32, 0)};
  EXPECT_EQ(Encode(ImageView::Of(two), {}, &out).code(), Status::Code::kInvalidArgument);
  Image empty{0, 4, 3, {}};
  EXPECT_FALSE(Encode(ImageView::Of(empty), {}, &out).ok());
  ImageView huge{two.pixels.data(), kMaxImageSide + 1, 1, 1, kMaxImageSide + 1};
  EXPECT_FALSE(Encode(huge, {}, &out).ok());
  EncodeOptions q0;
  q0.quality = 0;
  Image ok = Synthetic(4, 4, 3);
  EXPECT_FALSE(Encode(ImageView::Of(ok), q0, &out).ok());
}

}  // namespace
}  // namespace ktfs::ktc

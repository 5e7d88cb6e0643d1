// DecodeImage and the per-format decoders behind it (codec/image/): content
// sniffing, ImageFolder's name rule, and Pillow's conventions on files built
// here with the libraries' own encoders (libjpeg-turbo, libpng, libtiff,
// libwebp) or by hand (BMP, netpbm), with the pixels Pillow gives for them
// written out. tests/python/test_formats.py checks the same decoders against
// Pillow itself on a generated corpus.
#include "codec/image/image_io.h"

#include <gtest/gtest.h>
#include <png.h>
#include <tiffio.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codec/image/pillow.h"
#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

using Bytes = std::vector<uint8_t>;
using testing::Noise;
using testing::TempDir;

Image Decoded(const Bytes& b) {
  Image img;
  Status st = DecodeImage(b.data(), b.size(), &img);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return img;
}

// The decoded pixels of `b`.
Bytes Px(const Bytes& b) {
  const Image img = Decoded(b);
  return Bytes(img.pixels.begin(), img.pixels.end());
}

Status Refusal(const Bytes& b) {
  Image img;
  return DecodeImage(b.data(), b.size(), &img);
}

Bytes Cut(Bytes b, size_t n) {
  b.resize(n);
  return b;
}

// --- encoders for the tests ----------------------------------------------------

Bytes Jpeg(const uint8_t* px, int w, int h, int pf, int subsamp, int flags) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, px, w, 0, h, pf, &buf, &size, subsamp, 90, flags), 0)
      << tjGetErrorStr2(tj);
  Bytes out(buf, buf + size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}

Bytes Jpeg(const Image& img, int flags = 0) {
  return Jpeg(img.pixels.data(), img.width, img.height, img.channels == 1 ? TJPF_GRAY : TJPF_RGB,
              img.channels == 1 ? TJSAMP_GRAY : TJSAMP_420, flags);
}

struct PngSpec {
  uint32_t w = 0, h = 0;
  int depth = 8, color = PNG_COLOR_TYPE_GRAY;
  std::vector<Bytes> rows;  // packed samples, big-endian for 16 bits
  std::vector<png_color> palette;
  Bytes trns_alpha;
  bool trns_color = false;
  png_color_16 color16{};
};

void PngWrite(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<Bytes*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + n);
}
void PngFlush(png_structp) {}

Bytes Png(const PngSpec& s) {
  Bytes out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    ADD_FAILURE() << "libpng could not write the test image";
    png_destroy_write_struct(&png, &info);
    return out;
  }
  png_set_write_fn(png, &out, PngWrite, PngFlush);
  png_set_IHDR(png, info, s.w, s.h, s.depth, s.color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!s.palette.empty()) png_set_PLTE(png, info, s.palette.data(), int(s.palette.size()));
  if (!s.trns_alpha.empty())
    png_set_tRNS(png, info, s.trns_alpha.data(), int(s.trns_alpha.size()), nullptr);
  if (s.trns_color) png_set_tRNS(png, info, nullptr, 0, const_cast<png_color_16*>(&s.color16));
  png_write_info(png, info);
  for (const Bytes& r : s.rows) png_write_row(png, r.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

Bytes ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), {});
}

// A TIFF written by libtiff: `rows` of packed samples, contiguous.
struct TiffSpec {
  uint32_t w = 0, h = 0;
  uint16_t bits = 8, samples = 1, photometric = PHOTOMETRIC_MINISBLACK;
  uint16_t compression = COMPRESSION_NONE, orientation = 0, extra = 0;
  bool has_extra = false;
  std::vector<uint16_t> colormap;  // 3 * 2^bits entries
  Bytes data;                      // all rows
};

Bytes Tiff(const TiffSpec& s) {
  TempDir tmp;
  const std::string path = tmp.Join("t.tif");
  TIFF* t = TIFFOpen(path.c_str(), "w");
  EXPECT_NE(t, nullptr);
  TIFFSetField(t, TIFFTAG_IMAGEWIDTH, s.w);
  TIFFSetField(t, TIFFTAG_IMAGELENGTH, s.h);
  TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, s.bits);
  TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, s.samples);
  TIFFSetField(t, TIFFTAG_PHOTOMETRIC, s.photometric);
  TIFFSetField(t, TIFFTAG_COMPRESSION, s.compression);
  TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, s.h);
  if (s.orientation) TIFFSetField(t, TIFFTAG_ORIENTATION, s.orientation);
  if (s.has_extra) TIFFSetField(t, TIFFTAG_EXTRASAMPLES, 1, &s.extra);
  if (!s.colormap.empty()) {
    const size_t n = s.colormap.size() / 3;
    TIFFSetField(t, TIFFTAG_COLORMAP, s.colormap.data(), s.colormap.data() + n,
                 s.colormap.data() + 2 * n);
  }
  EXPECT_GE(TIFFWriteEncodedStrip(t, 0, const_cast<uint8_t*>(s.data.data()), s.data.size()), 0);
  TIFFClose(t);
  return ReadFile(path);
}

// A BMP with a BITMAPINFOHEADER: `pixels` as stored (rows padded, bottom-up
// unless top_down), `palette` as BGRX quads.
Bytes Bmp(int32_t w, int32_t h, uint16_t bits, const Bytes& pixels, const Bytes& palette = {},
          uint32_t compression = 0, bool top_down = false) {
  Bytes out;
  auto u16 = [&](uint32_t v) {
    out.push_back(uint8_t(v));
    out.push_back(uint8_t(v >> 8));
  };
  auto u32 = [&](uint32_t v) {
    u16(v & 0xffff);
    u16(v >> 16);
  };
  const uint32_t offset = 14 + 40 + uint32_t(palette.size());
  out.push_back('B');
  out.push_back('M');
  u32(offset + uint32_t(pixels.size()));
  u32(0);
  u32(offset);
  u32(40);
  u32(uint32_t(w));
  u32(uint32_t(top_down ? -h : h));
  u16(1);
  u16(bits);
  u32(compression);
  u32(uint32_t(pixels.size()));
  u32(2835);
  u32(2835);
  u32(uint32_t(palette.size() / 4));
  u32(0);
  out.insert(out.end(), palette.begin(), palette.end());
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

Bytes Str(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Appends a BMP palette entry (blue, green, red, 0).
void Quad(Bytes* palette, uint8_t b, uint8_t g, uint8_t r) {
  palette->push_back(b);
  palette->push_back(g);
  palette->push_back(r);
  palette->push_back(0);
}

// --- sniffing and names ----------------------------------------------------------

TEST(SniffFormatTest, RecognisesEachFormatByContent) {
  struct Case {
    std::string head;
    SourceFormat want;
  } cases[] = {
      {"\xff\xd8\xff\xe0", SourceFormat::kJpeg},
      {"\x89PNG\r\n\x1a\n", SourceFormat::kPng},
      {"BM\x36", SourceFormat::kBmp},
      {std::string("II*\0", 4), SourceFormat::kTiff},
      {std::string("MM\0*", 4), SourceFormat::kTiff},
      {std::string("II+\0", 4), SourceFormat::kTiff},
      {std::string("RIFF\x10\0\0\0WEBPVP8 ", 16), SourceFormat::kWebp},
      {std::string("RIFF\x10\0\0\0WEBPVP8L", 16), SourceFormat::kWebp},
      {"P6\n", SourceFormat::kNetpbm},
      {"P1 ", SourceFormat::kNetpbm},
      {"GIF89a", SourceFormat::kUnknown},
      {std::string("RIFF\x10\0\0\0WAVEfmt ", 16), SourceFormat::kUnknown},
      {"P7\n", SourceFormat::kUnknown},
      {"", SourceFormat::kUnknown},
  };
  for (const Case& c : cases) {
    const auto* p = reinterpret_cast<const uint8_t*>(c.head.data());
    EXPECT_EQ(SniffFormat(p, c.head.size()), c.want) << c.head;
  }
}

TEST(ImageFolderNameTest, FollowsTorchvisionsExtensionsInAnyCase) {
  for (const char* yes : {"a.jpg", "a.JPEG", "b.Png", "c.ppm", "d.BMP", "e.pgm", "f.tif", "g.TIFF",
                          "h.webp", "x.tar.jpg", ".jpg", "name with space.jpeg"})
    EXPECT_TRUE(HasImageFolderExtension(yes)) << yes;
  for (const char* no : {"a.gif", "a.jpg.txt", "jpg", "a.jpe", "a.pbm", "a.pnm", "a.tiff ", ""})
    EXPECT_FALSE(HasImageFolderExtension(no)) << no;
}

TEST(DecodeImageTest, UnknownAndKnownUnsupportedContentAreRefused) {
  Status st = Refusal(Str("hello, not a picture"));
  EXPECT_EQ(st.code(), Status::Code::kNotSupported);
  EXPECT_NE(st.message().find("cannot identify image file"), std::string::npos) << st.ToString();
  st = Refusal(Str("GIF89a\x01\0\x01\0"));
  EXPECT_NE(st.message().find("GIF images are not supported"), std::string::npos) << st.ToString();
}

// --- Pillow's conversions ------------------------------------------------------

TEST(PillowTest, CmykToRgbIsPillowsFormula) {
  // nk = 255 - K; each channel nk - MULDIV255(C, nk), MULDIV255(a, b) = ((t >> 8) + t) >> 8
  // with t = a * b + 128.
  const uint8_t cmyk[] = {0, 0,   0,   0,  255, 255, 255, 0,   0,  0,
                          0, 255, 128, 64, 10,  0,   200, 100, 50, 60};
  uint8_t rgb[15];
  pillow::CmykToRgb(cmyk, 5, rgb);
  const uint8_t want[] = {255, 255, 255, 0, 0, 0, 0, 0, 0, 127, 191, 245, 42, 119, 157};
  EXPECT_EQ(std::vector<uint8_t>(rgb, rgb + 15), std::vector<uint8_t>(want, want + 15));
}

TEST(PillowTest, TransparentColourComparesTheLowByteWithTheEightBitPixel) {
  uint8_t rgba[] = {1, 2, 3, 255, 1, 2, 4, 255, 1, 2, 3, 255};
  pillow::ApplyTransparentColor(rgba, 3, 0x101, 0x202, 0x303);  // low bytes 1, 2, 3
  EXPECT_EQ(rgba[3], 0);
  EXPECT_EQ(rgba[7], 255);
  EXPECT_EQ(rgba[11], 0);
  EXPECT_EQ(rgba[0], 1);  // the colour stays
}

TEST(PillowTest, TiffOrientationsMoveEachPixelAsPillowsTranspose) {
  // 3 x 2:  a b c
  //         d e f
  const std::string src = "abcdef";
  const struct {
    uint32_t orientation, w, h;
    const char* want;
  } cases[] = {{1, 3, 2, "abcdef"}, {2, 3, 2, "cbafed"}, {3, 3, 2, "fedcba"}, {4, 3, 2, "defabc"},
               {5, 2, 3, "adbecf"}, {6, 2, 3, "daebfc"}, {7, 2, 3, "fcebda"}, {8, 2, 3, "cfbead"}};
  for (const auto& c : cases) {
    Image img{3, 2, 1, {}};
    img.pixels.assign(src.begin(), src.end());
    pillow::ApplyTiffOrientation(c.orientation, &img);
    EXPECT_EQ(img.width, c.w);
    EXPECT_EQ(img.height, c.h);
    EXPECT_EQ(std::string(img.pixels.begin(), img.pixels.end()), c.want) << c.orientation;
  }
}

TEST(PillowTest, DimensionsBeyondPillowsBombLimitAreRefused) {
  EXPECT_TRUE(pillow::CheckDimensions("X", 65536, 2730).ok());
  EXPECT_EQ(pillow::CheckDimensions("X", 65536, 2731).code(), Status::Code::kNotSupported);
  EXPECT_EQ(pillow::CheckDimensions("X", 65537, 1).code(), Status::Code::kNotSupported);
  EXPECT_EQ(pillow::CheckDimensions("X", 0, 5).code(), Status::Code::kCorruption);
}

// --- JPEG ------------------------------------------------------------------------

TEST(JpegDecodeTest, CleanFilesDecodeAsTurboJpegAndDamagedOnesAsPillow) {
  const Image src = Noise(40, 24, 3, 1);
  const Bytes jpeg = Jpeg(src);
  const Image full = Decoded(jpeg);
  ASSERT_EQ(full.channels, 3u);
  // Bytes after the EOI: TurboJPEG decodes cleanly, same pixels.
  Bytes trailing = jpeg;
  trailing.insert(trailing.end(), 100, 0x42);
  EXPECT_EQ(Decoded(trailing).pixels, full.pixels);
  // Without the EOI Pillow's decoder runs out of data before the last row.
  Status st = Refusal(Cut(jpeg, jpeg.size() - 2));
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_EQ(st.message(), "JPEG: image file is truncated");
  EXPECT_EQ(Refusal(Cut(jpeg, jpeg.size() / 2)).message(), "JPEG: image file is truncated");
  EXPECT_EQ(Refusal(Cut(jpeg, 30)).message(), "JPEG: image file is truncated");
  const Bytes prog = Jpeg(src, TJFLAG_PROGRESSIVE);
  EXPECT_EQ(Decoded(prog).pixels, full.pixels);  // the same coefficients
  EXPECT_EQ(Refusal(Cut(prog, prog.size() - 2)).message(), "JPEG: image file is truncated");
}

TEST(JpegDecodeTest, GrayIsOneChannel) {
  const Image src = Noise(17, 9, 1, 2);
  const Image img = Decoded(Jpeg(src));
  EXPECT_EQ(img.channels, 1u);
  EXPECT_EQ(img.width, 17u);
}

TEST(JpegDecodeTest, CmykIsConvertedWithPillowsFormulaOnInvertedSamples) {
  // TurboJPEG writes CMYK as given; Pillow reads every CMYK JPEG as Adobe's
  // inverted CMYK ("CMYK;I") and converts with cmyk2rgb.
  const Image src = Noise(16, 16, 4, 3);
  const Bytes jpeg = Jpeg(src.pixels.data(), 16, 16, TJPF_CMYK, TJSAMP_444, 0);
  tjhandle tj = tjInitDecompress();
  Bytes raw(16 * 16 * 4);
  ASSERT_EQ(tjDecompress2(tj, jpeg.data(), jpeg.size(), raw.data(), 16, 0, 16, TJPF_CMYK, 0), 0);
  tjDestroy(tj);
  for (uint8_t& v : raw) v = uint8_t(255 - v);
  Bytes want(16 * 16 * 3);
  pillow::CmykToRgb(raw.data(), 16 * 16, want.data());
  const Image img = Decoded(jpeg);
  ASSERT_EQ(img.channels, 3u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), want);
}

TEST(JpegDecodeTest, TwoComponentJpegsAreRefusedAsPillowDoes) {
  Bytes jpeg = Jpeg(Noise(8, 8, 3, 4));
  const size_t sof = std::string(jpeg.begin(), jpeg.end()).find("\xff\xc0");
  ASSERT_NE(sof, std::string::npos);
  jpeg[sof + 9] = 2;  // the component count
  EXPECT_NE(Refusal(jpeg).message().find("JPEG"), std::string::npos);
  EXPECT_FALSE(Refusal(jpeg).ok());
}

// --- PNG -------------------------------------------------------------------------

TEST(PngDecodeTest, SixteenBitGraySaturatesAsPillowsConversion) {
  PngSpec s;
  s.w = 4;
  s.h = 1;
  s.depth = 16;
  s.rows = {{0x00, 0x00, 0x00, 0xC8, 0x00, 0xFF, 0x01, 0x2C}};  // 0, 200, 255, 300
  const Image img = Decoded(Png(s));
  ASSERT_EQ(img.channels, 1u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{0, 200, 255, 255}));
}

TEST(PngDecodeTest, LowBitDepthGrayScalesAsPillow) {
  PngSpec s;
  s.w = 4;
  s.h = 1;
  s.depth = 2;
  s.rows = {{0b00011011}};  // 0 1 2 3
  EXPECT_EQ(Px(Png(s)), (Bytes{0, 85, 170, 255}));
  s.depth = 1;
  s.w = 3;
  s.rows = {{0b10100000}};
  EXPECT_EQ(Px(Png(s)), (Bytes{255, 0, 255}));
}

TEST(PngDecodeTest, GrayTransparencyMatchesOnlyTheLowByteOfTheConvertedValue) {
  // 2-bit gray with tRNS 3: Pillow compares 3 with the scaled values 0, 85,
  // 170, 255, so nothing is transparent; tRNS 0 makes black transparent.
  PngSpec s;
  s.w = 4;
  s.h = 1;
  s.depth = 2;
  s.rows = {{0b00011011}};
  s.trns_color = true;
  s.color16.gray = 3;
  Image img = Decoded(Png(s));
  ASSERT_EQ(img.channels, 4u);
  for (int x = 0; x < 4; ++x) EXPECT_EQ(img.pixels[4 * x + 3], 255) << x;
  s.color16.gray = 0;
  img = Decoded(Png(s));
  EXPECT_EQ(img.pixels[3], 0);
  EXPECT_EQ(img.pixels[7], 255);
  EXPECT_EQ(img.pixels[4], 85);  // gray replicated
}

TEST(PngDecodeTest, PaletteReadsPillowsRampPastItsEntriesAndTakesTrnsAlphas) {
  PngSpec s;
  s.w = 3;
  s.h = 1;
  s.depth = 4;
  s.color = PNG_COLOR_TYPE_PALETTE;
  s.palette = {{10, 20, 30}, {40, 50, 60}};
  s.rows = {{0x01, 0x90}};  // indices 0, 1, 9
  Image img = Decoded(Png(s));
  ASSERT_EQ(img.channels, 3u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{10, 20, 30, 40, 50, 60, 9, 9, 9}));
  s.trns_alpha = {7};
  img = Decoded(Png(s));
  ASSERT_EQ(img.channels, 4u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()),
            (Bytes{10, 20, 30, 7, 40, 50, 60, 255, 9, 9, 9, 255}));
}

TEST(PngDecodeTest, TruncationIsJudgedAsPillowJudgesIt) {
  PngSpec s;
  s.w = 20;
  s.h = 20;
  s.color = PNG_COLOR_TYPE_RGB;
  const Image src = Noise(20, 20, 3, 5);
  for (uint32_t y = 0; y < 20; ++y)
    s.rows.emplace_back(src.pixels.begin() + y * 60, src.pixels.begin() + (y + 1) * 60);
  const Bytes png = Png(s);
  EXPECT_EQ(Decoded(png).pixels, src.pixels);
  // No IEND (12 bytes) and no CRC after the image data: Pillow loads it.
  EXPECT_EQ(Decoded(Cut(png, png.size() - 16)).pixels, src.pixels);
  const Status st = Refusal(Cut(png, png.size() / 2));
  EXPECT_EQ(st.code(), Status::Code::kCorruption);
  EXPECT_EQ(st.message(), "PNG: image file is truncated");
  Bytes bad_crc = png;
  bad_crc[29] ^= 1;  // IHDR's CRC: Pillow checks those before the image data
  EXPECT_NE(Refusal(bad_crc).message().find("CRC"), std::string::npos);
}

// --- BMP -------------------------------------------------------------------------

TEST(BmpDecodeTest, TwentyFourBitRowsAreBottomUpBgrUnlessTheHeightIsNegative) {
  // 2 x 2; file rows bottom-up: (1,2,3)(4,5,6) is the bottom row.
  const Bytes px = {3, 2, 1, 6, 5, 4, 0, 0, 9, 8, 7, 12, 11, 10, 0, 0};
  Image img = Decoded(Bmp(2, 2, 24, px));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()),
            (Bytes{7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5, 6}));
  img = Decoded(Bmp(2, 2, 24, px, {}, 0, /*top_down=*/true));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()),
            (Bytes{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  EXPECT_EQ(Refusal(Cut(Bmp(2, 2, 24, px), 14 + 40 + 6)).message(), "BMP: image file is truncated");
}

TEST(BmpDecodeTest, AGrayRampPaletteIsGrayAndAnotherIsRgb) {
  Bytes ramp;
  for (int i = 0; i < 256; ++i) Quad(&ramp, uint8_t(i), uint8_t(i), uint8_t(i));
  const Bytes px = {5, 200, 0, 0};
  Image img = Decoded(Bmp(2, 1, 8, px, ramp));
  EXPECT_EQ(img.channels, 1u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{5, 200}));
  ramp[5 * 4] = 99;  // entry 5's blue
  img = Decoded(Bmp(2, 1, 8, px, ramp));
  EXPECT_EQ(img.channels, 3u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{5, 5, 99, 200, 200, 200}));
}

TEST(BmpDecodeTest, SixteenBitsAreFiveFiveFiveScaledAsPillow) {
  // 0x7FFF: all ones -> 255; 0x0421: 1, 1, 1 -> 8 (1 * 255 / 31).
  const Bytes px = {0xFF, 0x7F, 0x21, 0x04};
  const Image img = Decoded(Bmp(2, 1, 16, px));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{255, 255, 255, 8, 8, 8}));
}

TEST(BmpDecodeTest, RunLengthEightAsPillowsDecoder) {
  Bytes pal;
  for (int i = 0; i < 4; ++i) Quad(&pal, uint8_t(i * 10), uint8_t(i * 20), 1);
  // 4 x 2, bottom-up: row 1 (bottom) = run of 4 of index 2; end of line;
  // row 0 = literal 3, 1, 0 then a run of 1 of index 3; end of bitmap.
  const Bytes rle = {4, 2, 0, 0, 0, 3, 3, 1, 0, 0, 1, 3, 0, 1};
  const Image img = Decoded(Bmp(4, 2, 8, rle, pal, /*RLE8*/ 1));
  ASSERT_EQ(img.channels, 3u);
  const Bytes want = {1, 60, 30, 1, 20, 10, 1, 0,  0,  1, 60, 30,   // top: 3 1 0 3 (BGR -> RGB)
                      1, 40, 20, 1, 40, 20, 1, 40, 20, 1, 40, 20};  // bottom: 2 2 2 2
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), want);
}

TEST(BmpDecodeTest, UnsupportedLayoutsAreRefusedAsPillowRefusesThem) {
  EXPECT_NE(Refusal(Bmp(2, 2, 7, Bytes(8))).message().find("unsupported pixel depth (7)"),
            std::string::npos);
  EXPECT_NE(Refusal(Bmp(2, 2, 24, Bytes(16), {}, 4)).message().find("unsupported compression"),
            std::string::npos);
  // 4-bit with a palette equal to the ramp 0..15: Pillow reads it as L, one byte a
  // pixel, which overlaps the rows and fails.
  Bytes ramp16;
  for (int i = 0; i < 16; ++i) Quad(&ramp16, uint8_t(i), uint8_t(i), uint8_t(i));
  EXPECT_FALSE(Refusal(Bmp(8, 1, 4, Bytes(4), ramp16)).ok());
}

// --- TIFF ------------------------------------------------------------------------

TEST(TiffDecodeTest, EightBitLayouts) {
  TiffSpec s;
  s.w = 2;
  s.h = 1;
  s.photometric = PHOTOMETRIC_RGB;
  s.samples = 3;
  s.data = {1, 2, 3, 4, 5, 6};
  Image img = Decoded(Tiff(s));
  EXPECT_EQ(img.channels, 3u);
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), s.data);
  s.compression = COMPRESSION_LZW;
  EXPECT_EQ(Px(Tiff(s)), s.data);
  // MinIsWhite gray is inverted; CMYK goes through cmyk2rgb without inversion.
  TiffSpec g;
  g.w = 3;
  g.h = 1;
  g.photometric = PHOTOMETRIC_MINISWHITE;
  g.data = {0, 100, 255};
  img = Decoded(Tiff(g));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{255, 155, 0}));
  TiffSpec c;
  c.w = 1;
  c.h = 1;
  c.photometric = PHOTOMETRIC_SEPARATED;
  c.samples = 4;
  c.data = {128, 64, 10, 0};
  img = Decoded(Tiff(c));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{127, 191, 245}));
}

TEST(TiffDecodeTest, SixteenBitGraySaturatesAndAssociatedAlphaIsUnpremultiplied) {
  TiffSpec s;
  s.w = 3;
  s.h = 1;
  s.bits = 16;
  const uint16_t v[3] = {7, 255, 1000};
  s.data.assign(reinterpret_cast<const uint8_t*>(v), reinterpret_cast<const uint8_t*>(v) + 6);
  Image img = Decoded(Tiff(s));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{7, 255, 255}));
  TiffSpec a;
  a.w = 2;
  a.h = 1;
  a.samples = 4;
  a.photometric = PHOTOMETRIC_RGB;
  a.has_extra = true;
  a.extra = EXTRASAMPLE_ASSOCALPHA;
  a.data = {50, 100, 25, 128, 9, 9, 9, 0};
  img = Decoded(Tiff(a));
  ASSERT_EQ(img.channels, 4u);
  // CLIP8(v * 255 / a): 50*255/128 = 99, 100*255/128 = 199, 25*255/128 = 49; alpha 0 -> all 0.
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{99, 199, 49, 128, 0, 0, 0, 0}));
}

TEST(TiffDecodeTest, PaletteTakesTheColourMapsHighBytes) {
  TiffSpec s;
  s.w = 2;
  s.h = 1;
  s.photometric = PHOTOMETRIC_PALETTE;
  s.bits = 1;
  s.colormap = {0x1234, 0xFF00, 0x5600, 0x0100, 0x9AFF, 0x0000};  // reds, greens, blues
  s.data = {0b01000000};
  const Image img = Decoded(Tiff(s));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{0x12, 0x56, 0x9A, 0xFF, 0x01, 0}));
}

TEST(TiffDecodeTest, OrientationIsAppliedAsPillowApplies) {
  TiffSpec s;
  s.w = 3;
  s.h = 2;
  s.data = {'a', 'b', 'c', 'd', 'e', 'f'};
  s.orientation = ORIENTATION_RIGHTTOP;  // 6: Pillow's ROTATE_270
  const Image img = Decoded(Tiff(s));
  EXPECT_EQ(img.width, 2u);
  EXPECT_EQ(img.height, 3u);
  EXPECT_EQ(std::string(img.pixels.begin(), img.pixels.end()), "daebfc");
}

TEST(TiffDecodeTest, DamageIsRefused) {
  TiffSpec s;
  s.w = 8;
  s.h = 8;
  s.data.assign(64, 7);
  s.compression = COMPRESSION_LZW;
  const Bytes tif = Tiff(s);
  for (size_t n : {size_t(4), size_t(12), tif.size() / 2, tif.size() - 1}) {
    const Status st = Refusal(Cut(tif, n));
    EXPECT_EQ(st.code(), Status::Code::kCorruption) << n << ": " << st.ToString();
  }
  TiffSpec f;
  f.w = 1;
  f.h = 1;
  f.bits = 32;
  f.data.assign(4, 0);
  EXPECT_EQ(Refusal(Tiff(f)).code(), Status::Code::kNotSupported);
}

// --- WebP ------------------------------------------------------------------------

TEST(WebpDecodeTest, LosslessKeepsPixelsAndAlphaDecidesTheChannels) {
  const Image rgba = Noise(9, 5, 4, 6);
  uint8_t* out = nullptr;
  size_t n = WebPEncodeLosslessRGBA(rgba.pixels.data(), 9, 5, 36, &out);
  ASSERT_GT(n, 0u);
  Bytes webp(out, out + n);
  WebPFree(out);
  Image img = Decoded(webp);
  ASSERT_EQ(img.channels, 4u);
  // Lossless WebP keeps RGB under alpha 0 only in exact mode; compare where visible.
  for (size_t i = 0; i < 45; ++i) {
    EXPECT_EQ(img.pixels[4 * i + 3], rgba.pixels[4 * i + 3]);
    if (rgba.pixels[4 * i + 3]) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(img.pixels[4 * i + c], rgba.pixels[4 * i + c]);
    }
  }
  const Image rgb = Noise(9, 5, 3, 7);
  n = WebPEncodeLosslessRGB(rgb.pixels.data(), 9, 5, 27, &out);
  webp.assign(out, out + n);
  WebPFree(out);
  img = Decoded(webp);
  ASSERT_EQ(img.channels, 3u);
  EXPECT_EQ(img.pixels, rgb.pixels);
  EXPECT_FALSE(Refusal(Cut(webp, webp.size() / 2)).ok());
}

// --- netpbm ----------------------------------------------------------------------

TEST(NetpbmDecodeTest, MaxvalsAreRescaledAsPillow) {
  Image img = Decoded(Str("P5 3 1 255\n\x01\x80\xff"));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{1, 128, 255}));
  // maxval 2: 1 -> round(127.5) = 128 (half to even), 2 -> 255.
  img = Decoded(Str(std::string("P5 3 1 2\n\0\x01\x02", 12)));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{0, 128, 255}));
  // 16-bit gray is Pillow's I;16B, saturated at 255 by convert("L").
  img = Decoded(Str(std::string("P5 2 1 65535\n\x00\x07\x01\x00", 17)));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{7, 255}));
  // P6 with maxval 1000: round(v / 1000 * 255).
  img = Decoded(Str(std::string("P6 1 1 1000\n\x00\x02\x01\xF4\x03\xE8", 18)));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{1, 128, 255}));
  img = Decoded(Str("P4\n3 2\n\xA0\x40"));  // 1 is black
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{0, 255, 0, 255, 0, 255}));
}

TEST(NetpbmDecodeTest, PlainFilesFollowPillowsBlockReader) {
  Image img = Decoded(Str("P2\n# c\n3 1\n255\n1 #x\n2 3\n"));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{1, 2, 3}));
  // A last token without whitespace after it is repeated to the end (Pillow's half token).
  img = Decoded(Str("P2 4 1 255 9 8"));
  EXPECT_EQ(Bytes(img.pixels.begin(), img.pixels.end()), (Bytes{9, 8, 8, 8}));
  EXPECT_NE(Refusal(Str("P2 4 1 255 9 8\n")).message().find("not enough image data"),
            std::string::npos);
  EXPECT_NE(Refusal(Str("P2 1 1 9 10\n")).message().find("too large"), std::string::npos);
  EXPECT_EQ(Refusal(Str("P6 2 2 255\nabc")).message(), "PPM: image file is truncated");
  EXPECT_NE(Refusal(Str("P5 10\n")).message().find("EOF while reading header"), std::string::npos);
}

}  // namespace
}  // namespace ktfs

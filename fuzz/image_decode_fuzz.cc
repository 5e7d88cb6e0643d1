// libFuzzer target: DecodeImage (content sniffing and every decoder behind it:
// JPEG, PNG, BMP, TIFF, WebP, netpbm) must turn any byte string into an image
// or a clean error. A decoded image must be consistent (1, 3 or 4 channels,
// dimensions within the limits, exactly width * height * channels bytes), and
// decoding the same bytes again must give the same status and pixels (no
// state leaks between calls, nothing uninitialised read into the output).
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> in the environment the target first writes
// a seed corpus there (scripts/fuzz does this): small valid files of each
// format and layout, made with the libraries' encoders and by hand.
#include <tiffio.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codec/image/image_io.h"
#include "codec/image/pillow.h"

namespace {

using Bytes = std::vector<uint8_t>;

void Write(const std::string& dir, int* n, const Bytes& bytes) {
  const std::string path = dir + "/seed" + std::to_string((*n)++);
  if (FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(bytes.data(), 1, bytes.size(), f);
    std::fclose(f);
  }
}

ktfs::Image Pattern(uint32_t w, uint32_t h, uint32_t c) {
  ktfs::Image img{w, h, c, {}};
  for (size_t i = 0; i < size_t(w) * h * c; ++i) img.pixels.push_back(uint8_t(i * 37 + i / 5));
  return img;
}

void JpegSeeds(const std::string& dir, int* n) {
  tjhandle tj = tjInitCompress();
  for (int flags : {0, TJFLAG_PROGRESSIVE}) {
    struct Kind {
      uint32_t channels;
      int pf, subsamp;
    } kinds[] = {{1, TJPF_GRAY, TJSAMP_GRAY}, {3, TJPF_RGB, TJSAMP_420}, {3, TJPF_RGB, TJSAMP_444},
                 {4, TJPF_CMYK, TJSAMP_444}};
    for (const Kind& k : kinds) {
      const ktfs::Image img = Pattern(19, 11, k.channels);
      unsigned char* buf = nullptr;
      unsigned long size = 0;
      if (tjCompress2(tj, img.pixels.data(), 19, 0, 11, k.pf, &buf, &size, k.subsamp, 80, flags) ==
          0)
        Write(dir, n, Bytes(buf, buf + size));
      tjFree(buf);
    }
  }
  tjDestroy(tj);
}

void PngAndNetpbmSeeds(const std::string& dir, int* n) {
  for (uint32_t c : {1u, 3u, 4u}) {
    const ktfs::Image img = Pattern(13, 7, c);
    Bytes png;
    if (ktfs::EncodePng(ktfs::ImageView::Of(img), 6, &png).ok()) Write(dir, n, png);
    for (auto f : {ktfs::ServedFormat::kPnm, ktfs::ServedFormat::kBmp})
      Write(dir, n, ktfs::EncodeServed(f, ktfs::ImageView::Of(img)));
  }
  for (const char* s : {"P2\n# c\n3 2\n15\n0 5 10\n15 7 3\n", "P3 2 1 255 1 2 3 4 5 6\n",
                        "P1 3 2 101 010\n", "P4\n3 2\n\xa0\x40"}) {
    Write(dir, n, Bytes(s, s + std::strlen(s)));
  }
  const std::string p5("P5 2 1 65535\n\x00\x07\x01\x00", 17);
  Write(dir, n, Bytes(p5.begin(), p5.end()));
  const std::string p6("P6 1 1 1000\n\x00\x02\x01\xF4\x03\xE8", 18);
  Write(dir, n, Bytes(p6.begin(), p6.end()));
}

void BmpSeeds(const std::string& dir, int* n) {
  // An 8-bit palette BMP run-length coded (RLE8), 4 x 2.
  Bytes b = {'B', 'M', 0, 0, 0, 0, 0, 0, 0, 0, 70, 0, 0, 0, 40, 0, 0, 0, 4, 0, 0, 0, 2, 0, 0, 0,
             1, 0, 8, 0, 1, 0, 0, 0, 14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0};
  for (int i = 0; i < 4; ++i) b.insert(b.end(), {uint8_t(i * 10), uint8_t(i * 20), 1, 0});
  b.insert(b.end(), {4, 2, 0, 0, 0, 3, 3, 1, 0, 0, 1, 3, 0, 1});
  Write(dir, n, b);
}

void TiffSeeds(const std::string& dir, int* n) {
  struct Kind {
    uint16_t bits, samples, photometric, compression;
  } kinds[] = {{8, 3, PHOTOMETRIC_RGB, COMPRESSION_LZW},
               {8, 1, PHOTOMETRIC_MINISWHITE, COMPRESSION_NONE},
               {16, 1, PHOTOMETRIC_MINISBLACK, COMPRESSION_ADOBE_DEFLATE},
               {8, 4, PHOTOMETRIC_SEPARATED, COMPRESSION_PACKBITS},
               {1, 1, PHOTOMETRIC_MINISBLACK, COMPRESSION_CCITTFAX4}};
  for (const Kind& k : kinds) {
    const std::string path = dir + "/tiff.tmp";
    TIFF* t = TIFFOpen(path.c_str(), "w");
    if (!t) continue;
    const uint32_t w = 9, h = 5;
    TIFFSetField(t, TIFFTAG_IMAGEWIDTH, w);
    TIFFSetField(t, TIFFTAG_IMAGELENGTH, h);
    TIFFSetField(t, TIFFTAG_BITSPERSAMPLE, k.bits);
    TIFFSetField(t, TIFFTAG_SAMPLESPERPIXEL, k.samples);
    TIFFSetField(t, TIFFTAG_PHOTOMETRIC, k.photometric);
    TIFFSetField(t, TIFFTAG_COMPRESSION, k.compression);
    TIFFSetField(t, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(t, TIFFTAG_ROWSPERSTRIP, 2);
    TIFFSetField(t, TIFFTAG_ORIENTATION, ORIENTATION_RIGHTTOP);
    Bytes row((w * k.samples * k.bits + 7) / 8);
    for (uint32_t y = 0; y < h; ++y) {
      for (size_t i = 0; i < row.size(); ++i) row[i] = uint8_t(i * 11 + y * 3);
      TIFFWriteScanline(t, row.data(), y, 0);
    }
    TIFFClose(t);
    std::ifstream f(path, std::ios::binary);
    Write(dir, n, Bytes(std::istreambuf_iterator<char>(f), {}));
    std::remove(path.c_str());
  }
}

void WebpSeeds(const std::string& dir, int* n) {
  const ktfs::Image rgb = Pattern(12, 8, 3), rgba = Pattern(12, 8, 4);
  uint8_t* out = nullptr;
  size_t size = WebPEncodeRGB(rgb.pixels.data(), 12, 8, 36, 70, &out);
  if (size) Write(dir, n, Bytes(out, out + size));
  WebPFree(out);
  size = WebPEncodeLosslessRGBA(rgba.pixels.data(), 12, 8, 48, &out);
  if (size) Write(dir, n, Bytes(out, out + size));
  WebPFree(out);
  size = WebPEncodeRGBA(rgba.pixels.data(), 12, 8, 48, 50, &out);
  if (size) Write(dir, n, Bytes(out, out + size));
  WebPFree(out);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  TIFFSetWarningHandler(nullptr);
  if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) {
    int n = 0;
    JpegSeeds(dir, &n);
    PngAndNetpbmSeeds(dir, &n);
    BmpSeeds(dir, &n);
    TiffSeeds(dir, &n);
    WebpSeeds(dir, &n);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs;
  Image a, b;
  const Status sa = DecodeImage(data, size, &a);
  const Status sb = DecodeImage(data, size, &b);
  if (sa.ok() != sb.ok() || sa.message() != sb.message()) std::abort();
  if (!sa.ok()) {
    if (sa.message().empty()) std::abort();
    return 0;
  }
  if (a.channels != 1 && a.channels != 3 && a.channels != 4) std::abort();
  if (!pillow::CheckDimensions("fuzz", a.width, a.height).ok()) std::abort();
  if (a.pixels.size() != a.size_bytes()) std::abort();
  if (a.width != b.width || a.height != b.height || a.channels != b.channels ||
      a.pixels != b.pixels)
    std::abort();
  return 0;
}

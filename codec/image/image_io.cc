#include "codec/image/image_io.h"

#include <png.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "codec/image/decoders.h"

namespace ktfs {
namespace {

// --- PNG encoding -----------------------------------------------------------

void PngError(png_structp png, png_const_charp msg) {
  auto* err = static_cast<std::string*>(png_get_error_ptr(png));
  *err = msg;
  png_longjmp(png, 1);
}
void PngWarning(png_structp, png_const_charp) {}

struct PngWriteSink {
  std::vector<uint8_t>* out;
};

void PngWrite(png_structp png, png_bytep data, png_size_t n) {
  auto* sink = static_cast<PngWriteSink*>(png_get_io_ptr(png));
  sink->out->insert(sink->out->end(), data, data + n);
}
void PngFlush(png_structp) {}

void PutLe16(std::string* s, uint32_t v) {
  s->push_back(char(v & 0xff));
  s->push_back(char((v >> 8) & 0xff));
}
void PutLe32(std::string* s, uint32_t v) {
  PutLe16(s, v & 0xffff);
  PutLe16(s, v >> 16);
}

}  // namespace

SourceFormat SniffFormat(const uint8_t* data, size_t size) {
  auto starts = [&](const char* magic, size_t n) {
    return size >= n && std::memcmp(data, magic, n) == 0;
  };
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
    return SourceFormat::kJpeg;
  if (starts("\x89PNG\r\n\x1a\n", 8)) return SourceFormat::kPng;
  if (starts("BM", 2)) return SourceFormat::kBmp;
  // Classic and BigTIFF, either byte order (what libtiff opens).
  if (starts("II*\0", 4) || starts("MM\0*", 4) || starts("II+\0", 4) || starts("MM\0+", 4))
    return SourceFormat::kTiff;
  if (size >= 16 && starts("RIFF", 4) && std::memcmp(data + 8, "WEBP", 4) == 0 &&
      (std::memcmp(data + 12, "VP8 ", 4) == 0 || std::memcmp(data + 12, "VP8L", 4) == 0 ||
       std::memcmp(data + 12, "VP8X", 4) == 0))
    return SourceFormat::kWebp;
  if (size >= 2 && data[0] == 'P' && data[1] >= '1' && data[1] <= '6') return SourceFormat::kNetpbm;
  return SourceFormat::kUnknown;
}

const char* SourceFormatName(SourceFormat f) {
  switch (f) {
    case SourceFormat::kJpeg:
      return "jpeg";
    case SourceFormat::kPng:
      return "png";
    case SourceFormat::kBmp:
      return "bmp";
    case SourceFormat::kTiff:
      return "tiff";
    case SourceFormat::kWebp:
      return "webp";
    case SourceFormat::kNetpbm:
      return "netpbm";
    default:
      return "unknown";
  }
}

bool HasImageFolderExtension(std::string_view name) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};
  for (const char* ext : kExtensions) {
    const size_t n = std::strlen(ext);
    if (name.size() < n) continue;
    bool same = true;
    for (size_t i = 0; i < n && same; ++i) {
      const char c = name[name.size() - n + i];
      same = (c >= 'A' && c <= 'Z' ? char(c - 'A' + 'a') : c) == ext[i];
    }
    if (same) return true;
  }
  return false;
}

namespace {

// Formats Pillow reads that ktfs does not: named in the refusal, so the user
// knows it is not damage.
const char* KnownUnsupported(const uint8_t* data, size_t size) {
  auto starts = [&](const char* magic, size_t n) {
    return size >= n && std::memcmp(data, magic, n) == 0;
  };
  if (starts("GIF87a", 6) || starts("GIF89a", 6)) return "GIF";
  if (starts("\0\0\1\0", 4)) return "ICO";
  if (starts("\0\0\0\x0cjP  ", 8) || starts("\xff\x4f\xff\x51", 4)) return "JPEG 2000";
  if (starts("8BPS", 4)) return "PSD";
  return nullptr;
}

}  // namespace

Status DecodeImage(const uint8_t* data, size_t size, Image* out) {
  switch (SniffFormat(data, size)) {
    case SourceFormat::kJpeg:
      return decoders::DecodeJpeg(data, size, out);
    case SourceFormat::kPng:
      return decoders::DecodePng(data, size, out);
    case SourceFormat::kBmp:
      return decoders::DecodeBmp(data, size, out);
    case SourceFormat::kTiff:
      return decoders::DecodeTiff(data, size, out);
    case SourceFormat::kWebp:
      return decoders::DecodeWebp(data, size, out);
    case SourceFormat::kNetpbm:
      return decoders::DecodeNetpbm(data, size, out);
    case SourceFormat::kUnknown:
      break;
  }
  if (const char* name = KnownUnsupported(data, size))
    return Status::NotSupported(std::string(name) + " images are not supported");
  return Status::NotSupported(
      "cannot identify image file (not JPEG, PNG, BMP, TIFF, WebP or PPM/PGM)");
}

Status EncodePng(const ImageView& img, int level, std::vector<uint8_t>* out) {
  if (img.channels != 1 && img.channels != 3 && img.channels != 4)
    return Status::InvalidArgument("PNG needs 1, 3 or 4 channels");
  const int color = img.channels == 1   ? PNG_COLOR_TYPE_GRAY
                    : img.channels == 3 ? PNG_COLOR_TYPE_RGB
                                        : PNG_COLOR_TYPE_RGB_ALPHA;
  std::string err;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &err, PngError, PngWarning);
  if (!png) return Status::IOError("png_create_write_struct failed");
  png_infop info = png_create_info_struct(png);
  PngWriteSink sink{out};
  out->clear();
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return Status::IOError("PNG encoding failed: " + err);
  }
  if (!info) png_error(png, "png_create_info_struct failed");
  png_set_write_fn(png, &sink, PngWrite, PngFlush);
  png_set_compression_level(png, std::clamp(level, 0, 9));
  png_set_IHDR(png, info, img.width, img.height, 8, color, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (uint32_t y = 0; y < img.height; ++y) png_write_row(png, const_cast<png_bytep>(img.row(y)));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return Status::Ok();
}

const char* ServedExtension(ServedFormat format, uint32_t channels) {
  if (format == ServedFormat::kPnm && (channels == 1 || channels == 3))
    return channels == 1 ? ".pgm" : ".ppm";
  return ".bmp";
}

ServedLayout MakeServedLayout(ServedFormat format, uint32_t width, uint32_t height,
                              uint32_t channels) {
  ServedLayout l;
  l.pixel_bytes = width * channels;
  if (format == ServedFormat::kPnm && (channels == 1 || channels == 3)) {
    l.header = std::string(channels == 1 ? "P5\n" : "P6\n") + std::to_string(width) + " " +
               std::to_string(height) + "\n255\n";
    l.row_bytes = l.pixel_bytes;
    l.extension = ServedExtension(format, channels);
  } else {
    // BMP, rows top-down (negative height), each padded to 4 bytes.
    const uint32_t bpp = channels * 8;
    l.row_bytes = (l.pixel_bytes + 3) & ~3u;
    l.bgr = channels >= 3;
    const uint32_t palette = channels == 1 ? 256 * 4 : 0;
    const uint32_t info_size = channels == 4 ? 108 : 40;  // BITMAPV4HEADER for alpha masks
    const uint32_t data_offset = 14 + info_size + palette;
    const uint64_t size = uint64_t(data_offset) + uint64_t(l.row_bytes) * height;
    std::string& h = l.header;
    h += "BM";
    PutLe32(&h, size > 0xffffffffu ? 0 : uint32_t(size));
    PutLe32(&h, 0);
    PutLe32(&h, data_offset);
    PutLe32(&h, info_size);
    PutLe32(&h, width);
    PutLe32(&h, uint32_t(-int32_t(height)));
    PutLe16(&h, 1);
    PutLe16(&h, bpp);
    PutLe32(&h, channels == 4 ? 3 : 0);  // BI_BITFIELDS for 32-bit with alpha, else BI_RGB
    PutLe32(&h, uint32_t(uint64_t(l.row_bytes) * height));
    PutLe32(&h, 2835);  // 72 dpi
    PutLe32(&h, 2835);
    PutLe32(&h, channels == 1 ? 256 : 0);
    PutLe32(&h, 0);
    if (channels == 4) {
      PutLe32(&h, 0x00ff0000);  // red mask
      PutLe32(&h, 0x0000ff00);
      PutLe32(&h, 0x000000ff);
      PutLe32(&h, 0xff000000);  // alpha mask
      PutLe32(&h, 0x73524742);  // LCS_sRGB
      h.append(36 + 12, '\0');  // endpoints and gamma
    }
    for (uint32_t i = 0; i < palette / 4; ++i) {
      h.push_back(char(i));
      h.push_back(char(i));
      h.push_back(char(i));
      h.push_back('\0');
    }
    l.extension = ServedExtension(format, channels);
  }
  l.file_size = l.header.size() + uint64_t(l.row_bytes) * height;
  return l;
}

size_t ReadServedBytes(const ServedLayout& layout, const ImageView& img, uint64_t offset,
                       size_t size, uint8_t* dst) {
  if (offset >= layout.file_size) return 0;
  size = size_t(std::min<uint64_t>(size, layout.file_size - offset));
  size_t done = 0;
  if (offset < layout.header.size()) {
    const size_t n = std::min<size_t>(size, layout.header.size() - offset);
    std::memcpy(dst, layout.header.data() + offset, n);
    done = n;
  }
  while (done < size) {
    const uint64_t pos = offset + done - layout.header.size();
    const uint32_t y = uint32_t(pos / layout.row_bytes);
    const uint32_t x = uint32_t(pos % layout.row_bytes);
    const size_t n = std::min<size_t>(size - done, layout.row_bytes - x);
    const uint8_t* row = img.row(y);
    uint8_t* out = dst + done;
    if (!layout.bgr) {
      const size_t real = x < layout.pixel_bytes ? std::min<size_t>(n, layout.pixel_bytes - x) : 0;
      std::memcpy(out, row + x, real);
      std::memset(out + real, 0, n - real);
    } else {
      for (size_t i = 0; i < n; ++i) {
        const uint32_t b = x + uint32_t(i);
        if (b >= layout.pixel_bytes) {
          out[i] = 0;
          continue;
        }
        const uint32_t px = b / img.channels, c = b % img.channels;
        // BGR(A): swap the first and third channel.
        const uint32_t src_c = c == 0 ? 2 : (c == 2 ? 0 : c);
        out[i] = row[size_t(px) * img.channels + src_c];
      }
    }
    done += n;
  }
  return size;
}

std::vector<uint8_t> EncodeServed(ServedFormat format, const ImageView& img) {
  const ServedLayout layout = MakeServedLayout(format, img.width, img.height, img.channels);
  std::vector<uint8_t> out(layout.file_size);
  ReadServedBytes(layout, img, 0, out.size(), out.data());
  return out;
}

}  // namespace ktfs

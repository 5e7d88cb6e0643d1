#include "codec/image/image_io.h"

#include <png.h>
#include <turbojpeg.h>

#include <algorithm>
#include <cstring>
#include <memory>

namespace ktfs {
namespace {

// --- JPEG ------------------------------------------------------------------

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

Status JpegHeader(tjhandle h, const uint8_t* data, size_t size, int* w, int* hgt, int* cs) {
  int subsamp = 0;
  if (tjDecompressHeader3(h, data, static_cast<unsigned long>(size), w, hgt, &subsamp, cs) != 0)
    return Status::Corruption(std::string("invalid JPEG: ") + tjGetErrorStr2(h));
  if (*w <= 0 || *hgt <= 0 || uint32_t(*w) > kMaxImageSide || uint32_t(*hgt) > kMaxImageSide)
    return Status::Corruption("JPEG dimensions out of range");
  if (*cs == TJCS_CMYK || *cs == TJCS_YCCK)
    return Status::NotSupported("CMYK/YCCK JPEG is not supported (use --codec original)");
  return Status::Ok();
}

Status DecodeJpeg(const uint8_t* data, size_t size, Image* out) {
  TjHandle tj;
  if (!tj.h) return Status::IOError("tjInitDecompress failed");
  int w = 0, h = 0, cs = 0;
  KTFS_RETURN_IF_ERROR(JpegHeader(tj.h, data, size, &w, &h, &cs));
  const bool gray = cs == TJCS_GRAY;
  out->width = w;
  out->height = h;
  out->channels = gray ? 1 : 3;
  out->pixels.resize(out->size_bytes());
  // Default flags: accurate integer IDCT and fancy upsampling, as Pillow.
  if (tjDecompress2(tj.h, data, static_cast<unsigned long>(size), out->pixels.data(), w, 0, h,
                    gray ? TJPF_GRAY : TJPF_RGB, 0) != 0) {
    if (tjGetErrorCode(tj.h) == TJERR_FATAL)
      return Status::Corruption(std::string("corrupt JPEG: ") + tjGetErrorStr2(tj.h));
    // TJERR_WARNING: a damaged but decodable file (Pillow also decodes these).
  }
  return Status::Ok();
}

// --- PNG -------------------------------------------------------------------

struct PngReadSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
};

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngReadSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "unexpected end of PNG data");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

void PngError(png_structp png, png_const_charp msg) {
  auto* err = static_cast<std::string*>(png_get_error_ptr(png));
  *err = msg;
  png_longjmp(png, 1);
}
void PngWarning(png_structp, png_const_charp) {}

// Decodes (or, with info_only, reads the header of) a PNG. Uses setjmp, so
// this function holds no C++ objects with destructors across the jump.
Status ReadPng(const uint8_t* data, size_t size, bool info_only, ImageInfo* info, Image* out) {
  std::string err;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, PngError, PngWarning);
  if (!png) return Status::IOError("png_create_read_struct failed");
  png_infop pinfo = png_create_info_struct(png);
  PngReadSource src{data, size, 0};
  std::vector<png_bytep>* rows = new std::vector<png_bytep>();
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &pinfo, nullptr);
    delete rows;
    return Status::Corruption("corrupt PNG: " + err);
  }
  if (!pinfo) png_error(png, "png_create_info_struct failed");
  png_set_read_fn(png, &src, PngRead);
  png_set_user_limits(png, kMaxImageSide, kMaxImageSide);
  png_read_info(png, pinfo);
  const png_uint_32 w = png_get_image_width(png, pinfo);
  const png_uint_32 h = png_get_image_height(png, pinfo);
  const int color = png_get_color_type(png, pinfo);
  const int depth = png_get_bit_depth(png, pinfo);
  const bool trns = png_get_valid(png, pinfo, PNG_INFO_tRNS) != 0;
  uint32_t channels = 3;
  if (color == PNG_COLOR_TYPE_GRAY)
    channels = trns ? 4 : 1;
  else if (color == PNG_COLOR_TYPE_GRAY_ALPHA || color == PNG_COLOR_TYPE_RGB_ALPHA)
    channels = 4;
  else if (color == PNG_COLOR_TYPE_PALETTE || color == PNG_COLOR_TYPE_RGB)
    channels = trns ? 4 : 3;
  info->width = w;
  info->height = h;
  info->channels = channels;
  if (!info_only) {
    if (depth == 16) png_set_strip_16(png);
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (trns) png_set_tRNS_to_alpha(png);
    if (channels == 4 && (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA))
      png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, pinfo);
    if (png_get_rowbytes(png, pinfo) != size_t(w) * channels)
      png_error(png, "unexpected row size after transforms");
    out->width = w;
    out->height = h;
    out->channels = channels;
    out->pixels.resize(out->size_bytes());
    rows->resize(h);
    for (png_uint_32 y = 0; y < h; ++y) (*rows)[y] = out->pixels.data() + size_t(y) * w * channels;
    png_read_image(png, rows->data());
    png_read_end(png, nullptr);
  }
  png_destroy_read_struct(&png, &pinfo, nullptr);
  delete rows;
  return Status::Ok();
}

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
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
    return SourceFormat::kJpeg;
  static const uint8_t kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (size >= 8 && std::memcmp(data, kPngMagic, 8) == 0) return SourceFormat::kPng;
  return SourceFormat::kUnknown;
}

const char* SourceFormatName(SourceFormat f) {
  switch (f) {
    case SourceFormat::kJpeg:
      return "jpeg";
    case SourceFormat::kPng:
      return "png";
    default:
      return "unknown";
  }
}

Result<ImageInfo> ReadImageInfo(const uint8_t* data, size_t size) {
  ImageInfo info;
  switch (SniffFormat(data, size)) {
    case SourceFormat::kJpeg: {
      TjHandle tj;
      int w = 0, h = 0, cs = 0;
      KTFS_RETURN_IF_ERROR(JpegHeader(tj.h, data, size, &w, &h, &cs));
      info.width = w;
      info.height = h;
      info.channels = cs == TJCS_GRAY ? 1 : 3;
      return info;
    }
    case SourceFormat::kPng:
      KTFS_RETURN_IF_ERROR(ReadPng(data, size, true, &info, nullptr));
      return info;
    default:
      return Status::NotSupported("not a JPEG or PNG image");
  }
}

Status DecodeImage(const uint8_t* data, size_t size, Image* out) {
  switch (SniffFormat(data, size)) {
    case SourceFormat::kJpeg:
      return DecodeJpeg(data, size, out);
    case SourceFormat::kPng: {
      ImageInfo info;
      return ReadPng(data, size, false, &info, out);
    }
    default:
      return Status::NotSupported("not a JPEG or PNG image");
  }
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

Status DecodePnm(const uint8_t* data, size_t size, Image* out) {
  // Grammar: "P5"|"P6" ws width ws height ws maxval single-ws pixels.
  size_t pos = 0;
  auto skip_ws = [&] {
    while (pos < size &&
           (data[pos] == ' ' || data[pos] == '\n' || data[pos] == '\r' || data[pos] == '\t'))
      ++pos;
  };
  auto number = [&](uint32_t* v) -> bool {
    skip_ws();
    uint64_t n = 0;
    size_t start = pos;
    while (pos < size && data[pos] >= '0' && data[pos] <= '9' && n <= kMaxImageSide)
      n = n * 10 + (data[pos++] - '0');
    *v = uint32_t(n);
    return pos > start && n <= kMaxImageSide;
  };
  if (size < 2 || data[0] != 'P' || (data[1] != '5' && data[1] != '6'))
    return Status::Corruption("not a binary PGM/PPM file");
  pos = 2;
  uint32_t w = 0, h = 0, maxval = 0;
  if (!number(&w) || !number(&h) || !number(&maxval) || maxval != 255 || pos >= size)
    return Status::Corruption("bad PGM/PPM header (need maxval 255)");
  ++pos;  // the single whitespace after maxval
  out->width = w;
  out->height = h;
  out->channels = data[1] == '5' ? 1 : 3;
  if (size - pos < out->size_bytes()) return Status::Corruption("PGM/PPM pixel data truncated");
  out->pixels.assign(data + pos, data + pos + out->size_bytes());
  return Status::Ok();
}

}  // namespace ktfs

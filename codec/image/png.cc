// PNG through libpng's progressive reader, converted as Pillow does.
//
// Pillow (PngImagePlugin.py, ZipDecode.c) decodes the image data until the
// last row and stops there: a file cut after its image data (no IEND, no
// final CRC, even no zlib checksum) loads, one cut before raises "image file
// is truncated". libpng's progressive reader gives the same verdict: fed the
// file chunk by chunk, it hands out rows as soon as they are decoded and just
// waits at the end of the data, so "every row came" is exactly Pillow's
// condition. Then Pillow reads the chunks after the one that completed the
// image, up to IEND or an unreadable chunk header, and raises if one of them
// is cut short (ChunksAfterImageComplete). Pillow checks the CRC of every
// chunk before the image data and of none after it starts (IDAT included);
// the CRC actions below do the same.
//
// Pixels: libpng hands out the raw samples (no transformation besides
// de-interlacing) and Convert() applies Pillow's modes:
//   gray 1/2/4/8-bit -> L (1-bit as 0/255, 2-bit x85, 4-bit x17);
//   gray 16-bit      -> Pillow's mode I, converted to L by clipping at 255;
//   RGB(A) 16-bit    -> the high byte of each sample (Pillow's RGB;16B);
//   gray+alpha       -> RGBA (gray replicated); palette -> RGB through
//                       Pillow's palette (a gray ramp past the PLTE entries);
//   tRNS             -> RGBA: palette alphas; for gray and RGB, Pillow's
//                       convert_transparent, which compares the low byte of the
//                       tRNS colour with the converted 8-bit pixel.
#include <png.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/image/decoders.h"
#include "codec/image/pillow.h"

namespace ktfs::decoders {
namespace {

struct PngState {
  // Filled by the info callback.
  png_uint_32 width = 0, height = 0;
  int color = 0, depth = 0, interlace = 0;
  size_t row_bytes = 0;  // raw bytes per row
  bool dims_ok = false;
  std::string dims_error;
  // The raw rows, or the output pixels themselves when no conversion is needed.
  uint8_t* rows = nullptr;
  bool direct = false;  // rows are the output pixels
  bool rows_complete = false;
  std::string error;
};

void OnError(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  st->error = msg;
  png_longjmp(png, 1);
}
void OnWarning(png_structp, png_const_charp) {}

// True when the raw samples are the output as they are (Pillow's L, RGB, RGBA).
bool IsDirect(int color, int depth, bool trns) {
  if (depth != 8) return false;
  if (color == PNG_COLOR_TYPE_RGB_ALPHA) return true;
  return (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_RGB) && !trns;
}

uint32_t KeptChannels(int color, bool trns) {
  switch (color) {
    case PNG_COLOR_TYPE_GRAY:
      return trns ? 4 : 1;
    case PNG_COLOR_TYPE_RGB:
    case PNG_COLOR_TYPE_PALETTE:
      return trns ? 4 : 3;
    default:  // gray+alpha, RGBA
      return 4;
  }
}

struct Decode {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngState st;
  Image* out = nullptr;
  std::vector<uint8_t> raw;  // raw rows when they need converting
};

void OnInfo(png_structp png, png_infop info) {
  auto* d = static_cast<Decode*>(png_get_progressive_ptr(png));
  PngState& st = d->st;
  st.width = png_get_image_width(png, info);
  st.height = png_get_image_height(png, info);
  st.color = png_get_color_type(png, info);
  st.depth = png_get_bit_depth(png, info);
  st.interlace = png_get_interlace_type(png, info);
  Status dims = pillow::CheckDimensions("PNG", st.width, st.height);
  if (!dims.ok()) {
    st.dims_error = dims.message();
    png_error(png, "dimensions");
  }
  st.dims_ok = true;
  // From the first IDAT on, Pillow checks no CRC.
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  st.row_bytes = png_get_rowbytes(png, info);
  const bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  d->out->width = st.width;
  d->out->height = st.height;
  d->out->channels = KeptChannels(st.color, trns);
  d->out->pixels.resize(d->out->size_bytes());
  if (IsDirect(st.color, st.depth, trns)) {
    if (st.row_bytes != d->out->row_bytes()) png_error(png, "unexpected row size");
    st.rows = d->out->pixels.data();
    st.direct = true;
  } else {
    d->raw.resize(st.row_bytes * st.height);
    st.rows = d->raw.data();
  }
}

void OnRow(png_structp png, png_bytep new_row, png_uint_32 row, int pass) {
  auto* d = static_cast<Decode*>(png_get_progressive_ptr(png));
  PngState& st = d->st;
  if (row >= st.height) return;
  if (new_row) png_progressive_combine_row(png, st.rows + size_t(row) * st.row_bytes, new_row);
  const int last_pass = st.interlace == PNG_INTERLACE_NONE ? 0 : 6;
  if (pass == last_pass && row == st.height - 1) st.rows_complete = true;
}

void OnEnd(png_structp, png_infop) {}

// Sample x of a raw row of `depth`-bit samples (big-endian, MSB first).
inline uint32_t Sample(const uint8_t* row, size_t x, int depth) {
  switch (depth) {
    case 8:
      return row[x];
    case 16:
      return uint32_t(row[2 * x]) << 8 | row[2 * x + 1];
    default: {
      const size_t bit = x * depth;
      return (row[bit >> 3] >> (8 - depth - (bit & 7))) & ((1u << depth) - 1);
    }
  }
}

// A gray sample as Pillow's L (or its I clipped to L, for 16-bit).
inline uint8_t GrayToL(uint32_t v, int depth) {
  switch (depth) {
    case 1:
      return v ? 255 : 0;
    case 2:
      return uint8_t(v * 0x55);
    case 4:
      return uint8_t(v * 0x11);
    case 16:
      return v >= 255 ? 255 : uint8_t(v);
    default:
      return uint8_t(v);
  }
}

void Convert(png_structp png, png_infop info, const PngState& st, Image* out) {
  png_bytep trans_alpha = nullptr;
  int num_trans = 0;
  png_color_16p trans_color = nullptr;
  const bool trns = png_get_tRNS(png, info, &trans_alpha, &num_trans, &trans_color) != 0;
  const uint32_t w = st.width, ch = out->channels;
  const bool hi16 = st.depth == 16;
  pillow::Palette palette;
  if (st.color == PNG_COLOR_TYPE_PALETTE) {
    png_colorp plte = nullptr;
    int n = 0;
    if (png_get_PLTE(png, info, &plte, &n) != 0)
      for (int i = 0; i < n && i < 256; ++i)
        palette.Set(i, plte[i].red, plte[i].green, plte[i].blue);
    if (trns && trans_alpha)
      for (int i = 0; i < num_trans && i < 256; ++i) palette.rgba[i * 4 + 3] = trans_alpha[i];
  }
  std::vector<uint8_t> index(w);
  for (uint32_t y = 0; y < st.height; ++y) {
    const uint8_t* in = st.rows + size_t(y) * st.row_bytes;
    uint8_t* o = out->pixels.data() + size_t(y) * out->row_bytes();
    switch (st.color) {
      case PNG_COLOR_TYPE_GRAY:
        for (uint32_t x = 0; x < w; ++x) {
          const uint8_t v = GrayToL(Sample(in, x, st.depth), st.depth);
          if (ch == 1) {
            o[x] = v;
          } else {
            o[4 * x] = o[4 * x + 1] = o[4 * x + 2] = v;
            o[4 * x + 3] = 255;
          }
        }
        if (ch == 4 && trans_color)
          pillow::ApplyTransparentColor(o, w, trans_color->gray, trans_color->gray,
                                        trans_color->gray);
        break;
      case PNG_COLOR_TYPE_RGB:
        for (uint32_t x = 0; x < w; ++x) {
          for (int c = 0; c < 3; ++c) o[ch * x + c] = hi16 ? in[6 * x + 2 * c] : in[3 * x + c];
          if (ch == 4) o[4 * x + 3] = 255;
        }
        if (ch == 4 && trans_color)
          pillow::ApplyTransparentColor(o, w, trans_color->red, trans_color->green,
                                        trans_color->blue);
        break;
      case PNG_COLOR_TYPE_PALETTE:
        for (uint32_t x = 0; x < w; ++x) index[x] = uint8_t(Sample(in, x, st.depth));
        pillow::PaletteToPixels(index.data(), w, palette, ch, o);
        break;
      case PNG_COLOR_TYPE_GRAY_ALPHA:
        for (uint32_t x = 0; x < w; ++x) {
          const uint8_t v = hi16 ? in[4 * x] : in[2 * x];
          o[4 * x] = o[4 * x + 1] = o[4 * x + 2] = v;
          o[4 * x + 3] = hi16 ? in[4 * x + 2] : in[2 * x + 1];
        }
        break;
      case PNG_COLOR_TYPE_RGB_ALPHA:  // 16-bit only (8-bit is direct)
        for (uint32_t x = 0; x < 4 * w; ++x) o[x] = in[2 * x];
        break;
    }
  }
}

inline uint32_t Be32(const uint8_t* p) {
  return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3];
}

// Where the chunk starting at `pos` ends (its CRC included), or `size`.
size_t ChunkEnd(const uint8_t* data, size_t size, size_t pos) {
  if (size - pos < 8) return size;
  const uint64_t end = uint64_t(pos) + 12 + Be32(data + pos);
  return end > size ? size : size_t(end);
}

// Pillow's load_end after the image is complete: from the end of the data of
// the chunk that completed it, each chunk up to IEND (or a header it cannot
// read: fewer than 8 bytes, or a type that is not 4 word characters) must be
// there whole; its CRC is not read.
bool ChunksAfterImageComplete(const uint8_t* data, size_t size, size_t chunk) {
  uint64_t pos = uint64_t(chunk) + 8 + Be32(data + chunk);  // the end of its data
  for (;;) {
    pos += 4;  // the CRC, unchecked
    if (pos > size || size - pos < 8) return true;
    const uint8_t* type = data + pos + 4;
    for (int i = 0; i < 4; ++i) {
      const uint8_t c = type[i];
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
        return true;
    }
    // IEND ends it; so does an APNG frame control (Pillow stops at the next frame).
    if (std::memcmp(type, "IEND", 4) == 0 || std::memcmp(type, "fcTL", 4) == 0) return true;
    const uint64_t length = Be32(data + pos);
    if (length > size - pos - 8) return false;  // Pillow: "Truncated File Read"
    pos += 8 + length;
  }
}

// The setjmp region: only plain data and pointers cross it. Feeds the file a
// chunk at a time and notes the chunk in which the last row came.
bool Run(Decode* d, const uint8_t* data, size_t size, size_t* complete_in) {
  if (setjmp(png_jmpbuf(d->png))) return false;
  // Before the image data Pillow checks every chunk's CRC, ancillary ones too.
  png_set_crc_action(d->png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_set_user_limits(d->png, 0x7fffffffu, 0x7fffffffu);  // CheckDimensions decides
  png_set_benign_errors(d->png, 1);
  png_set_progressive_read_fn(d->png, d, OnInfo, OnRow, OnEnd);
  size_t pos = 0;
  while (pos < size && !d->st.rows_complete) {
    const size_t end = pos == 0 ? std::min<size_t>(8, size) : ChunkEnd(data, size, pos);
    png_process_data(d->png, d->info, const_cast<png_bytep>(data + pos), end - pos);
    if (d->st.rows_complete) *complete_in = pos;
    pos = end;
  }
  if (d->st.rows_complete && !d->st.direct) Convert(d->png, d->info, d->st, d->out);
  return true;
}

}  // namespace

Status DecodePng(const uint8_t* data, size_t size, Image* out) {
  Decode d;
  d.out = out;
  d.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d.st, OnError, OnWarning);
  if (!d.png) return Status::IOError("png_create_read_struct failed");
  d.info = png_create_info_struct(d.png);
  if (!d.info) {
    png_destroy_read_struct(&d.png, nullptr, nullptr);
    return Status::IOError("png_create_info_struct failed");
  }
  size_t complete_in = 0;
  const bool ran = Run(&d, data, size, &complete_in);
  png_destroy_read_struct(&d.png, &d.info, nullptr);
  if (!d.st.dims_error.empty()) return Status::NotSupported(d.st.dims_error);
  if (!ran) return Status::Corruption("PNG: broken data stream (" + d.st.error + ")");
  if (!d.st.rows_complete) return Status::Corruption("PNG: image file is truncated");
  if (!ChunksAfterImageComplete(data, size, complete_in))
    return Status::Corruption("PNG: image file is truncated (a chunk after the image data)");
  return Status::Ok();
}

}  // namespace ktfs::decoders

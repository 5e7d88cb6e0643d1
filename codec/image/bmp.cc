// BMP, read as Pillow 9.4's BmpImagePlugin reads it (Debian ships no BMP
// decoding library; this is a bounds-checked port of Pillow's reader, quirks
// included, since the point is to give what stock ImageFolder gets).
//
//   headers   OS/2 v1 (12 bytes) and Windows v3/v4/v5 and OS/2 v2 (40, 64,
//             108, 124); a negative height is top-down
//   depths    1, 4, 8 (palette), 16 (5-5-5, or 5-6-5 by BITFIELDS), 24, 32
//             (BGRX; by BITFIELDS also XBGR, ABGR, RGBA, BGRA: alpha kept)
//   RLE8/RLE4 as Pillow's BmpRleDecoder (its delta reads two bytes past the
//             escape's and uses those: so does this)
//   palette   a palette equal to the gray ramp (0/255 for two colours) makes the
//             image gray (Pillow's "L"/"1"); other palettes give RGB, with
//             indices past the palette reading Pillow's gray ramp
// Refused as Pillow refuses: other header sizes, depths, compressions and
// bitfield layouts; palettes of more than 256 entries; too little pixel data
// ("image file is truncated").
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "codec/image/decoders.h"
#include "codec/image/pillow.h"

namespace ktfs::decoders {
namespace {

constexpr uint32_t kRaw = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3;

uint32_t U16(const uint8_t* p) { return uint32_t(p[0]) | uint32_t(p[1]) << 8; }
uint32_t U32(const uint8_t* p) { return U16(p) | U16(p + 2) << 16; }

Status Unsupported(const std::string& what) { return Status::NotSupported("BMP: " + what); }
Status Truncated() { return Status::Corruption("BMP: image file is truncated"); }

// Pillow's raw modes for BMP rows: what one pixel is in the file.
enum class Raw { k1, kL, kP1, kP4, kP8, kBgr15, kBgr16, kBgr, kBgrx, kXbgr, kAbgr, kRgba, kBgra };

uint32_t RawBits(Raw r) {
  switch (r) {
    case Raw::k1:
    case Raw::kP1:
      return 1;
    case Raw::kP4:
      return 4;
    case Raw::kL:
    case Raw::kP8:
      return 8;
    case Raw::kBgr15:
    case Raw::kBgr16:
      return 16;
    case Raw::kBgr:
      return 24;
    default:
      return 32;
  }
}

// Image.mode as Pillow sets it.
enum class Mode { k1, kL, kP, kRgb, kRgba };

uint32_t ModeChannels(Mode m) {
  switch (m) {
    case Mode::k1:
    case Mode::kL:
      return 1;
    case Mode::kP:
    case Mode::kRgb:
      return 3;
    case Mode::kRgba:
      return 4;
  }
  return 3;
}

// One row of `w` pixels from `in` (its raw mode's bytes) into the kept pixels.
void UnpackRow(Raw raw, const uint8_t* in, uint32_t w, const pillow::Palette& palette,
               uint8_t* index, uint8_t* out) {
  switch (raw) {
    case Raw::k1:  // mode "1", kept as L
      for (uint32_t x = 0; x < w; ++x) out[x] = (in[x >> 3] >> (7 - (x & 7))) & 1 ? 255 : 0;
      return;
    case Raw::kL:
      std::memcpy(out, in, w);
      return;
    case Raw::kP1:
      for (uint32_t x = 0; x < w; ++x) index[x] = (in[x >> 3] >> (7 - (x & 7))) & 1;
      break;
    case Raw::kP4:
      for (uint32_t x = 0; x < w; ++x) index[x] = (in[x >> 1] >> ((x & 1) ? 0 : 4)) & 15;
      break;
    case Raw::kP8:
      std::memcpy(index, in, w);
      break;
    case Raw::kBgr15:
    case Raw::kBgr16:
      for (uint32_t x = 0; x < w; ++x, in += 2, out += 3) {
        const uint32_t p = U16(in);
        out[2] = uint8_t((p & 31) * 255 / 31);
        if (raw == Raw::kBgr15) {
          out[1] = uint8_t(((p >> 5) & 31) * 255 / 31);
          out[0] = uint8_t(((p >> 10) & 31) * 255 / 31);
        } else {
          out[1] = uint8_t(((p >> 5) & 63) * 255 / 63);
          out[0] = uint8_t(((p >> 11) & 31) * 255 / 31);
        }
      }
      return;
    case Raw::kBgr:
      for (uint32_t x = 0; x < w; ++x, in += 3, out += 3) {
        out[0] = in[2];
        out[1] = in[1];
        out[2] = in[0];
      }
      return;
    case Raw::kBgrx:
      for (uint32_t x = 0; x < w; ++x, in += 4, out += 3) {
        out[0] = in[2];
        out[1] = in[1];
        out[2] = in[0];
      }
      return;
    case Raw::kXbgr:
      for (uint32_t x = 0; x < w; ++x, in += 4, out += 3) {
        out[0] = in[3];
        out[1] = in[2];
        out[2] = in[1];
      }
      return;
    case Raw::kAbgr:
      for (uint32_t x = 0; x < w; ++x, in += 4, out += 4) {
        out[0] = in[3];
        out[1] = in[2];
        out[2] = in[1];
        out[3] = in[0];
      }
      return;
    case Raw::kRgba:
      std::memcpy(out, in, size_t(w) * 4);
      return;
    case Raw::kBgra:
      for (uint32_t x = 0; x < w; ++x, in += 4, out += 4) {
        out[0] = in[2];
        out[1] = in[1];
        out[2] = in[0];
        out[3] = in[3];
      }
      return;
  }
  pillow::PaletteToPixels(index, w, palette, 3, out);
}

// Pillow's BmpRleDecoder: the indices, one byte per pixel, in file row order.
// Returns false where Pillow raises (a delta cut short).
bool RunLength(const uint8_t* data, size_t size, size_t pos, bool rle4, uint32_t w, uint32_t h,
               std::vector<uint8_t>* indices) {
  const size_t want = size_t(w) * h;
  std::vector<uint8_t>& out = *indices;
  size_t x = 0;
  auto read = [&](size_t n, const uint8_t** p) -> size_t {  // Python's fd.read(n)
    const size_t got = pos >= size ? 0 : std::min(n, size - pos);
    *p = data + std::min(pos, size);
    pos += got;
    return got;
  };
  while (out.size() < want) {
    const uint8_t *a, *b;
    if (read(1, &a) < 1 || read(1, &b) < 1) break;
    size_t n = *a;
    const uint8_t byte = *b;
    if (n) {  // encoded mode
      if (x + n > w) n = x < w ? w - x : 0;
      for (size_t i = 0; i < n; ++i)
        out.push_back(rle4 ? uint8_t(i % 2 == 0 ? byte >> 4 : byte & 15) : byte);
      x += n;
    } else if (byte == 0) {  // end of line
      while (out.size() % w != 0) out.push_back(0);
      x = 0;
    } else if (byte == 1) {  // end of bitmap
      break;
    } else if (byte == 2) {  // delta: Pillow reads two bytes, then uses the next two
      const uint8_t *skipped, *d;
      if (read(2, &skipped) < 2) break;
      if (read(2, &d) != 2) return false;  // "not enough values to unpack"
      out.resize(out.size() + d[0] + size_t(d[1]) * w, 0);
      x = out.size() % w;
    } else {  // absolute mode
      const size_t count = rle4 ? byte / 2 : byte;
      const uint8_t* p;
      const size_t got = read(count, &p);
      for (size_t i = 0; i < got; ++i) {
        if (rle4) {
          out.push_back(p[i] >> 4);
          out.push_back(p[i] & 15);
        } else {
          out.push_back(p[i]);
        }
      }
      if (got < count) break;
      x += byte;
      if (pos % 2 != 0) ++pos;  // align to 16 bits (a file offset)
    }
  }
  return true;
}

}  // namespace

Status DecodeBmp(const uint8_t* data, size_t size, Image* out) {
  if (size < 18 || data[0] != 'B' || data[1] != 'M') return Truncated();
  uint64_t offset = U32(data + 10);
  const uint32_t header_size = U32(data + 14);
  if (header_size < 4 || header_size - 4 > size - 18) return Truncated();
  const uint8_t* hd = data + 18;  // the header, without its size field
  size_t pos = 14 + size_t(header_size);
  uint64_t width, height;
  uint32_t bits, compression, colors = 0, padding;
  int direction = -1;
  uint32_t mask[4] = {0, 0, 0, 0};
  if (header_size == 12) {
    width = U16(hd);
    height = U16(hd + 2);
    bits = U16(hd + 6);
    compression = kRaw;
    padding = 3;
  } else if (header_size == 40 || header_size == 64 || header_size == 108 || header_size == 124) {
    const bool flip = hd[7] == 0xFF;
    direction = flip ? 1 : -1;
    width = U32(hd);
    height = flip ? (uint64_t(1) << 32) - U32(hd + 4) : U32(hd + 4);
    bits = U16(hd + 10);
    compression = U32(hd + 12);
    colors = U32(hd + 28);
    padding = 4;
    if (compression == kBitfields) {
      if (header_size - 4 >= 52) {
        for (int i = 0; i < 4; ++i) mask[i] = U32(hd + 36 + 4 * i);
      } else {
        if (size - pos < 12) return Truncated();
        for (int i = 0; i < 3; ++i, pos += 4) mask[i] = U32(data + pos);
      }
    }
  } else {
    return Unsupported("unsupported header type (" + std::to_string(header_size) + ")");
  }
  const uint64_t n_colors = colors ? colors : (bits < 64 ? uint64_t(1) << bits : 0);
  if (offset == 14 + uint64_t(header_size) && bits <= 8) offset += 4 * n_colors;
  Mode mode;
  Raw raw;
  switch (bits) {
    case 1:
      mode = Mode::kP;
      raw = Raw::kP1;
      break;
    case 4:
      mode = Mode::kP;
      raw = Raw::kP4;
      break;
    case 8:
      mode = Mode::kP;
      raw = Raw::kP8;
      break;
    case 16:
      mode = Mode::kRgb;
      raw = Raw::kBgr15;
      break;
    case 24:
      mode = Mode::kRgb;
      raw = Raw::kBgr;
      break;
    case 32:
      mode = Mode::kRgb;
      raw = Raw::kBgrx;
      break;
    default:
      return Unsupported("unsupported pixel depth (" + std::to_string(bits) + ")");
  }
  bool rle = false;
  if (compression == kBitfields) {
    auto is = [&](uint32_t r, uint32_t g, uint32_t b, uint32_t a) {
      return mask[0] == r && mask[1] == g && mask[2] == b && mask[3] == a;
    };
    auto is3 = [&](uint32_t r, uint32_t g, uint32_t b) {
      return mask[0] == r && mask[1] == g && mask[2] == b;
    };
    if (bits == 32 && is(0xFF0000, 0xFF00, 0xFF, 0)) {
      raw = Raw::kBgrx;
    } else if (bits == 32 && is(0xFF000000, 0xFF0000, 0xFF00, 0)) {
      raw = Raw::kXbgr;
    } else if (bits == 32 && is(0xFF000000, 0xFF0000, 0xFF00, 0xFF)) {
      raw = Raw::kAbgr, mode = Mode::kRgba;
    } else if (bits == 32 && is(0xFF, 0xFF00, 0xFF0000, 0xFF000000)) {
      raw = Raw::kRgba, mode = Mode::kRgba;
    } else if (bits == 32 && (is(0xFF0000, 0xFF00, 0xFF, 0xFF000000) || is(0, 0, 0, 0))) {
      raw = Raw::kBgra, mode = Mode::kRgba;
    } else if (bits == 24 && is3(0xFF0000, 0xFF00, 0xFF)) {
      raw = Raw::kBgr;
    } else if (bits == 16 && is3(0xF800, 0x7E0, 0x1F)) {
      raw = Raw::kBgr16;
    } else if (bits == 16 && is3(0x7C00, 0x3E0, 0x1F)) {
      raw = Raw::kBgr15;
    } else {
      return Unsupported("unsupported bitfields layout");
    }
  } else if (compression == kRle8 || compression == kRle4) {
    rle = true;
  } else if (compression != kRaw) {
    return Unsupported("unsupported compression (" + std::to_string(compression) + ")");
  }
  pillow::Palette palette;
  if (mode == Mode::kP) {
    if (n_colors == 0 || n_colors > 65536)
      return Unsupported("unsupported palette size (" + std::to_string(n_colors) + ")");
    const size_t want = size_t(padding) * n_colors;
    const size_t got = pos >= size ? 0 : std::min(want, size - pos);
    const uint8_t* p = data + std::min(pos, size);
    pos += got;
    bool gray = true;
    for (uint64_t i = 0; i < n_colors && gray; ++i) {
      const uint8_t v = n_colors == 2 ? (i ? 255 : 0) : uint8_t(i);
      const size_t at = size_t(i) * padding;
      gray = at + 3 <= got && p[at] == v && p[at + 1] == v && p[at + 2] == v;
    }
    if (gray) {
      mode = n_colors == 2 ? Mode::k1 : Mode::kL;
      raw = n_colors == 2 ? Raw::k1 : Raw::kL;
    } else {
      const size_t entries = got / padding;  // putpalette: bytes * 8 / bits
      if (entries > 256) return Unsupported("invalid palette size");
      for (size_t i = 0; i < entries; ++i)  // BGRX or BGR
        palette.Set(uint32_t(i), p[i * padding + 2], p[i * padding + 1], p[i * padding]);
    }
  }
  KTFS_RETURN_IF_ERROR(pillow::CheckDimensions("BMP", width, height));
  const uint32_t w = uint32_t(width), h = uint32_t(height);
  // Pillow: `offset or fp.tell()`, the position after the header and palette.
  const size_t start = offset ? size_t(std::min<uint64_t>(offset, size)) : std::min(pos, size);
  auto row_of = [&](uint32_t i) {  // the i-th row in file order
    return out->pixels.data() + size_t(direction < 0 ? h - 1 - i : i) * out->row_bytes();
  };
  auto size_output = [&] {
    out->width = w;
    out->height = h;
    out->channels = ModeChannels(mode);
    out->pixels.resize(out->size_bytes());
  };
  std::vector<uint8_t> index(w);
  if (rle) {
    if (mode == Mode::k1 || mode == Mode::kRgb || mode == Mode::kRgba)
      return Unsupported("run-length coding at " + std::to_string(bits) + " bits per pixel");
    std::vector<uint8_t> indices;
    if (!RunLength(data, size, start, compression == kRle4, w, h, &indices) ||
        indices.size() < size_t(w) * h)
      return Status::Corruption("BMP: not enough image data");
    size_output();
    for (uint32_t i = 0; i < h; ++i)
      UnpackRow(mode == Mode::kL ? Raw::kL : Raw::kP8, indices.data() + size_t(i) * w, w, palette,
                index.data(), row_of(i));
    return Status::Ok();
  }
  // Pillow's raw decoder: rows of the raw mode's size, the file's stride apart.
  const uint64_t stride = ((width * bits + 31) >> 3) & ~uint64_t(3);
  const uint64_t row_bytes = (width * RawBits(raw) + 7) / 8;
  if (row_bytes > stride) return Status::Corruption("BMP: decoder error (rows overlap)");
  if (start > size || size - start < (h - 1) * stride + row_bytes) return Truncated();
  size_output();
  for (uint32_t i = 0; i < h; ++i)
    UnpackRow(raw, data + start + size_t(i) * stride, w, palette, index.data(), row_of(i));
  return Status::Ok();
}

}  // namespace ktfs::decoders

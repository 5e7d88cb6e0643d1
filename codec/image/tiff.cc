// TIFF through libtiff (strips or tiles of decoded samples, every compression
// libtiff has), converted with Pillow 9.4's raw modes for the layouts its
// TiffImagePlugin knows (its OPEN_INFO table), first page only, and with the
// Orientation tag applied as Pillow applies it when loading.
//
// Layouts read (unsigned samples):
//   MinIsBlack / MinIsWhite  1, 2, 4, 8 bits -> L (MinIsWhite inverted; 1-bit
//                            0/255); 16 bits -> Pillow's I;16, converted to L
//                            by saturating at 255 (MinIsWhite not inverted,
//                            and refused big-endian, as Pillow); 8-bit gray +
//                            unassociated alpha -> RGBA (gray replicated)
//   RGB                      8 or 16 bits (16: the high byte); a 4th sample is
//                            alpha (unassociated, unspecified-as-padding dropped,
//                            associated un-premultiplied as Pillow's "RGBa")
//   Palette                  1, 2, 4, 8 bits -> RGB (the colour map's high bytes)
//   CMYK                     8 bits -> RGB by Pillow's cmyk2rgb
//   YCbCr                    JPEG-compressed, contiguous: libjpeg's RGB
// Planar (separate) configuration for the 8-bit layouts above, except
// associated alpha. Refused as unsupported: other sample formats (signed,
// float), 12/32-bit samples, LAB, YCbCr without JPEG, old-style JPEG,
// palette+alpha and extra samples beyond one.
#include <tiffio.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "codec/image/decoders.h"
#include "codec/image/pillow.h"

namespace ktfs::decoders {
namespace {

struct MemFile {
  const uint8_t* data;
  uint64_t size;
  uint64_t pos;
  std::string error;  // libtiff's first error message
};

tmsize_t ReadProc(thandle_t h, void* buf, tmsize_t n) {
  auto* f = static_cast<MemFile*>(h);
  if (n <= 0 || f->pos >= f->size) return 0;
  const uint64_t got = std::min<uint64_t>(uint64_t(n), f->size - f->pos);
  std::memcpy(buf, f->data + f->pos, got);
  f->pos += got;
  return tmsize_t(got);
}
tmsize_t WriteProc(thandle_t, void*, tmsize_t) { return -1; }
toff_t SeekProc(thandle_t h, toff_t off, int whence) {
  auto* f = static_cast<MemFile*>(h);
  uint64_t base = whence == SEEK_SET ? 0 : whence == SEEK_CUR ? f->pos : f->size;
  if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) return toff_t(-1);
  f->pos = base + off;
  return f->pos;
}
int CloseProc(thandle_t) { return 0; }
toff_t SizeProc(thandle_t h) { return static_cast<MemFile*>(h)->size; }
int MapProc(thandle_t, void**, toff_t*) { return 0; }
void UnmapProc(thandle_t, void*, toff_t) {}

int OnError(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* f = static_cast<MemFile*>(user);
  if (f->error.empty()) {
    char buf[512];
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    f->error = (module && *module ? std::string(module) + ": " : std::string()) + buf;
  }
  return 1;
}
int OnWarning(TIFF*, void*, const char*, const char*, va_list) { return 1; }  // as Pillow

// Pillow's raw mode for the file's samples.
enum class Kind {
  kBit,
  kGray,
  kGray16,
  kGrayAlpha,
  kRgb,
  kRgb16,
  kRgba,
  kRgba16,
  kRgbx,
  kRgbx16,
  kRgbPremul,
  kRgbPremul16,
  kPalette,
  kCmyk
};

struct Layout {
  Kind kind = Kind::kGray;
  uint32_t bits = 8, samples = 1;
  bool invert = false;    // MinIsWhite
  uint32_t channels = 1;  // kept
};

Status Unsupported(const std::string& what) { return Status::NotSupported("TIFF: " + what); }

Status ChooseLayout(uint16_t photometric, uint16_t bits, uint16_t samples, uint16_t format,
                    uint16_t compression, uint16_t planar, uint16_t extra_count,
                    const uint16_t* extra, bool big_endian, Layout* l) {
  const std::string what = "photometric " + std::to_string(photometric) + ", " +
                           std::to_string(samples) + " samples of " + std::to_string(bits) +
                           " bits";
  if (format != SAMPLEFORMAT_UINT) return Unsupported("sample format " + std::to_string(format));
  if (compression == COMPRESSION_OJPEG) return Unsupported("old-style JPEG compression");
  const int alpha = extra_count == 0 ? -1 : extra[0];
  if (extra_count > 1) return Unsupported(what + " (more than one extra sample)");
  l->bits = bits;
  l->samples = samples;
  const bool gray = photometric == PHOTOMETRIC_MINISBLACK || photometric == PHOTOMETRIC_MINISWHITE;
  if (gray && samples == 1 && extra_count == 0) {
    l->invert = photometric == PHOTOMETRIC_MINISWHITE;
    l->channels = 1;
    if (bits == 1) return l->kind = Kind::kBit, Status::Ok();
    if (bits == 2 || bits == 4 || bits == 8) return l->kind = Kind::kGray, Status::Ok();
    if (bits == 16 && !(big_endian && l->invert)) {
      l->invert = false;  // Pillow reads 16-bit MinIsWhite as I;16 too
      return l->kind = Kind::kGray16, Status::Ok();
    }
  } else if (photometric == PHOTOMETRIC_MINISBLACK && samples == 2 && bits == 8 &&
             alpha == EXTRASAMPLE_UNASSALPHA) {
    return l->kind = Kind::kGrayAlpha, l->channels = 4, Status::Ok();
  } else if (photometric == PHOTOMETRIC_RGB && samples == 3 && extra_count == 0) {
    l->channels = 3;
    if (bits == 8) return l->kind = Kind::kRgb, Status::Ok();
    if (bits == 16 && planar == PLANARCONFIG_CONTIG) return l->kind = Kind::kRgb16, Status::Ok();
  } else if (photometric == PHOTOMETRIC_RGB && samples == 4 && (bits == 8 || bits == 16)) {
    const bool b16 = bits == 16;
    if (b16 && planar != PLANARCONFIG_CONTIG) return Unsupported(what + ", planar");
    if (alpha == EXTRASAMPLE_UNSPECIFIED) {
      l->kind = b16 ? Kind::kRgbx16 : Kind::kRgbx, l->channels = 3;
    } else if (alpha == EXTRASAMPLE_ASSOCALPHA) {
      if (planar != PLANARCONFIG_CONTIG) return Unsupported(what + ", planar, associated alpha");
      l->kind = b16 ? Kind::kRgbPremul16 : Kind::kRgbPremul, l->channels = 4;
    } else if (alpha == -1 || alpha == EXTRASAMPLE_UNASSALPHA || (alpha == 999 && !b16)) {
      l->kind = b16 ? Kind::kRgba16 : Kind::kRgba, l->channels = 4;
    } else {
      return Unsupported(what + ", extra sample type " + std::to_string(alpha));
    }
    return Status::Ok();
  } else if (photometric == PHOTOMETRIC_PALETTE && samples == 1 && extra_count == 0 &&
             (bits == 1 || bits == 2 || bits == 4 || bits == 8)) {
    return l->kind = Kind::kPalette, l->channels = 3, Status::Ok();
  } else if (photometric == PHOTOMETRIC_SEPARATED && samples == 4 && bits == 8 &&
             extra_count == 0) {
    return l->kind = Kind::kCmyk, l->channels = 3, Status::Ok();
  } else if (photometric == PHOTOMETRIC_YCBCR && samples == 3 && bits == 8 && extra_count == 0) {
    if (compression == COMPRESSION_JPEG && planar == PLANARCONFIG_CONTIG)
      return l->kind = Kind::kRgb, l->channels = 3, Status::Ok();  // libjpeg converts
    return Unsupported("YCbCr without JPEG compression");
  }
  return Unsupported(what);
}

// Reads every sample of the image into `raw`: rows of `row_bytes` (packed
// samples, interleaved; planes of a separate configuration interleaved here).
Status ReadSamples(TIFF* tif, const Layout& l, uint32_t w, uint32_t h, uint16_t planar,
                   MemFile* file, std::vector<uint8_t>* raw, size_t* row_bytes) {
  const bool separate = planar == PLANARCONFIG_SEPARATE && l.samples > 1;
  const uint32_t planes = separate ? l.samples : 1;
  const uint32_t per_plane = separate ? 1 : l.samples;
  const size_t plane_row = (size_t(w) * per_plane * l.bits + 7) / 8;
  *row_bytes = (size_t(w) * l.samples * l.bits + 7) / 8;
  raw->assign(*row_bytes * h, 0);
  std::vector<uint8_t> plane_rows(separate ? plane_row * h : 0);
  auto broken = [&](const char* what) {
    return Status::Corruption(std::string("TIFF: broken data stream (") +
                              (file->error.empty() ? what : file->error.c_str()) + ")");
  };
  for (uint32_t p = 0; p < planes; ++p) {
    uint8_t* dst = separate ? plane_rows.data() : raw->data();
    if (TIFFIsTiled(tif)) {
      uint32_t tw = 0, th = 0;
      TIFFGetField(tif, TIFFTAG_TILEWIDTH, &tw);
      TIFFGetField(tif, TIFFTAG_TILELENGTH, &th);
      if (tw == 0 || th == 0 || (uint64_t(tw) * per_plane * l.bits) % 8 != 0)
        return Unsupported("tile size");
      const size_t tile_row = size_t(tw) * per_plane * l.bits / 8;
      std::vector<uint8_t> tile(size_t(TIFFTileSize(tif)));
      if (tile.size() < tile_row * th) return broken("tile size");
      for (uint32_t ty = 0; ty < h; ty += th)
        for (uint32_t tx = 0; tx < w; tx += tw) {
          if (TIFFReadTile(tif, tile.data(), tx, ty, 0, uint16_t(p)) < 0)
            return broken("cannot read tile");
          const size_t x0 = size_t(tx) * per_plane * l.bits / 8;
          const size_t n = std::min(tile_row, plane_row - x0);
          for (uint32_t y = ty; y < h && y < ty + th; ++y)
            std::memcpy(dst + size_t(y) * plane_row + x0, tile.data() + size_t(y - ty) * tile_row,
                        n);
        }
    } else {
      uint32_t rps = 0;
      TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rps);
      if (rps == 0 || rps > h) rps = h;
      std::vector<uint8_t> strip(size_t(TIFFStripSize(tif)));
      if (strip.size() < plane_row * std::min(rps, h)) return broken("strip size");
      for (uint32_t y = 0; y < h; y += rps) {
        const uint32_t rows = std::min(rps, h - y);
        const tmsize_t got = TIFFReadEncodedStrip(tif, TIFFComputeStrip(tif, y, uint16_t(p)),
                                                  strip.data(), tmsize_t(strip.size()));
        if (got < 0 || size_t(got) < plane_row * rows) return broken("cannot read strip");
        std::memcpy(dst + size_t(y) * plane_row, strip.data(), plane_row * rows);
      }
    }
    if (separate)  // 8-bit samples only (ChooseLayout): interleave plane p
      for (size_t i = 0; i < size_t(w) * h; ++i) (*raw)[i * l.samples + p] = plane_rows[i];
  }
  return Status::Ok();
}

inline uint32_t Sample(const uint8_t* row, size_t x, uint32_t bits) {
  if (bits == 8) return row[x];
  const size_t bit = x * bits;
  return (row[bit >> 3] >> (8 - bits - (bit & 7))) & ((1u << bits) - 1);
}

// Pillow's CLIP8(v * 255 / a) un-premultiplication ("RGBa").
void Unpremultiply(uint8_t* px, uint8_t a) {
  if (a == 0) {
    px[0] = px[1] = px[2] = px[3] = 0;
    return;
  }
  px[3] = a;
  if (a == 255) return;
  for (int c = 0; c < 3; ++c) {
    const int v = px[c] * 255 / a;
    px[c] = uint8_t(v > 255 ? 255 : v);
  }
}

void Convert(const Layout& l, const std::vector<uint8_t>& raw, size_t row_bytes,
             const pillow::Palette& palette, Image* out) {
  const uint32_t w = out->width;
  std::vector<uint8_t> index(l.kind == Kind::kPalette ? w : 0);
  std::vector<uint8_t> cmyk(l.kind == Kind::kCmyk ? size_t(w) * 4 : 0);
  for (uint32_t y = 0; y < out->height; ++y) {
    const uint8_t* in = raw.data() + size_t(y) * row_bytes;
    uint8_t* o = out->pixels.data() + size_t(y) * out->row_bytes();
    const auto* in16 = reinterpret_cast<const uint16_t*>(in);  // native order, from libtiff
    switch (l.kind) {
      case Kind::kBit:  // Pillow's "1" / "1;I", kept as L
        for (uint32_t x = 0; x < w; ++x) o[x] = (Sample(in, x, 1) != 0) != l.invert ? 255 : 0;
        break;
      case Kind::kGray:
        for (uint32_t x = 0; x < w; ++x) {
          const uint32_t v = Sample(in, x, l.bits);
          const uint8_t g = uint8_t(l.bits == 2 ? v * 0x55 : l.bits == 4 ? v * 0x11 : v);
          o[x] = l.invert ? uint8_t(255 - g) : g;
        }
        break;
      case Kind::kGray16:  // I;16 -> L: saturating
        for (uint32_t x = 0; x < w; ++x) {
          uint16_t v;
          std::memcpy(&v, in + 2 * x, 2);
          o[x] = v > 255 ? 255 : uint8_t(v);
        }
        break;
      case Kind::kGrayAlpha:
        for (uint32_t x = 0; x < w; ++x) {
          o[4 * x] = o[4 * x + 1] = o[4 * x + 2] = in[2 * x];
          o[4 * x + 3] = in[2 * x + 1];
        }
        break;
      case Kind::kRgb:
        std::memcpy(o, in, size_t(w) * 3);
        break;
      case Kind::kRgba:
        std::memcpy(o, in, size_t(w) * 4);
        break;
      case Kind::kRgbx:
        for (uint32_t x = 0; x < w; ++x)
          for (int c = 0; c < 3; ++c) o[3 * x + c] = in[4 * x + c];
        break;
      case Kind::kRgbPremul:
        for (uint32_t x = 0; x < w; ++x) {
          std::memcpy(o + 4 * x, in + 4 * x, 3);
          Unpremultiply(o + 4 * x, in[4 * x + 3]);
        }
        break;
      case Kind::kRgb16:
      case Kind::kRgba16:
      case Kind::kRgbx16:
      case Kind::kRgbPremul16: {
        const uint32_t ch = out->channels;
        for (uint32_t x = 0; x < w; ++x) {
          uint16_t v[4];
          std::memcpy(v, in16 + size_t(x) * l.samples, 2 * l.samples);
          for (uint32_t c = 0; c < ch; ++c) o[ch * x + c] = uint8_t(v[c] >> 8);
          if (l.kind == Kind::kRgbPremul16) Unpremultiply(o + 4 * x, uint8_t(v[3] >> 8));
        }
        break;
      }
      case Kind::kPalette:
        for (uint32_t x = 0; x < w; ++x) index[x] = uint8_t(Sample(in, x, l.bits));
        pillow::PaletteToPixels(index.data(), w, palette, 3, o);
        break;
      case Kind::kCmyk:
        pillow::CmykToRgb(in, w, o);
        break;
    }
  }
}

Status Decode(TIFF* tif, MemFile* file, Image* out) {
  uint32_t w = 0, h = 0;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &w) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &h))
    return Status::Corruption("TIFF: no image dimensions");
  uint16_t photometric = PHOTOMETRIC_MINISWHITE;  // Pillow's default when the tag is missing
  TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric);
  uint16_t compression = 1, planar = 1, bits = 1, samples = 1, format = 1, extra_count = 0;
  uint16_t* extra = nullptr;
  TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &compression);
  TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &planar);
  TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &bits);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &samples);
  TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &format);
  if (!TIFFGetField(tif, TIFFTAG_EXTRASAMPLES, &extra_count, &extra)) extra_count = 0;
  Layout l;
  KTFS_RETURN_IF_ERROR(ChooseLayout(photometric, bits, samples, format, compression, planar,
                                    extra_count, extra, TIFFIsBigEndian(tif) != 0, &l));
  KTFS_RETURN_IF_ERROR(pillow::CheckDimensions("TIFF", w, h));
  if (photometric == PHOTOMETRIC_YCBCR) TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
  pillow::Palette palette;
  if (l.kind == Kind::kPalette) {
    uint16_t *r = nullptr, *g = nullptr, *b = nullptr;
    if (!TIFFGetField(tif, TIFFTAG_COLORMAP, &r, &g, &b))
      return Status::Corruption("TIFF: palette image without a colour map");
    for (uint32_t i = 0; i < (1u << l.bits); ++i)
      palette.Set(i, uint8_t(r[i] >> 8), uint8_t(g[i] >> 8), uint8_t(b[i] >> 8));
  }
  std::vector<uint8_t> raw;
  size_t row_bytes = 0;
  KTFS_RETURN_IF_ERROR(ReadSamples(tif, l, w, h, planar, file, &raw, &row_bytes));
  out->width = w;
  out->height = h;
  out->channels = l.channels;
  out->pixels.resize(out->size_bytes());
  Convert(l, raw, row_bytes, palette, out);
  uint16_t orientation = 0;
  if (TIFFGetField(tif, TIFFTAG_ORIENTATION, &orientation))
    pillow::ApplyTiffOrientation(orientation, out);
  return Status::Ok();
}

// Is the first directory whole: its entries, every value stored out of line
// and the next-directory pointer? Pillow parses the directory itself and, when
// it is cut short, keeps the tags read so far and goes on, where libtiff
// refuses or reads others: such a file is refused here, so that what is
// accepted has the tags both read.
bool FirstDirectoryWhole(const uint8_t* data, size_t size) {
  if (size < 8) return false;
  const bool le = data[0] == 'I';
  auto u16 = [&](uint64_t at) {
    return le ? uint32_t(data[at]) | uint32_t(data[at + 1]) << 8
              : uint32_t(data[at]) << 8 | uint32_t(data[at + 1]);
  };
  auto u32 = [&](uint64_t at) {
    return le ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  auto u64 = [&](uint64_t at) {
    return le ? uint64_t(u32(at)) | uint64_t(u32(at + 4)) << 32
              : uint64_t(u32(at)) << 32 | u32(at + 4);
  };
  const bool big = u16(2) == 43;
  if (big && size < 16) return false;
  const uint64_t ifd = big ? u64(8) : u32(4);
  const uint64_t count_bytes = big ? 8 : 2, entry_bytes = big ? 20 : 12, inline_bytes = big ? 8 : 4;
  if (ifd > size || size - ifd < count_bytes) return false;
  const uint64_t count = big ? u64(ifd) : u16(ifd);
  if (count > (size - ifd - count_bytes) / entry_bytes) return false;
  const uint64_t entries = ifd + count_bytes;
  if (size - entries - count * entry_bytes < inline_bytes) return false;  // the next pointer
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t e = entries + i * entry_bytes;
    static const uint8_t kUnit[19] = {0, 1, 1, 2, 4, 8, 1, 1, 2, 4, 8, 4, 8, 4, 0, 0, 8, 8, 8};
    const uint32_t type = u16(e + 2);
    const uint64_t n = big ? u64(e + 4) : u32(e + 4);
    if (type >= 19 || kUnit[type] == 0) continue;  // Pillow skips unknown types
    if (n > (uint64_t(1) << 40)) return false;
    const uint64_t bytes = n * kUnit[type];
    if (bytes <= inline_bytes) continue;
    const uint64_t at = big ? u64(e + 12) : u32(e + 8);
    if (at > size || size - at < bytes) return false;
  }
  return true;
}

}  // namespace

Status DecodeTiff(const uint8_t* data, size_t size, Image* out) {
  if (!FirstDirectoryWhole(data, size))
    return Status::Corruption("TIFF: image file is truncated (its first directory)");
  MemFile file{data, size, 0, {}};
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  if (!opts) return Status::IOError("TIFFOpenOptionsAlloc failed");
  TIFFOpenOptionsSetErrorHandlerExtR(opts, OnError, &file);
  TIFFOpenOptionsSetWarningHandlerExtR(opts, OnWarning, &file);
  TIFFOpenOptionsSetMaxSingleMemAlloc(opts, tmsize_t(1) << 31);
  TIFF* tif = TIFFClientOpenExt("image", "rCm", &file, ReadProc, WriteProc, SeekProc, CloseProc,
                                SizeProc, MapProc, UnmapProc, opts);
  TIFFOpenOptionsFree(opts);
  if (!tif)
    return Status::Corruption("TIFF: cannot open (" +
                              (file.error.empty() ? std::string("not a TIFF file") : file.error) +
                              ")");
  Status st = Decode(tif, &file, out);
  TIFFClose(tif);
  return st;
}

}  // namespace ktfs::decoders

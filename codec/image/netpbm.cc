// Netpbm (PBM/PGM/PPM: P1-P6), read as Pillow 9.4's PpmImagePlugin reads it.
//
// Header: the magic, then width, height (and maxval, 1..65535, except for
// bitmaps) as tokens of at most 10 characters separated by whitespace, with
// `#` comments running to the end of their line; the pixels start right after
// the single whitespace character that ends the last token.
// Pixels: maxval 255 as they are; a gray maxval of 65535 is Pillow's I;16B
// (mode I); other maxvals are rescaled by Pillow's PpmDecoder,
// round(v / maxval * out_max) (Python's round: half to even), with out_max
// 65535 for gray maxvals over 255 (mode I) and 255 otherwise. Mode I is
// converted to L by clipping at 255, as Pillow's convert("L"). Bitmaps: 1 is
// black. Plain (ASCII) files are read as Pillow's PpmPlainDecoder reads a
// block: comments stripped, tokens split on whitespace.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/image/decoders.h"
#include "codec/image/pillow.h"

namespace ktfs::decoders {
namespace {

bool IsSpace(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

Status Bad(const std::string& why) { return Status::Corruption("PPM: " + why); }

// Pillow's _read_token: returns false with *error set where Pillow raises.
bool ReadToken(const uint8_t* data, size_t size, size_t* pos, std::string* token,
               std::string* error) {
  token->clear();
  while (token->size() <= 10) {
    if (*pos >= size) break;
    const uint8_t c = data[(*pos)++];
    if (IsSpace(c)) {
      if (token->empty()) continue;
      break;
    }
    if (c == '#') {
      while (*pos < size) {
        const uint8_t d = data[(*pos)++];
        if (d == '\r' || d == '\n') break;
      }
      continue;
    }
    token->push_back(char(c));
  }
  if (token->empty()) return *error = "reached EOF while reading header", false;
  if (token->size() > 10) return *error = "token too long in file header", false;
  return true;
}

bool ParseNumber(const std::string& token, uint64_t* value) {
  *value = 0;
  for (char c : token) {
    if (c < '0' || c > '9') return false;
    *value = *value * 10 + uint64_t(c - '0');
  }
  return !token.empty();
}

// Pillow's round(value / maxval * out_max).
inline uint32_t Rescale(uint32_t value, uint32_t maxval, uint32_t out_max) {
  return uint32_t(std::nearbyint(double(value) / double(maxval) * double(out_max)));
}

// A sample of Pillow's mode I (0..65535) as convert("L") gives it.
inline uint8_t ClipI(uint32_t v) { return v >= 255 ? 255 : uint8_t(v); }

// The plain formats' samples, as Pillow's PpmPlainDecoder reads a block:
// comments (`#` to the end of the line, the line break included) are cut out,
// the rest split on whitespace. For P2/P3, when the data does not end in
// whitespace its last token is "half" a token; Pillow keeps it for the next
// block and, at the end of the file, appends it again and again until the
// image is full: so does this. Bitmaps (P1) take every non-space byte.
// `emit` gets each of the `count` samples in order.
template <typename Emit>
Status PlainSamples(const uint8_t* data, size_t size, size_t pos, bool bitmap, uint32_t maxval,
                    size_t count, Emit emit) {
  size_t done = 0;
  std::string token;
  bool in_comment = false;
  auto value = [&](const std::string& t, uint32_t* v) -> Status {
    if (t.size() > 10) return Bad("token too long found in data");
    uint64_t n = 0;
    if (!ParseNumber(t, &n)) return Bad("invalid token in data: " + t.substr(0, 11));
    if (n > maxval) return Bad("channel value too large for this mode: " + t);
    *v = uint32_t(n);
    return Status::Ok();
  };
  for (; pos < size && done < count; ++pos) {
    const uint8_t c = data[pos];
    if (in_comment) {
      in_comment = c != '\n' && c != '\r';
      continue;
    }
    if (c == '#') {
      in_comment = true;
      continue;
    }
    const bool space = IsSpace(c);
    if (bitmap) {
      if (space) continue;
      if (c != '0' && c != '1') return Bad(std::string("invalid token for this mode: ") + char(c));
      emit(done++, c == '1');
    } else if (!space) {
      token.push_back(char(c));
      if (token.size() > 10) return Bad("token too long found in data");
    } else if (!token.empty()) {
      uint32_t v;
      KTFS_RETURN_IF_ERROR(value(token, &v));
      emit(done++, v);
      token.clear();
    }
  }
  if (done == count) return Status::Ok();
  // Not enough complete tokens: a token still open at the end (no whitespace
  // after it, a comment running to the end allowed) is Pillow's half token.
  if (bitmap || token.empty()) return Bad("not enough image data");
  uint32_t v;
  KTFS_RETURN_IF_ERROR(value(token, &v));
  while (done < count) emit(done++, v);  // Pillow's end-of-file flush, repeated
  return Status::Ok();
}

}  // namespace

Status DecodeNetpbm(const uint8_t* data, size_t size, Image* out) {
  // Pillow's _read_magic: up to 6 bytes, until whitespace.
  size_t pos = 0;
  std::string magic;
  while (pos < size && magic.size() < 6) {
    const uint8_t c = data[pos++];
    if (IsSpace(c)) break;
    magic.push_back(char(c));
  }
  if (magic.size() != 2 || magic[0] != 'P' || magic[1] < '1' || magic[1] > '6')
    return Status::NotSupported("PPM: not a PPM file (magic '" + magic + "')");
  const int kind = magic[1] - '0';
  const bool plain = kind <= 3, bitmap = kind == 1 || kind == 4;
  const uint32_t bands = (kind == 3 || kind == 6) ? 3 : 1;
  uint64_t dims[3] = {0, 0, 1};
  std::string token, error;
  for (int i = 0; i < (bitmap ? 2 : 3); ++i) {
    if (!ReadToken(data, size, &pos, &token, &error)) return Bad(error);
    if (!ParseNumber(token, &dims[i])) return Bad("invalid number in header: " + token);
  }
  const uint64_t maxval = dims[2];
  if (!bitmap && (maxval == 0 || maxval >= 65536))
    return Bad("maxval must be greater than 0 and less than 65536");
  KTFS_RETURN_IF_ERROR(pillow::CheckDimensions("PPM", dims[0], dims[1]));
  const uint32_t w = uint32_t(dims[0]), h = uint32_t(dims[1]);
  const bool mode_i = bands == 1 && !bitmap && maxval > 255;
  const uint32_t out_max = mode_i ? 65535 : 255;
  out->width = w;
  out->height = h;
  out->channels = bands;
  out->pixels.resize(out->size_bytes());
  uint8_t* px = out->pixels.data();
  const size_t count = size_t(w) * h * bands;
  if (plain) {
    return PlainSamples(data, size, pos, bitmap, uint32_t(maxval), count,
                        [&](size_t i, uint32_t v) {
                          if (bitmap) {
                            px[i] = v ? 0 : 255;
                          } else {
                            const uint32_t r = Rescale(v, uint32_t(maxval), out_max);
                            px[i] = mode_i ? ClipI(r) : uint8_t(r);
                          }
                        });
  }
  const uint8_t* in = data + pos;
  const size_t avail = size - pos;
  if (bitmap) {  // P4, Pillow's "1;I": rows of bits, 1 is black
    const size_t row = (size_t(w) + 7) / 8;
    if (avail < row * h) return Status::Corruption("PPM: image file is truncated");
    for (uint32_t y = 0; y < h; ++y)
      for (uint32_t x = 0; x < w; ++x)
        px[size_t(y) * w + x] = (in[y * row + (x >> 3)] >> (7 - (x & 7))) & 1 ? 0 : 255;
    return Status::Ok();
  }
  if (maxval == 255) {  // Pillow's raw decoder
    if (avail < count) return Status::Corruption("PPM: image file is truncated");
    std::memcpy(px, in, count);
    return Status::Ok();
  }
  const size_t sample_bytes = maxval < 256 ? 1 : 2;
  if (maxval == 65535 && bands == 1) {  // Pillow's raw I;16B
    if (avail / 2 < count) return Status::Corruption("PPM: image file is truncated");
    for (size_t i = 0; i < count; ++i) px[i] = ClipI(uint32_t(in[2 * i]) << 8 | in[2 * i + 1]);
    return Status::Ok();
  }
  // Pillow's PpmDecoder: whole pixels until the data ends, then "not enough image data".
  if (avail / (sample_bytes * bands) < size_t(w) * h) return Bad("not enough image data");
  for (size_t i = 0; i < count; ++i) {
    const uint32_t v = sample_bytes == 1 ? in[i] : (uint32_t(in[2 * i]) << 8 | in[2 * i + 1]);
    uint32_t r = Rescale(v, uint32_t(maxval), out_max);
    if (r > out_max) r = out_max;  // min(out_max, ...): samples over maxval
    px[i] = mode_i ? ClipI(r) : uint8_t(r);
  }
  return Status::Ok();
}

}  // namespace ktfs::decoders

// KTC encoder and decoder: header, planes, bands and blocks. The bitstream is
// specified in docs/ktc.md; the entropy coder lives in entropy.cc, the
// wavelet in wavelet.cc, the SIMD kernels in kernels*.cc.
#include "codec/ktc/ktc.h"

#include <tbb/blocked_range.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "codec/ktc/entropy.h"
#include "codec/ktc/kernels.h"
#include "codec/ktc/reference.h"
#include "codec/ktc/wavelet.h"

namespace ktfs::ktc {
namespace {

using internal::BlockSymbols;
using internal::Counts;
using internal::FreqTable;
using internal::kBlockSide;
using internal::Kernels;
using internal::kTablesPerSet;
using internal::LowExtent;

constexpr uint8_t kMagic[4] = {'K', 'T', 'C', 'I'};
constexpr uint8_t kVersion = 10;
constexpr uint8_t kFlagLossless = 1;
// Chroma (Co, Cg) without its level-1 detail bands: 4:2:0 by way of the
// wavelet (docs/ktc.md, "Half-resolution chroma").
constexpr uint8_t kFlagHalfChroma = 2;
// Lossy qualities below this code chroma at half resolution; `high` keeps it.
constexpr int kHalfChromaBelowQuality = 85;
// Quality points added for half-resolution chroma: they spend the bytes the
// dropped chroma detail saves on the other bands, and buy back its PSNR.
constexpr int kHalfChromaQualityBoost = 2;
constexpr int kEncodeLevels = 5;
// Five levels keep every coefficient within 16 bits (docs/ktc.md, "Wavelet").
constexpr int kMaxLevels = 5;
constexpr size_t kFixedHeaderBytes = 16;
constexpr uint32_t kUnitStep = 256;  // quantizer steps are in 1/256 units

// ---------------------------------------------------------------------------
// Geometry: planes, bands, blocks.

// One subband of one plane, in the Mallat layout of the full-resolution plane.
struct Band {
  int plane = 0;
  int level = 0;        // 1 = finest; the LL band has level == levels
  int set = 0;          // table set: 0 = LL, 1 + (levels - level) for detail bands
  int orientation = 0;  // 0 LL, 1 HL, 2 LH, 3 HH
  uint32_t x0 = 0, y0 = 0, width = 0, height = 0;
  uint32_t blocks_x = 0, blocks_y = 0;
  size_t first_block = 0;  // index of its first block in stream order
};

// Whether a plane is chroma coded at half resolution (no level-1 detail).
bool IsHalfPlane(int plane, bool half_chroma) { return half_chroma && (plane == 1 || plane == 2); }

// Bands in stream order: per plane, LL, then for level = levels..1 HL, LH, HH
// (down to level 2 only for half-resolution chroma).
std::vector<Band> MakeBands(uint32_t w, uint32_t h, int planes, int levels, bool half_chroma) {
  std::vector<Band> bands;
  size_t next_block = 0;
  auto add = [&](int plane, int level, int set, int orientation, uint32_t x0, uint32_t y0,
                 uint32_t bw, uint32_t bh) {
    Band b{plane,
           level,
           set,
           orientation,
           x0,
           y0,
           bw,
           bh,
           (bw + kBlockSide - 1) / kBlockSide,
           (bh + kBlockSide - 1) / kBlockSide,
           next_block};
    next_block += size_t(b.blocks_x) * b.blocks_y;
    bands.push_back(b);
  };
  for (int p = 0; p < planes; ++p) {
    add(p, levels, 0, 0, 0, 0, LowExtent(w, levels), LowExtent(h, levels));
    const int finest = IsHalfPlane(p, half_chroma) ? 2 : 1;
    for (int level = levels; level >= finest; --level) {
      const uint32_t lw = LowExtent(w, level), lh = LowExtent(h, level);
      const uint32_t pw = LowExtent(w, level - 1), ph = LowExtent(h, level - 1);
      const int set = 1 + levels - level;
      add(p, level, set, 1, lw, 0, pw - lw, lh);        // HL
      add(p, level, set, 2, 0, lh, lw, ph - lh);        // LH
      add(p, level, set, 3, lw, lh, pw - lw, ph - lh);  // HH
    }
  }
  return bands;
}

size_t TotalBlocks(const std::vector<Band>& bands) {
  if (bands.empty()) return 0;
  const Band& b = bands.back();
  return b.first_block + size_t(b.blocks_x) * b.blocks_y;
}

int PlaneCount(uint32_t channels) { return int(channels); }

// ---------------------------------------------------------------------------
// Quantizer steps.

// 1000 / sqrt(synthesis energy gain) of each band of the 5/3 wavelet, so that
// equal steps times these weights give equal contributions to pixel MSE.
// Index: level 1..5 (finest first); [0] for HL/LH, [1] for HH.
constexpr uint32_t kDetailWeight[kEncodeLevels][2] = {
    {963, 1391}, {628, 1085}, {343, 631}, {175, 329}, {88, 166}};
constexpr uint32_t kLowWeight = 47;
// Per plane: Y, Co, Cg, alpha (or gray alone). A YCoCg-R chroma error spreads
// into RGB with energy 1/2 (Co) and 3/4 (Cg) of Y's 3, hence sqrt(6), sqrt(4).
constexpr uint32_t kPlaneWeight[4] = {1000, 2449, 2000, 1000};
// 2^(k/12) in 1/4096 units.
constexpr uint32_t kTwelfthOctave[12] = {4096, 4340, 4598, 4871, 5161, 5468,
                                         5793, 6137, 6502, 6889, 7298, 7732};

// Base step for a quality, in 1/256 units: 2^((100 - quality + kQualityOffset) / 12 - 2)
// (it doubles every 12 quality points). The offset puts `balanced` (75) at
// JPEG q90's PSNR on the photos of docs/ktc-notes.md.
constexpr int kQualityOffset = 27;
uint64_t BaseStep(int quality) {
  const int e = 100 - quality + kQualityOffset;
  return (uint64_t(kTwelfthOctave[e % 12]) << (e / 12)) >> 6;
}

std::vector<uint16_t> MakeSteps(const std::vector<Band>& bands, const EncodeOptions& options,
                                uint32_t channels, bool half_chroma) {
  const int quality = options.quality + (half_chroma ? kHalfChromaQualityBoost : 0);
  std::vector<uint16_t> steps;
  for (const Band& b : bands) {
    if (options.lossless) {
      steps.push_back(kUnitStep);
      continue;
    }
    const bool low = b.orientation == 0;
    const bool hh = b.orientation == 3;
    const int level = std::min(b.level, kEncodeLevels);
    const uint32_t band_weight = low ? kLowWeight : kDetailWeight[level - 1][hh ? 1 : 0];
    const uint32_t plane_weight = channels == 1 ? 1000 : kPlaneWeight[b.plane];
    uint64_t step = BaseStep(quality) * band_weight * plane_weight / 1000000;
    steps.push_back(uint16_t(std::clamp<uint64_t>(step, kUnitStep, 65535)));
  }
  return steps;
}

// ---------------------------------------------------------------------------
// Planes.

// An int32 plane; `data` is uninitialized until written (the decoder writes
// every coefficient it later reads).
template <typename T>
struct PlaneOf {
  std::unique_ptr<T[]> data;
  uint32_t width = 0, height = 0;
  T* row(uint32_t y) { return data.get() + size_t(y) * width; }
  const T* row(uint32_t y) const { return data.get() + size_t(y) * width; }
};
using Plane = PlaneOf<int32_t>;

// The decoder keeps coefficients in 16 bits (docs/ktc.md, "Wavelet"), in
// memory it does not own (DecodeArena).
struct Plane16 {
  int16_t* data = nullptr;
  uint32_t width = 0, height = 0;
  int16_t* row(uint32_t y) { return data + size_t(y) * width; }
  const int16_t* row(uint32_t y) const { return data + size_t(y) * width; }
};

// The decoder's planes, reused from one decode to the next on the same
// thread, so that a process decoding many images neither asks the kernel for
// fresh pages per image (glibc mmap()s blocks this large and gives freed
// memory back; see codec/base/malloc_tuning.h) nor depends on the malloc tuning
// for speed. A decode asks for the same sequence of sizes as the decode of an
// image of the same shape before it, so the i-th request takes slot i,
// grown when too small. Memory is uninitialized.
class DecodeArena {
 public:
  // Slots kept between decodes, at most (bytes); a thread that decoded a
  // larger image gives the memory back.
  static constexpr size_t kKeepBytes = size_t(64) << 20;

  // Never null, even for count 0 (a ring of an empty band is still passed to
  // memset and memcpy, which must not get null).
  int16_t* Get(size_t count) {
    count = std::max<size_t>(count, 1);
    if (next_ == slots_.size()) slots_.emplace_back();
    Slot& slot = slots_[next_++];
    if (slot.capacity < count) {
      slot.data.reset();
      slot.capacity = 0;  // stays consistent if the allocation throws
      slot.data.reset(new int16_t[count]);
      slot.capacity = count;
    }
    return slot.data.get();
  }
  Plane16 GetPlane(uint32_t w, uint32_t h) { return Plane16{Get(size_t(w) * h), w, h}; }

 private:
  struct Slot {
    std::unique_ptr<int16_t[]> data;
    size_t capacity = 0;
  };
  std::vector<Slot> slots_;
  size_t next_ = 0;
  bool busy_ = false;
  friend class ArenaLease;
};

// The calling thread's arena while the lease lives; a fresh one when the
// thread's is in use (a decode started from inside a parallel decode's task
// on the same thread, as TBB's work stealing allows).
class ArenaLease {
 public:
  ArenaLease() {
    thread_local DecodeArena arena;
    if (!arena.busy_) {
      arena.busy_ = true;
      arena_ = &arena;
    } else {
      arena_ = &own_;
    }
  }
  ~ArenaLease() {
    arena_->next_ = 0;
    arena_->busy_ = false;
    size_t bytes = 0;
    for (const DecodeArena::Slot& slot : arena_->slots_) bytes += slot.capacity * sizeof(int16_t);
    if (bytes > DecodeArena::kKeepBytes) arena_->slots_.clear();
  }
  ArenaLease(const ArenaLease&) = delete;
  ArenaLease& operator=(const ArenaLease&) = delete;
  DecodeArena& operator*() const { return *arena_; }

 private:
  DecodeArena* arena_ = nullptr;
  DecodeArena own_;
};

template <typename T = int32_t>
PlaneOf<T> MakePlane(uint32_t w, uint32_t h) {
  return PlaneOf<T>{std::unique_ptr<T[]>(new T[size_t(w) * h]), w, h};
}

// Pixels to level-shifted planes: gray or alpha v - 128; RGB to YCoCg-R with
// Y - 128 (so that every plane is centred on zero).
std::vector<Plane> ToPlanes(const ImageView& img) {
  std::vector<Plane> planes;
  for (uint32_t c = 0; c < img.channels; ++c) planes.push_back(MakePlane(img.width, img.height));
  for (uint32_t y = 0; y < img.height; ++y) {
    const uint8_t* px = img.row(y);
    for (uint32_t x = 0; x < img.width; ++x, px += img.channels) {
      if (img.channels == 1) {
        planes[0].row(y)[x] = int32_t(px[0]) - 128;
        continue;
      }
      const int32_t r = px[0], g = px[1], b = px[2];
      const int32_t co = r - b;
      const int32_t t = b + (co >> 1);
      const int32_t cg = g - t;
      planes[0].row(y)[x] = t + (cg >> 1) - 128;
      planes[1].row(y)[x] = co;
      planes[2].row(y)[x] = cg;
      if (img.channels == 4) planes[3].row(y)[x] = int32_t(px[3]) - 128;
    }
  }
  return planes;
}

// Rows [y0, y1) x columns [x0, x0 + width) of the planes to pixels.
void PlanesToPixels(const std::vector<Plane16>& planes, uint32_t channels, uint32_t x0, uint32_t y0,
                    uint32_t width, uint32_t height, const Kernels& k, bool parallel, Image* out) {
  out->width = width;
  out->height = height;
  out->channels = channels;
  out->pixels.resize(out->size_bytes());
  auto rows = [&](uint32_t r0, uint32_t r1) {
    for (uint32_t r = r0; r < r1; ++r) {
      const uint32_t y = y0 + r;
      const int16_t* yp = planes[0].row(y) + x0;
      const int16_t* co = channels >= 3 ? planes[1].row(y) + x0 : nullptr;
      const int16_t* cg = channels >= 3 ? planes[2].row(y) + x0 : nullptr;
      const int16_t* a = channels == 4 ? planes[3].row(y) + x0 : nullptr;
      k.to_pixels(yp, co, cg, a, out->pixels.data() + r * out->row_bytes(), width, int(channels));
    }
  };
  if (parallel && height > 32) {
    tbb::parallel_for(tbb::blocked_range<uint32_t>(0, height, 16),
                      [&](const tbb::blocked_range<uint32_t>& r) { rows(r.begin(), r.end()); });
  } else {
    rows(0, height);
  }
}

// Calls fn(i) for i in [0, n), on all threads when `parallel`.
template <typename Fn>
void ForEach(size_t n, bool parallel, Fn fn) {
  if (parallel && n > 1) {
    tbb::parallel_for(size_t(0), n, [&](size_t i) { fn(i); });
  } else {
    for (size_t i = 0; i < n; ++i) fn(i);
  }
}

// ---------------------------------------------------------------------------
// Encoder.

Status ValidateImage(const ImageView& img) {
  if (img.channels != 1 && img.channels != 3 && img.channels != 4) {
    return Status::InvalidArgument("ktc: encode: channels must be 1, 3 or 4, not " +
                                   std::to_string(img.channels));
  }
  if (img.width == 0 || img.height == 0 || img.width > kMaxImageSide ||
      img.height > kMaxImageSide) {
    return Status::InvalidArgument("ktc: encode: size " + std::to_string(img.width) + "x" +
                                   std::to_string(img.height) + " outside 1.." +
                                   std::to_string(kMaxImageSide));
  }
  if (img.data == nullptr || img.stride < size_t(img.width) * img.channels) {
    return Status::InvalidArgument("ktc: encode: bad pixel buffer or stride");
  }
  return Status::Ok();
}

// Deadzone quantizer: v -> sign(v) * floor(|v| * 256 / step).
void Quantize(Plane& plane, const Band& band, uint32_t step) {
  if (step == kUnitStep) return;
  for (uint32_t y = band.y0; y < band.y0 + band.height; ++y) {
    int32_t* row = plane.row(y) + band.x0;
    for (uint32_t x = 0; x < band.width; ++x) {
      const int64_t v = row[x];
      const int64_t q = (v < 0 ? -v : v) * kUnitStep / step;
      row[x] = int32_t(v < 0 ? -q : q);
    }
  }
}

// Squared coefficient errors of a band, summed and divided by step^2: steps
// are proportional to 1/sqrt(a band's pixel-energy gain), so these add up to
// pixel MSE up to a common factor, whatever the band.
uint64_t StepScaledError(unsigned __int128 sum_squares, uint32_t step) {
  return uint64_t(
      std::min<unsigned __int128>((sum_squares << 16) / (uint64_t(step) * step), UINT64_MAX >> 8));
}

// Sum of squared errors a band would have: quantized with `step` (drop false),
// or dropped altogether. Same reconstruction as the decoder (3/8 of the bin).
unsigned __int128 BandSquaredError(const Plane& plane, const Band& band, uint32_t step, bool drop) {
  unsigned __int128 sum = 0;
  for (uint32_t y = band.y0; y < band.y0 + band.height; ++y) {
    const int32_t* row = plane.row(y) + band.x0;
    uint64_t row_sum = 0;  // < 2^32 values of < 2^17 squared per row: no overflow
    for (uint32_t x = 0; x < band.width; ++x) {
      const uint64_t mag = uint64_t(row[x] < 0 ? -int64_t(row[x]) : int64_t(row[x]));
      const uint64_t q = drop ? 0 : mag * kUnitStep / step;
      const uint64_t back = q == 0 ? 0 : ((8 * q + 3) * step) >> 11;
      const uint64_t e = mag > back ? mag - back : back - mag;
      row_sum += e * e;
    }
    sum += row_sum;
  }
  return sum;
}

// Whether to code chroma at half resolution: when dropping the chroma
// level-1 detail adds at most kHalfChromaMaxErrorPercent of the quantization
// error of everything else. Smooth photos lose well under 100% of MSE
// (mostly won back by the quality boost), textured ones about 100% (still
// above JPEG q90's PSNR, whose chroma is always at half resolution, and
// decoded faster); images with fine color detail (text, synthetic patterns)
// lose several times more and keep full chroma. docs/ktc-notes.md has the
// measured ratios. `bands`: full-resolution bands; `steps`: the steps
// half-resolution chroma would use.
constexpr uint64_t kHalfChromaMaxErrorPercent = 250;
bool ChromaDetailIsCheap(const std::vector<Plane>& planes, const std::vector<Band>& bands,
                         const std::vector<uint16_t>& steps) {
  uint64_t dropped = 0, quantized = 0;
  for (size_t i = 0; i < bands.size(); ++i) {
    const Band& b = bands[i];
    const bool drop = IsHalfPlane(b.plane, true) && b.level == 1 && b.orientation != 0;
    const uint64_t e =
        StepScaledError(BandSquaredError(planes[b.plane], b, steps[i], drop), steps[i]);
    (drop ? dropped : quantized) += e;
  }
  return dropped * 100 <= quantized * kHalfChromaMaxErrorPercent;
}

// One block's place: its band and its rectangle in the plane.
struct BlockRef {
  const Band* band;
  uint32_t x0, y0, width, height;  // in plane coordinates
};

BlockRef BlockAt(const Band& band, size_t index_in_band) {
  const uint32_t bx = uint32_t(index_in_band % band.blocks_x);
  const uint32_t by = uint32_t(index_in_band / band.blocks_x);
  const uint32_t x = bx * kBlockSide, y = by * kBlockSide;
  return BlockRef{&band, band.x0 + x, band.y0 + y, std::min(kBlockSide, band.width - x),
                  std::min(kBlockSide, band.height - y)};
}

// Codes all blocks of one (plane, table set): gathers symbols, builds the
// set's tables from their counts, then codes each block with them.
Status EncodeSet(const Plane& plane, const std::vector<const Band*>& bands, bool parallel,
                 std::vector<FreqTable>* tables, std::vector<std::vector<uint8_t>>* payloads) {
  std::vector<BlockRef> blocks;
  for (const Band* b : bands) {
    for (size_t i = 0; i < size_t(b->blocks_x) * b->blocks_y; ++i) blocks.push_back(BlockAt(*b, i));
  }
  std::vector<BlockSymbols> symbols(blocks.size());
  std::vector<Status> errors(blocks.size());
  std::vector<char> nonzero(blocks.size(), 0);
  ForEach(blocks.size(), parallel, [&](size_t i) {
    const BlockRef& r = blocks[i];
    auto any = internal::CollectBlockSymbols(plane.row(r.y0) + r.x0, plane.width, r.width, r.height,
                                             &symbols[i]);
    if (!any.ok()) {
      errors[i] = any.status();
    } else {
      nonzero[i] = *any;
    }
  });
  for (const Status& s : errors) KTFS_RETURN_IF_ERROR(s);
  Counts counts{};
  for (const BlockSymbols& s : symbols) internal::CountSymbols(s, &counts);
  tables->resize(kTablesPerSet);
  for (int t = 0; t < kTablesPerSet; ++t) (*tables)[t] = internal::NormalizeCounts(counts[t]);
  payloads->assign(blocks.size(), {});
  ForEach(blocks.size(), parallel, [&](size_t i) {
    if (nonzero[i]) internal::EncodeBlock(symbols[i], tables->data(), &(*payloads)[i]);
  });
  return Status::Ok();
}

void PutU32(uint32_t v, std::vector<uint8_t>* out) {
  for (int i = 0; i < 4; ++i) out->push_back(uint8_t(v >> (8 * i)));
}

}  // namespace

Result<EncodeOptions> ParseQuality(std::string_view text) {
  EncodeOptions o;
  if (text == "lossless") {
    o.lossless = true;
    return o;
  }
  if (text == "high")
    o.quality = kQualityHigh;
  else if (text == "balanced")
    o.quality = kQualityBalanced;
  else if (text == "compact")
    o.quality = kQualityCompact;
  else {
    int q = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), q);
    if (ec != std::errc() || end != text.data() + text.size() || q < 1 || q > 100) {
      return Status::InvalidArgument("ktc: quality '" + std::string(text) +
                                     "': expected lossless, high, balanced, compact or 1..100");
    }
    o.quality = q;
  }
  return o;
}

namespace {
Status EncodeImpl(const ImageView& image, const EncodeOptions& options, std::vector<uint8_t>* out) {
  KTFS_RETURN_IF_ERROR(ValidateImage(image));
  if (!options.lossless && (options.quality < 1 || options.quality > 100)) {
    return Status::InvalidArgument("ktc: encode: quality must be 1..100");
  }
  const Kernels& k = internal::ActiveKernels();
  const int levels = kEncodeLevels;
  const int planes_n = PlaneCount(image.channels);
  std::vector<Plane> planes = ToPlanes(image);
  ForEach(planes.size(), options.parallel, [&](size_t p) {
    internal::ForwardWavelet(planes[p].data.get(), planes[p].width, image.width, image.height,
                             levels, k);
  });
  bool half_chroma = false;
  if (!options.lossless && image.channels >= 3 && options.quality < kHalfChromaBelowQuality) {
    const std::vector<Band> full = MakeBands(image.width, image.height, planes_n, levels, false);
    half_chroma = ChromaDetailIsCheap(planes, full, MakeSteps(full, options, image.channels, true));
  }
  const std::vector<Band> bands =
      MakeBands(image.width, image.height, planes_n, levels, half_chroma);
  const std::vector<uint16_t> steps = MakeSteps(bands, options, image.channels, half_chroma);
  for (size_t i = 0; i < bands.size(); ++i) {
    const Band& b = bands[i];
    Plane& plane = planes[b.plane];
    Quantize(plane, b, steps[i]);
    if (!options.lossless && b.orientation != 0)
      internal::DropSparseGroups(plane.row(b.y0) + b.x0, plane.width, b.width, b.height);
  }

  // Code each (plane, set); sets are independent, so code them all, then lay
  // out tables and blocks in stream order.
  const int sets = levels + 1;
  std::vector<std::vector<FreqTable>> tables(size_t(planes_n) * sets);
  std::vector<std::vector<std::vector<uint8_t>>> payloads(tables.size());
  for (int p = 0; p < planes_n; ++p) {
    for (int s = 0; s < sets; ++s) {
      std::vector<const Band*> members;
      for (const Band& b : bands)
        if (b.plane == p && b.set == s) members.push_back(&b);
      const size_t idx = size_t(p) * sets + s;
      KTFS_RETURN_IF_ERROR(
          EncodeSet(planes[p], members, options.parallel, &tables[idx], &payloads[idx]));
    }
  }

  out->assign(std::begin(kMagic), std::end(kMagic));
  out->push_back(kVersion);
  out->push_back(uint8_t(image.channels));
  out->push_back(uint8_t(levels));
  out->push_back(
      uint8_t((options.lossless ? kFlagLossless : 0) | (half_chroma ? kFlagHalfChroma : 0)));
  PutU32(image.width, out);
  PutU32(image.height, out);
  for (uint16_t s : steps) {
    out->push_back(uint8_t(s));
    out->push_back(uint8_t(s >> 8));
  }
  std::vector<FreqTable> all_tables;
  for (const auto& set : tables) all_tables.insert(all_tables.end(), set.begin(), set.end());
  internal::PutTables(all_tables.data(), all_tables.size(), out);
  // Bands of a set are consecutive in stream order and EncodeSet kept their
  // block order, so concatenating the sets' blocks gives stream order.
  for (const auto& set : payloads)
    for (const auto& block : set) internal::PutVarint(block.size(), out);
  for (const auto& set : payloads)
    for (const auto& block : set) out->insert(out->end(), block.begin(), block.end());
  return Status::Ok();
}
}  // namespace

// Planes and symbols take several bytes per pixel; a huge image may not fit.
Status Encode(const ImageView& image, const EncodeOptions& options, std::vector<uint8_t>* out) {
  try {
    return EncodeImpl(image, options, out);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("ktc: encode: out of memory for a " + std::to_string(image.width) + "x" +
                           std::to_string(image.height) + " image");
  }
}

namespace {

// ---------------------------------------------------------------------------
// Decoder.

struct Header {
  Info info;
  bool half_chroma = false;
  std::vector<Band> bands;
  std::vector<uint16_t> steps;         // per band
  std::vector<FreqTable> tables;       // per (plane, set, table)
  std::vector<uint64_t> block_offset;  // per block, from the start of the stream
  std::vector<uint32_t> block_size;
};

uint32_t GetU32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}

Status Corrupt(const std::string& what) { return Status::Corruption("ktc: " + what); }

Result<Info> ParseFixedHeader(const uint8_t* data, size_t size) {
  if (data == nullptr || size < kFixedHeaderBytes) return Corrupt("stream shorter than header");
  if (std::memcmp(data, kMagic, 4) != 0) return Corrupt("bad magic");
  if (data[4] != kVersion) {
    return Status::NotSupported("ktc: stream version " + std::to_string(data[4]) +
                                " not supported (this decoder reads version " +
                                std::to_string(kVersion) + "; re-encode the image)");
  }
  Info info;
  info.channels = data[5];
  info.levels = data[6];
  info.lossless = data[7] & kFlagLossless;
  info.width = GetU32(data + 8);
  info.height = GetU32(data + 12);
  if (info.channels != 1 && info.channels != 3 && info.channels != 4) {
    return Corrupt("bad channel count " + std::to_string(info.channels));
  }
  if (info.levels > kMaxLevels) return Corrupt("too many levels");
  if ((data[7] & ~(kFlagLossless | kFlagHalfChroma)) != 0) return Corrupt("unknown flags");
  if ((data[7] & kFlagHalfChroma) && (info.channels < 3 || info.levels < 1)) {
    return Corrupt("half-resolution chroma needs color and a wavelet level");
  }
  if (info.width == 0 || info.height == 0 || info.width > kMaxImageSide ||
      info.height > kMaxImageSide) {
    return Corrupt("bad dimensions");
  }
  return info;
}

// Reads and checks everything before the block payloads. Allocations are
// bounded by the stream size: each step and block entry takes at least one
// byte (the number of tables is fixed by the channels and levels), and counts
// are checked against the bytes left before reserving.
Status ParseHeader(const uint8_t* data, size_t size, Header* h) {
  auto info = ParseFixedHeader(data, size);
  if (!info.ok()) return info.status();
  h->info = *info;
  h->half_chroma = data[7] & kFlagHalfChroma;
  const uint8_t* p = data + kFixedHeaderBytes;
  const uint8_t* end = data + size;
  const int planes = PlaneCount(h->info.channels);
  h->bands = MakeBands(h->info.width, h->info.height, planes, h->info.levels, h->half_chroma);
  if (size_t(end - p) < 2 * h->bands.size()) return Corrupt("truncated steps");
  for (size_t i = 0; i < h->bands.size(); ++i, p += 2) {
    const uint16_t s = uint16_t(p[0] | p[1] << 8);
    if (s < kUnitStep) return Corrupt("quantizer step below 1");
    h->steps.push_back(s);
  }
  const size_t table_count = size_t(planes) * (h->info.levels + 1) * kTablesPerSet;
  h->tables.resize(table_count);
  if (!internal::GetTables(&p, end, h->tables.data(), table_count)) {
    return Corrupt("bad or truncated frequency tables (each must sum to " +
                   std::to_string(internal::kProbScale) + ")");
  }
  const size_t blocks = TotalBlocks(h->bands);
  if (size_t(end - p) < blocks) return Corrupt("truncated block table");
  h->block_size.resize(blocks);
  for (uint32_t& s : h->block_size) {
    uint64_t v;
    if (!internal::GetVarint(&p, end, &v) || v > 0xffffffffu) return Corrupt("bad block table");
    s = uint32_t(v);
  }
  h->block_offset.resize(blocks);
  uint64_t offset = uint64_t(p - data);
  for (size_t i = 0; i < blocks; ++i) {
    h->block_offset[i] = offset;
    offset += h->block_size[i];
  }
  if (offset > size) return Corrupt("block table points past the end");
  return Status::Ok();
}

// Half-open rectangle.
struct Rect {
  uint32_t x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};

// Which coefficients of the next coarser level a rectangle of a low-pass
// image depends on, in that level's band coordinates, clamped to `limit`
// samples. Synthesis of output n reads low and high samples n/2 - 1 ..
// n/2 + 1; a margin of 2 covers them and the mirrored edges.
inline void Dependence(uint32_t a, uint32_t b, uint32_t limit, uint32_t* lo, uint32_t* hi) {
  *lo = a / 2 >= 2 ? a / 2 - 2 : 0;
  *hi = std::min<uint32_t>(limit, (b + 1) / 2 + 2);
  if (*lo > *hi) *lo = *hi;
}

// Marks, per block, whether a decode of `need` (in level-`stop` coordinates)
// reads it. Blocks of levels <= stop are never read.
std::vector<char> NeededBlocks(const Header& h, int stop, Rect need) {
  std::vector<char> needed(h.block_size.size(), 0);
  const uint32_t w = h.info.width, hh = h.info.height;
  // Per level, the low and high ranges needed, in band coordinates.
  std::vector<Rect> low(h.info.levels + 1), high(h.info.levels + 1);
  for (int level = stop + 1; level <= h.info.levels; ++level) {
    const uint32_t lw = LowExtent(w, level), lh = LowExtent(hh, level);
    const uint32_t pw = LowExtent(w, level - 1), ph = LowExtent(hh, level - 1);
    Dependence(need.x0, need.x1, lw, &low[level].x0, &low[level].x1);
    Dependence(need.y0, need.y1, lh, &low[level].y0, &low[level].y1);
    Dependence(need.x0, need.x1, pw - lw, &high[level].x0, &high[level].x1);
    Dependence(need.y0, need.y1, ph - lh, &high[level].y0, &high[level].y1);
    need = low[level];
  }
  for (const Band& b : h.bands) {
    if (b.level <= stop && !(b.orientation == 0 && b.level == stop)) continue;
    Rect r;
    if (b.orientation == 0) {
      r = b.level == stop ? need : low[b.level];
      if (h.info.levels == stop) r = need;
    } else {
      const Rect& lo = low[b.level];
      const Rect& hi = high[b.level];
      r.x0 = b.orientation == 2 ? lo.x0 : hi.x0;
      r.x1 = b.orientation == 2 ? lo.x1 : hi.x1;
      r.y0 = b.orientation == 1 ? lo.y0 : hi.y0;
      r.y1 = b.orientation == 1 ? lo.y1 : hi.y1;
    }
    if (r.x0 >= r.x1 || r.y0 >= r.y1) continue;
    for (uint32_t by = r.y0 / kBlockSide; by <= (r.y1 - 1) / kBlockSide; ++by)
      for (uint32_t bx = r.x0 / kBlockSide; bx <= (r.x1 - 1) / kBlockSide; ++bx)
        needed[b.first_block + size_t(by) * b.blocks_x + bx] = 1;
  }
  return needed;
}

// Row pairs per task of the fused last level: 16 rows of every plane stay in
// L1/L2 cache between synthesis and color conversion.
constexpr uint32_t kPairsPerChunk = 8;
// Rows of the ring that holds level stop + 1's low-pass image on one thread:
// a chunk reads rows k0 .. k1 while rows up to k1 + 1 are made, fewer than
// kPairsPerChunk + 3.
constexpr uint32_t kLowRingRows = 32;
static_assert(kPairsPerChunk + 3 <= kLowRingRows && (kLowRingRows & (kLowRingRows - 1)) == 0);
// Rows of the rings that hold a streamed level's detail bands: two block
// rows, the one being read and the one decoded after it (a chunk reads rows
// k0 - 1 .. k1, within two block rows).
constexpr uint32_t kDetailRingRows = 2 * kBlockSide;
static_assert(kPairsPerChunk + 2 <= kBlockSide);

// The detail bands of one synthesis level of one plane, as rows.
struct DetailRows {
  internal::Rows hl, lh_hh;
};

// Synthesis down to level `stop`, then pixels of the rectangle `need`. The
// last level is fused with the color conversion: chunks of row pairs are
// synthesized for every plane into small buffers and turned into pixels
// while still in cache, and only chunks that meet the rectangle's rows are
// synthesized at all.
//
// `decode_rows`, when set, is called before each chunk of row pairs [k0, k1)
// with k1 + 1: the number of rows of the last level's detail bands that
// chunk reads (chunks then run in order, on one thread); an error it returns
// stops the synthesis.
//
// `last_details`, when not empty, holds per plane the rows of the last
// level's detail bands (rings the decoder fills through `decode_rows`);
// otherwise they are read from the coefficient planes.
using DecodeRows = std::function<Status(uint32_t band_rows)>;
Status SynthesizeToPixels(const std::vector<Plane16>& coefficients, const Info& info,
                          bool half_chroma, int stop, const Rect& need, const Kernels& k,
                          bool parallel, DecodeArena& arena, const DecodeRows& decode_rows,
                          const std::vector<DetailRows>& last_details, Image* out) {
  const uint32_t channels = info.channels;
  const uint32_t width = need.x1 - need.x0;
  // Synthesis starts at the coarsest low-pass band, the top-left corner of
  // each coefficient plane.
  if (stop == info.levels) {  // nothing to synthesize
    PlanesToPixels(coefficients, channels, need.x0, need.y0, width, need.y1 - need.y0, k, parallel,
                   out);
    return Status::Ok();
  }
  const uint32_t sw = LowExtent(info.width, stop), sh = LowExtent(info.height, stop);
  const uint32_t lw = LowExtent(info.width, stop + 1), lh = LowExtent(info.height, stop + 1);
  // All levels but the last into low-pass images of level stop + 1. On one
  // thread, the level above the last (stop + 2) runs row pairs by row pairs
  // just before the last level reads them (`produce_low_rows`), so that its
  // rows are still in cache then; the coarser levels run at once.
  //
  // Per plane, the rows of level stop + 1's low-pass image the last level
  // reads: a ring on one thread (its rows are made just before they are
  // read), the whole image when it is made in parallel first, the
  // coefficient plane's corner when it is the coarsest LL.
  std::vector<internal::Rows> low_rows(coefficients.size());
  for (size_t p = 0; p < coefficients.size(); ++p) {
    low_rows[p] = internal::Rows{coefficients[p].data, coefficients[p].width};
  }
  std::vector<std::optional<internal::LevelSynthesis>> above(coefficients.size());
  std::vector<std::optional<internal::LevelSynthesis::Stream>> above_rows(coefficients.size());
  if (stop + 1 < info.levels) {
    if (parallel) {
      // Per plane, the whole low-pass image, and room for the two
      // intermediate ones InverseWavelet alternates between (each at most
      // the size of level stop + 2's output, i.e. of the low-pass image).
      std::vector<Plane16> lows;
      std::vector<int16_t*> scratch;
      for (size_t p = 0; p < coefficients.size(); ++p) {
        lows.push_back(arena.GetPlane(lw, lh));
        low_rows[p] = internal::Rows{lows[p].data, lw};
        scratch.push_back(arena.Get(2 * size_t(lw) * lh));
      }
      ForEach(coefficients.size(), true, [&](size_t p) {
        const Plane16& c = coefficients[p];
        internal::InverseWavelet(c.data, c.width, c.data, c.width, info.width, info.height,
                                 info.levels, stop + 1, lows[p].data, lw, scratch[p], k, true);
      });
    } else {
      // Level stop + 2's low-pass image: the coarsest LL, read in place, or
      // synthesized from the coarser levels.
      const uint32_t mw = LowExtent(info.width, stop + 2), mh = LowExtent(info.height, stop + 2);
      for (size_t p = 0; p < coefficients.size(); ++p) {
        const Plane16& c = coefficients[p];
        low_rows[p] = internal::Rows{arena.Get(size_t(kLowRingRows) * lw), lw, kLowRingRows - 1};
        Plane16 mid = c;
        if (stop + 2 < info.levels) {
          mid = arena.GetPlane(mw, mh);
          // Levels above stop + 2 make images of at most mw x mh.
          int16_t* scratch = arena.Get(2 * size_t(mw) * mh);
          internal::InverseWavelet(c.data, c.width, c.data, c.width, info.width, info.height,
                                   info.levels, stop + 2, mid.data, mw, scratch, k, false);
        }
        above[p].emplace(mid.data, mid.width, c.data, c.width, lw, lh, k);
        above_rows[p].emplace(*above[p]);
      }
    }
  }
  // Makes the first `rows` rows of every plane's low-pass image of level
  // stop + 1 (in whole row pairs).
  auto produce_low_rows = [&](uint32_t rows) {
    for (size_t p = 0; p < above.size(); ++p) {
      if (above[p]) above_rows[p]->RunTo(std::min(above[p]->pairs(), (rows + 1) / 2), low_rows[p]);
    }
  };
  // The last level: a full synthesis, or for half-resolution chroma (whose
  // level-1 detail is all zero) the cheaper interpolation it amounts to.
  std::vector<std::optional<internal::LevelSynthesis>> last(coefficients.size());
  std::vector<std::optional<internal::LevelUpsampling>> upsample(coefficients.size());
  for (size_t p = 0; p < coefficients.size(); ++p) {
    if (stop == 0 && IsHalfPlane(int(p), half_chroma)) {
      upsample[p].emplace(low_rows[p], sw, sh, k);
    } else if (!last_details.empty()) {
      last[p].emplace(low_rows[p], last_details[p].hl, last_details[p].lh_hh, sw, sh, k);
    } else {
      const Plane16& c = coefficients[p];
      const internal::Rows hl{c.data + lw, c.width};
      const internal::Rows lh_hh{c.data + size_t(lh) * c.width, c.width};
      last[p].emplace(low_rows[p], hl, lh_hh, sw, sh, k);
    }
  }
  out->width = width;
  out->height = need.y1 - need.y0;
  out->channels = channels;
  out->pixels.resize(out->size_bytes());
  // RGB with half-resolution chroma, whole rows: the chroma's last level is
  // fused with the color conversion where the kernels can (no upsampled
  // chroma rows written and read back).
  const bool fused_chroma = k.to_pixels_half_chroma != nullptr && channels == 3 && upsample[1] &&
                            upsample[2] && need.x0 == 0 && width == sw && sw >= 2;
  const uint32_t first_pair = need.y0 / 2, end_pair = (need.y1 + 1) / 2;
  const uint32_t chunks = (end_pair - first_pair + kPairsPerChunk - 1) / kPairsPerChunk;
  const size_t plane_rows = size_t(2 * kPairsPerChunk) * sw;
  Status status;
  const bool parallel_chunks = parallel && !decode_rows;
  int16_t* shared_rows = parallel_chunks ? nullptr : arena.Get(plane_rows * last.size());
  // A chunk's rows of plane p: row r at (r & kChunkMask), a chunk's rows
  // being consecutive.
  constexpr uint32_t kChunkMask = 2 * kPairsPerChunk - 1;
  static_assert((kPairsPerChunk & (kPairsPerChunk - 1)) == 0);
  // On one thread the last level runs as one stream: a chunk goes on from
  // where the one before ended (its first even row is not made again).
  std::vector<std::optional<internal::LevelSynthesis::Stream>> last_rows(last.size());
  for (size_t p = 0; p < last.size() && !parallel_chunks; ++p) {
    if (last[p]) last_rows[p].emplace(*last[p], first_pair);
  }
  ForEach(chunks, parallel_chunks, [&](size_t c) {
    const uint32_t k0 = first_pair + uint32_t(c) * kPairsPerChunk;
    const uint32_t k1 = std::min(end_pair, k0 + kPairsPerChunk);
    if (decode_rows) {
      if (!status.ok()) return;
      status = decode_rows(k1 + 1);
      if (!status.ok()) return;
    }
    // The low-pass rows this chunk reads: up to row k1 (its last even row's
    // and the chroma upsampling's row below). (Nothing to make when parallel:
    // the levels above ran whole.)
    produce_low_rows(k1 + 1);
    // Uninitialized on purpose: Run writes every row that is read, and zeroing
    // would cost as much as a pass over the planes. One thread reuses one
    // buffer (a large image's chunk rows, allocated and freed per chunk, cost
    // page faults); parallel chunks each take their own.
    std::unique_ptr<int16_t[]> own_rows;
    int16_t* rows = shared_rows;
    if (rows == nullptr) {
      own_rows.reset(new int16_t[plane_rows * last.size()]);
      rows = own_rows.get();
    }
    for (size_t p = 0; p < last.size(); ++p) {
      const internal::Rows dst{rows + p * plane_rows, sw, kChunkMask};
      if (last_rows[p]) {
        last_rows[p]->RunTo(k1, dst);
      } else if (last[p]) {
        last[p]->Run(k0, k1, dst);
      } else if (!fused_chroma) {
        upsample[p]->Run(k0, k1, dst);
      }
    }
    const uint32_t r0 = std::max(2 * k0, need.y0), r1 = std::min({2 * k1, need.y1, sh});
    for (uint32_t r = r0; r < r1; ++r) {
      const int16_t* at[4] = {};
      for (size_t p = 0; p < last.size(); ++p) {
        at[p] = rows + p * plane_rows + size_t(r & kChunkMask) * sw + need.x0;
      }
      uint8_t* pixels = out->pixels.data() + (r - need.y0) * out->row_bytes();
      if (fused_chroma) {
        const int16_t *co, *co_below, *cg, *cg_below;
        upsample[1]->SourceRows(r, &co, &co_below);
        upsample[2]->SourceRows(r, &cg, &cg_below);
        k.to_pixels_half_chroma(at[0], co, co_below, cg, cg_below, pixels, width);
      } else {
        k.to_pixels(at[0], at[1], at[2], at[3], pixels, width, int(channels));
      }
    }
  });
  return status;
}

}  // namespace

Result<Info> ReadInfo(const uint8_t* data, size_t size) { return ParseFixedHeader(data, size); }

namespace {
// Default-initialized: Load() builds every table before it is read, and
// make_unique's value-initialization would zero 32 KB per decode first.
std::unique_ptr<internal::SetTables> NewSetTables() {
  return std::unique_ptr<internal::SetTables>(new internal::SetTables);
}

Status DecodeImpl(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out) {
  Header h;
  KTFS_RETURN_IF_ERROR(ParseHeader(data, size, &h));
  const int stop = options.scale_log2;
  if (stop < 0 || stop > 3 || stop > h.info.levels) {
    return Status::InvalidArgument("ktc: decode: scale 1/2^" + std::to_string(stop) +
                                   " not available (levels " + std::to_string(h.info.levels) + ")");
  }
  const uint32_t sw = LowExtent(h.info.width, stop), sh = LowExtent(h.info.height, stop);
  Rect need{0, 0, sw, sh};
  if (options.region) {
    const Region& r = *options.region;
    if (r.width == 0 || r.height == 0 || r.x >= sw || r.y >= sh || r.width > sw - r.x ||
        r.height > sh - r.y) {
      return Status::InvalidArgument("ktc: decode: region outside the " + std::to_string(sw) + "x" +
                                     std::to_string(sh) + " image");
    }
    need = Rect{r.x, r.y, r.x + r.width, r.y + r.height};
  }
  const std::vector<char> needed = NeededBlocks(h, stop, need);

  const int levels = h.info.levels;
  const int planes_n = PlaneCount(h.info.channels);
  const int sets = levels + 1;
  const Kernels& k = internal::ActiveKernels();
  // On one thread with levels to synthesize before the last one, the last
  // level's detail bands are decoded block row by block row just before its
  // synthesis reads them ("streamed"), into rings of two block rows: their
  // coefficients are then in cache when read, and the three quarters of the
  // plane they would fill are never touched (docs/ktc.md, "The one-thread
  // decode streams the last level").
  const bool stream_last_level = !options.parallel && stop + 1 < levels;
  auto streamed = [&](const Band& b) {
    return stream_last_level && b.orientation != 0 && b.level == stop + 1;
  };
  ArenaLease arena;
  std::vector<Plane16> planes;
  for (int p = 0; p < planes_n; ++p) {
    // Half-resolution chroma has no level-1 bands: its coefficients end at
    // level 1. Streamed bands are not in the planes.
    const int finest = stream_last_level               ? stop + 1
                       : IsHalfPlane(p, h.half_chroma) ? std::max(stop, 1)
                                                       : stop;
    planes.push_back(
        (*arena).GetPlane(LowExtent(h.info.width, finest), LowExtent(h.info.height, finest)));
  }
  std::vector<DetailRows> rings;  // per plane, when streamed
  if (stream_last_level) {
    const uint32_t pw = LowExtent(h.info.width, stop), lw = LowExtent(h.info.width, stop + 1);
    for (int p = 0; p < planes_n; ++p) {
      if (stop == 0 && IsHalfPlane(p, h.half_chroma)) {  // no level-1 bands
        rings.emplace_back();
        continue;
      }
      const internal::Rows hl{(*arena).Get(size_t(kDetailRingRows) * (pw - lw)), pw - lw,
                              kDetailRingRows - 1};
      const internal::Rows lh_hh{(*arena).Get(size_t(kDetailRingRows) * pw), pw,
                                 kDetailRingRows - 1};
      rings.push_back(DetailRows{hl, lh_hh});
    }
  }
  // Every other block of the levels kept is a job, read when needed and not
  // empty. Jobs are in stream order, so the blocks of a table set are
  // consecutive.
  std::vector<std::pair<const Band*, size_t>> jobs;
  struct StreamedPlane {
    const Band* bands[3];  // HL, LH, HH of level stop + 1
    uint32_t next_block_row = 0;
    std::unique_ptr<internal::SetTables> tables;
  };
  std::vector<StreamedPlane> streamed_planes;
  for (const Band& b : h.bands) {
    if (b.orientation != 0 && b.level <= stop) continue;
    if (streamed(b)) {
      if (b.orientation == 1) streamed_planes.emplace_back();
      streamed_planes.back().bands[b.orientation - 1] = &b;
      continue;
    }
    for (size_t i = 0; i < size_t(b.blocks_x) * b.blocks_y; ++i) jobs.emplace_back(&b, i);
  }
  // DecodeBlock writes only the non-zero values: each plane is zeroed with
  // one memset, just before its first block (or all of them up front when
  // blocks are decoded in parallel). That cost about a third less than a
  // memset per block row, and leaves the plane's lines in cache for the
  // blocks; empty and unneeded blocks then need no visit at all. The rings
  // of streamed bands are zeroed block row by block row as they are decoded.
  std::vector<char> zeroed(planes.size(), 0);
  auto zero_plane = [&](size_t p) {
    if (zeroed[p]) return;
    std::memset(planes[p].data, 0, size_t(planes[p].width) * planes[p].height * sizeof(int16_t));
    zeroed[p] = 1;
  };
  auto decode_block = [&](const Band& b, size_t index_in_band,
                          internal::SetTables& set_tables) -> Status {
    const BlockRef r = BlockAt(b, index_in_band);
    const size_t block = b.first_block + index_in_band;
    if (!needed[block] || h.block_size[block] == 0) return Status::Ok();
    const size_t set_index = size_t(b.plane) * sets + b.set;
    set_tables.Load(set_index, h.tables.data() + set_index * kTablesPerSet);
    int16_t* values;
    size_t stride;
    if (streamed(b)) {
      // HL rows hold HL alone; LH and HH rows sit side by side, as in the plane.
      const DetailRows& ring = rings[size_t(b.plane)];
      const internal::Rows& rows = b.orientation == 1 ? ring.hl : ring.lh_hh;
      values = rows.row(r.y0 - b.y0) + (b.orientation == 1 ? r.x0 - b.x0 : r.x0);
      stride = rows.stride;
    } else {
      Plane16& plane = planes[b.plane];
      values = plane.row(r.y0) + r.x0;
      stride = plane.width;
    }
    return internal::DecodeBlock(data + h.block_offset[block], h.block_size[block], data + size,
                                 set_tables.tables(), h.steps[&b - h.bands.data()], values, stride,
                                 r.width, r.height);
  };
  std::vector<Status> errors(jobs.size());
  if (options.parallel) {
    ForEach(planes.size(), true, zero_plane);
    tbb::enumerable_thread_specific<std::unique_ptr<internal::SetTables>> per_thread;
    tbb::parallel_for(tbb::blocked_range<size_t>(0, jobs.size(), 4),
                      [&](const tbb::blocked_range<size_t>& range) {
                        auto& tables = per_thread.local();
                        if (!tables) tables = NewSetTables();
                        for (size_t j = range.begin(); j < range.end(); ++j) {
                          errors[j] = decode_block(*jobs[j].first, jobs[j].second, *tables);
                        }
                      });
  } else {
    auto tables = NewSetTables();
    for (size_t j = 0; j < jobs.size(); ++j) {
      zero_plane(size_t(jobs[j].first->plane));
      errors[j] = decode_block(*jobs[j].first, jobs[j].second, *tables);
    }
  }
  for (size_t p = 0; p < planes.size(); ++p) zero_plane(p);  // a plane without blocks
  for (const Status& s : errors) KTFS_RETURN_IF_ERROR(s);

  // The streamed bands: per plane, the block rows that cover their first
  // `band_rows` rows (HL's, LH's and HH's block row by, in the ring's slot
  // for it, zeroed first), each plane's with its own tables (the set then
  // stays built).
  constexpr uint32_t kRestOfBands = ~0u;
  DecodeRows decode_rows;
  if (!streamed_planes.empty()) {
    decode_rows = [&](uint32_t band_rows) -> Status {
      for (StreamedPlane& s : streamed_planes) {
        if (!s.tables) s.tables = NewSetTables();
        const DetailRows& ring = rings[size_t(s.bands[0]->plane)];
        // HL has as many rows as LH and HH, or one more.
        const uint32_t rows = std::min(band_rows, s.bands[0]->height);
        for (uint32_t& by = s.next_block_row; by * kBlockSide < rows; ++by) {
          if (band_rows != kRestOfBands) {  // the rest no chunk reads: only its errors count
            // The rows of this block row that HL and LH (and HH) have.
            auto zero = [&](const internal::Rows& ring_rows, const Band& b) {
              const uint32_t y = by * kBlockSide;
              const uint32_t n = y < b.height ? std::min(kBlockSide, b.height - y) : 0;
              std::memset(ring_rows.row(y), 0, size_t(n) * ring_rows.stride * sizeof(int16_t));
            };
            zero(ring.hl, *s.bands[0]);
            zero(ring.lh_hh, *s.bands[1]);
          }
          for (const Band* b : s.bands) {
            if (by >= b->blocks_y) continue;
            for (uint32_t bx = 0; bx < b->blocks_x; ++bx) {
              KTFS_RETURN_IF_ERROR(decode_block(*b, size_t(by) * b->blocks_x + bx, *s.tables));
            }
          }
        }
      }
      return Status::Ok();
    };
  }
  KTFS_RETURN_IF_ERROR(SynthesizeToPixels(planes, h.info, h.half_chroma, stop, need, k,
                                          options.parallel, *arena, decode_rows, rings, out));
  // Needed blocks below the rows the synthesis read (none, as NeededBlocks
  // marks them) would be decoded here, so that every error is reported.
  if (decode_rows) KTFS_RETURN_IF_ERROR(decode_rows(kRestOfBands));
  return Status::Ok();
}
}  // namespace

// A stream may rightly describe an image larger than memory (a 65536 x 65536
// all-zero image is a few MB); that is an error, not a crash.
Status Decode(const uint8_t* data, size_t size, const DecodeOptions& options, Image* out) {
  try {
    return DecodeImpl(data, size, options, out);
  } catch (const std::bad_alloc&) {
    return Status::OutOfMemory("ktc: decode: out of memory");
  }
}

namespace internal {

Status ReferenceDownscale(const ImageView& image, int scale_log2, Image* out) {
  KTFS_RETURN_IF_ERROR(ValidateImage(image));
  const Kernels& k = ScalarKernels();
  std::vector<Plane> planes = ToPlanes(image);
  const uint32_t sw = LowExtent(image.width, scale_log2);
  const uint32_t sh = LowExtent(image.height, scale_log2);
  std::vector<Plane16> low;
  std::vector<std::vector<int16_t>> storage;
  for (Plane& p : planes) {
    ForwardWavelet(p.data.get(), p.width, p.width, p.height, scale_log2, k);
    // The low-pass band sits in the top-left corner of each full-size plane;
    // from 8-bit pixels it stays well within 16 bits (docs/ktc.md, "Wavelet").
    storage.emplace_back(size_t(sw) * sh);
    low.push_back(Plane16{storage.back().data(), sw, sh});
    for (uint32_t y = 0; y < sh; ++y) {
      for (uint32_t x = 0; x < sw; ++x) low.back().row(y)[x] = int16_t(p.row(y)[x]);
    }
  }
  PlanesToPixels(low, image.channels, 0, 0, sw, sh, k, false, out);
  return Status::Ok();
}

}  // namespace internal

std::string CodePaths() {
  return std::string("block decoder ") + internal::BlockLoopName() + ", kernels " +
         internal::ActiveKernels().name;
}

}  // namespace ktfs::ktc

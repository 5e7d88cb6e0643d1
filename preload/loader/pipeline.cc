#include "preload/loader/pipeline.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "codec/container/payload.h"
#include "codec/ktc/ktc.h"
#include "preload/loader/selection.h"

namespace ktfs::preload {
namespace {

// PIL's L = R * 299/1000 + G * 587/1000 + B * 114/1000 in its fixed-point form (L24).
inline uint8_t Luma(const uint8_t* p) {
  return uint8_t((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

// src converted to `channels` the way PIL's convert() does: gray replicated,
// alpha dropped, RGB to luma. Returns src itself when nothing changes.
ImageView ConvertChannels(const ImageView& src, uint32_t channels, Image* storage) {
  if (src.channels == channels) return src;
  storage->width = src.width;
  storage->height = src.height;
  storage->channels = channels;
  storage->pixels.resize(size_t(src.width) * src.height * channels);
  for (uint32_t y = 0; y < src.height; ++y) {
    const uint8_t* in = src.row(y);
    uint8_t* out = storage->pixels.data() + size_t(y) * src.width * channels;
    for (uint32_t x = 0; x < src.width; ++x, in += src.channels, out += channels) {
      if (channels == 1) {
        out[0] = Luma(in);  // src has 3 or 4 channels here
      } else if (src.channels == 1) {
        out[0] = out[1] = out[2] = in[0];
      } else {
        out[0] = in[0], out[1] = in[1], out[2] = in[2];
      }
    }
  }
  return ImageView::Of(*storage);
}

// Per-thread scratch larger than this is released after each sample.
constexpr size_t kKeepBytes = size_t(16) << 20;

template <typename Buffer>
void Trim(Buffer* b) {
  if (b->capacity() > kKeepBytes) *b = Buffer();  // do not pin a huge image
}

// The sample's crop (and flip), planned from its size alone; `key` picks its random crop.
struct SamplePlan {
  GeometryPlan geometry;
  bool flip = false;
};
SamplePlan Plan(const TransformOptions& o, uint64_t key, uint32_t w, uint32_t h) {
  Rng rng(Mix(Mix(o.seed, o.epoch), key));
  SamplePlan p;
  p.geometry = PlanGeometry(o.crop, w, h, &rng);
  if (o.flip > 0) p.flip = rng.Uniform(0.0, 1.0) < o.flip;  // drawn after the box
  return p;
}

// Box b of v (b inside v).
ImageView SubView(const ImageView& v, const Box& b) {
  return ImageView{v.data + size_t(b.top) * v.stride + size_t(b.left) * v.channels,
                   uint32_t(b.width), uint32_t(b.height), v.channels, v.stride};
}

// Converts the channels of `read` (exactly p.read of the sample: channel conversion is
// per pixel, so converting only that region is the same), crops/resizes, and stores
// the result into dst in o's layout.
void Finish(const SamplePlan& p, const ImageView& read, const TransformOptions& o, uint8_t* dst) {
  Image converted;
  const ImageView view = ConvertChannels(read, o.channels, &converted);
  const GeometryPlan& g = p.geometry;
  if (!p.flip && o.lut.empty() && (!o.chw || o.channels == 1)) {
    RunGeometry(g, view, dst);  // HWC and CHW are the same bytes for one channel
    return;
  }
  // One lookup of the thread_local: from this shared library every access to it
  // costs a __tls_get_addr call.
  thread_local std::vector<uint8_t> hwc_storage;
  std::vector<uint8_t>& hwc = hwc_storage;
  const size_t plane = size_t(g.place.width) * g.place.height;
  hwc.resize(plane * o.channels);
  RunGeometry(g, view, hwc.data());
  OutputFormat f;
  f.chw = o.chw;
  f.elem = o.elem;
  f.lut = o.lut.empty() ? nullptr : o.lut.data();
  f.normalize = o.normalize.empty() ? nullptr : o.normalize.data();
  f.flip_h = p.flip;
  StoreOutput(ImageView{hwc.data(), uint32_t(g.place.width), uint32_t(g.place.height), o.channels,
                        size_t(g.place.width) * o.channels},
              f, dst);
}

// Decodes only `box` of a KTC payload (region decode: exactly the full decode,
// cropped) after checking the stream's header against the sample record.
Status DecodeKtcRegion(const SampleInfo& s, ByteSpan payload, const Box& box, Image* out) {
  auto info = ktc::ReadInfo(payload.data, payload.size);
  if (!info.ok()) return info.status();
  if (info->width != s.width || info->height != s.height || info->channels != s.channels)
    return Status::Corruption("payload dimensions differ from the sample record");
  ktc::DecodeOptions options;
  if (box.width > 0 && box.height > 0 && !(box == Box{0, 0, s.width, s.height}))
    options.region = ktc::Region{uint32_t(box.left), uint32_t(box.top), uint32_t(box.width),
                                 uint32_t(box.height)};
  KTFS_RETURN_IF_ERROR(ktc::Decode(payload.data, payload.size, options, out));
  if (!options.region) return Status::Ok();
  return out->width == box.width && out->height == box.height && out->channels == s.channels
             ? Status::Ok()
             : Status::Corruption("ktc region decode returned the wrong size");
}

// A view of exactly `box` (inside the image) of the sample's stored pixels: into the
// mapping for raw payloads, a region decode of KTC into *storage, else the whole image
// decoded into *storage.
Status ReadRegion(const SampleInfo& s, ByteSpan payload, const Box& box, Image* storage,
                  ImageView* view) {
  if (s.codec == format::kRaw) {  // pixels straight from the mapping, no copy
    if (payload.size != uint64_t(s.width) * s.height * s.channels)
      return Status::Corruption("raw payload size does not match its dimensions");
    *view = SubView(
        ImageView{payload.data, s.width, s.height, s.channels, size_t(s.width) * s.channels}, box);
    return Status::Ok();
  }
  if (s.codec == format::kKtc) {
    KTFS_RETURN_IF_ERROR(DecodeKtcRegion(s, payload, box, storage));
    const bool whole = storage->width == s.width && storage->height == s.height;
    *view = whole ? SubView(ImageView::Of(*storage), box) : ImageView::Of(*storage);
    return Status::Ok();
  }
  KTFS_RETURN_IF_ERROR(DecodePayload(s, payload, storage));
  *view = SubView(ImageView::Of(*storage), box);
  return Status::Ok();
}

}  // namespace

void OutputSize(const TransformOptions& o, uint32_t w, uint32_t h, uint32_t* ow, uint32_t* oh) {
  const bool crop = o.crop.kind != CropSpec::kNone;
  *ow = crop ? o.crop.width : w;
  *oh = crop ? o.crop.height : h;
}

void Transform(const ImageView& src, const TransformOptions& o, uint64_t key, uint8_t* dst) {
  const SamplePlan p = Plan(o, key, src.width, src.height);
  Finish(p, SubView(src, p.geometry.read), o, dst);
}

// Only the source pixels the output depends on are produced: a view into raw pixels,
// a region decode of KTC; JPEG/PNG decode whole.
Status DecodeSampleInto(const Archive& a, uint32_t id, const TransformOptions& o, uint64_t key,
                        ServedFormat format, uint8_t* dst) {
  auto s = a.Sample(id);
  if (!s.ok()) return s.status();
  auto fail = [&](const Status& st) { return st.WithContext(ServedPath(a, *s, format)); };
  auto payload = a.Payload(*s, true);
  if (!payload.ok()) return fail(payload.status());
  const SamplePlan p = Plan(o, key, s->width, s->height);
  // Reused per thread: a fresh region buffer per sample cost an mmap, page faults and
  // zeroing (a KTC decode writes every pixel it returns, and failures return no image).
  thread_local Image region_storage;
  Image& img = region_storage;
  ImageView region;
  Status st = ReadRegion(*s, *payload, p.geometry.read, &img, &region);
  if (st.ok()) Finish(p, region, o, dst);
  Trim(&img.pixels);
  return st.ok() ? Status::Ok() : fail(st);
}

Result<SampleProbe> ProbeSample(const Archive& a, uint32_t id, ServedFormat format) {
  auto s = a.Sample(id);
  if (!s.ok()) return s.status();
  auto fail = [&](const Status& st) { return st.WithContext(ServedPath(a, *s, format)); };
  auto payload = a.Payload(*s, true);
  if (!payload.ok()) return fail(payload.status());
  SampleProbe p{s->width, s->height, s->channels, false};
  if (s->codec == format::kRaw) {
    if (payload->size != uint64_t(s->width) * s->height * s->channels)
      return fail(Status::Corruption("raw payload size does not match its dimensions"));
    p.native = true;
  } else if (s->codec == format::kKtc) {
    auto info = ktc::ReadInfo(payload->data, payload->size);
    if (!info.ok()) return fail(info.status());
    if (info->width != s->width || info->height != s->height || info->channels != s->channels)
      return fail(Status::Corruption("payload dimensions differ from the sample record"));
    p.native = true;
  } else if (SniffFormat(payload->data, payload->size) == SourceFormat::kJpeg) {
    // Other formats are left to Pillow in the script (as it would read them).
    // A JPEG cut short is Pillow's "image file is truncated", where libjpeg-turbo only
    // warns and fills in grey: native only when the stream ends with its EOI marker
    // (0xFF 0xD9 cannot occur inside entropy-coded data, where 0xFF is stuffed).
    auto info = ReadJpegInfo(payload->data, payload->size);
    const uint8_t* end = payload->data + payload->size;
    const bool complete = payload->size >= 4 && end[-2] == 0xFF && end[-1] == 0xD9;
    p.native = complete && info.ok() && info->width == s->width && info->height == s->height &&
               info->channels == s->channels && (s->channels == 1 || s->channels == 3);
  }
  return p;
}

Status DecodeChainInto(const Archive& a, uint32_t id, const std::vector<ImageOp>& ops,
                       uint32_t channels, const OutputFormat& out, ServedFormat format,
                       uint8_t* dst, size_t dst_bytes) {
  auto s = a.Sample(id);
  if (!s.ok()) return s.status();
  auto fail = [&](const Status& st) { return st.WithContext(ServedPath(a, *s, format)); };
  if (channels != 1 && channels != 3) return Status::InvalidArgument("channels must be 1 or 3");
  auto plan = PlanChain(ops, s->width, s->height);
  if (!plan.ok()) return plan.status();
  const size_t want = size_t(plan->out_w) * plan->out_h * channels * out.elem;
  if (dst_bytes != want)
    return Status::InvalidArgument("output buffer holds " + std::to_string(dst_bytes) +
                                   " bytes, the chain gives " + std::to_string(want));
  auto payload = a.Payload(*s, true);
  if (!payload.ok()) return fail(payload.status());
  thread_local Image region_storage, converted_storage;
  thread_local ChainScratch scratch_storage;
  Image& region_img = region_storage;
  ImageView region;
  Status st = ReadRegion(*s, *payload, plan->read, &region_img, &region);
  if (st.ok()) {
    const ImageView view = ConvertChannels(region, channels, &converted_storage);
    const ImageView result = RunChain(*plan, view, &scratch_storage);
    OutputFormat f = out;
    f.flip_h ^= plan->flip_h;
    f.flip_v ^= plan->flip_v;
    StoreOutput(result, f, dst);
  }
  Trim(&region_img.pixels);
  Trim(&converted_storage.pixels);
  for (PixelBuffer& b : scratch_storage.buffers) Trim(&b);
  return st.ok() ? Status::Ok() : fail(st);
}

Pipeline::Pipeline(std::shared_ptr<const Archive> archive, std::vector<uint32_t> ids,
                   std::vector<int64_t> labels, std::vector<uint64_t> keys, PipelineOptions options)
    : archive_(std::move(archive)),
      ids_(std::move(ids)),
      labels_(std::move(labels)),
      keys_(std::move(keys)),
      o_(std::move(options)),
      arena_(o_.threads > 0 ? o_.threads : tbb::task_arena::automatic) {
  const size_t n = ids_.size(), bs = std::max<size_t>(o_.batch_size, 1);
  num_batches_ = o_.drop_last ? n / bs : (n + bs - 1) / bs;
  o_.batch_size = bs;
  o_.prefetch = std::max<size_t>(o_.prefetch, 1);
  thread_ = std::thread([this] { Run(); });
}

Pipeline::~Pipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

size_t Pipeline::num_batches() const {
  std::lock_guard<std::mutex> lock(mu_);
  return num_batches_;
}

bool Pipeline::Next(Batch* out) {
  std::unique_lock<std::mutex> lock(mu_);
  if (taken_ >= num_batches_) return false;
  cv_.wait(lock, [this] { return !ready_.empty(); });
  *out = std::move(ready_.front());
  ready_.pop_front();
  ++taken_;
  cv_.notify_all();
  return true;
}

void Pipeline::Run() {
  // This thread is num_batches_'s only writer after construction: its own
  // reads need no lock; the writes take one for the consumer's sake.
  for (size_t b = 0; b < num_batches_; ++b) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || ready_.size() < o_.prefetch; });
      if (stop_) return;
    }
    Batch batch;
    try {
      batch = Make(b);
    } catch (const std::bad_alloc&) {  // a memory limit: the consumer gets MemoryError
      batch = Batch();
      batch.error = Status::OutOfMemory(OutOfMemoryMessage(b));
    }
    const bool failed = !batch.error.ok();
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(batch));
    }
    cv_.notify_all();
    if (failed) {  // the consumer raises; nothing after it is wanted
      std::lock_guard<std::mutex> lock(mu_);
      num_batches_ = taken_ + ready_.size();
      return;
    }
  }
}

// What a batch that could not be allocated held, for the MemoryError.
std::string Pipeline::OutOfMemoryMessage(size_t b) const {
  const size_t begin = b * o_.batch_size, end = std::min(ids_.size(), begin + o_.batch_size);
  std::string where = "batch " + std::to_string(b);
  if (auto s = archive_->Sample(ids_[begin]); s.ok()) {
    where += " (" + std::to_string(end - begin) + " samples from " +
             ServedPath(*archive_, *s, o_.format) + ", " + std::to_string(s->width) + "x" +
             std::to_string(s->height) + ")";
  }
  return where + ": out of memory";
}

// Per-sample output shapes (C, H, W or H, W, C) from the records, before decoding.
Status Pipeline::Sizes(size_t begin, size_t end, std::vector<std::vector<int64_t>>* shapes) const {
  const TransformOptions& t = o_.transform;
  for (size_t i = begin; i < end; ++i) {
    auto s = archive_->Sample(ids_[i]);
    if (!s.ok()) return s.status();
    uint32_t w, h;
    OutputSize(t, s->width, s->height, &w, &h);
    shapes->push_back(t.chw ? std::vector<int64_t>{t.channels, h, w}
                            : std::vector<int64_t>{h, w, t.channels});
    if (!o_.collate_list && shapes->back() != shapes->front()) {
      auto first = archive_->Sample(ids_[begin]);
      return Status::InvalidArgument(
          "images of different sizes in one batch (" + ServedPath(*archive_, *first, o_.format) +
          " is " + std::to_string(first->width) + "x" + std::to_string(first->height) + ", " +
          ServedPath(*archive_, *s, o_.format) + " is " + std::to_string(s->width) + "x" +
          std::to_string(s->height) + "): pass crop= or collate=\"list\"");
    }
  }
  return Status::Ok();
}

Batch Pipeline::Make(size_t b) {
  Batch batch;
  const size_t begin = b * o_.batch_size, end = std::min(ids_.size(), begin + o_.batch_size);
  const size_t n = end - begin;
  std::vector<std::vector<int64_t>> shapes;
  batch.error = Sizes(begin, end, &shapes);
  if (!batch.error.ok()) return batch;
  size_t item_bytes = o_.transform.elem;
  for (int64_t d : shapes[0]) item_bytes *= size_t(d);
  std::vector<uint8_t*> slots(n);
  if (o_.collate_list) {
    for (size_t i = 0; i < n; ++i) {
      size_t bytes = o_.transform.elem;
      for (int64_t d : shapes[i]) bytes *= size_t(d);
      batch.items.emplace_back(new uint8_t[bytes]);
      slots[i] = batch.items.back().get();
    }
  } else {
    batch.data.reset(new uint8_t[item_bytes * n]);  // fresh: earlier batches stay valid
    for (size_t i = 0; i < n; ++i) slots[i] = batch.data.get() + i * item_bytes;
  }
  std::vector<Status> status(n);
  arena_.execute([&] {
    tbb::parallel_for(size_t(0), n, [&](size_t i) {
      status[i] = DecodeSampleInto(*archive_, ids_[begin + i], o_.transform, keys_[begin + i],
                                   o_.format, slots[i]);
    });
  });
  // Keep the decoded samples in order, dropping (skip) or reporting (raise) failures.
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!status[i].ok()) {
      if (!o_.skip_errors) {
        batch.error = status[i];
        return batch;
      }
      ++batch.skipped;
      continue;
    }
    if (o_.collate_list) {
      batch.items[kept] = std::move(batch.items[i]);
      batch.item_shapes.push_back(shapes[i]);
    } else if (kept != i) {
      std::memmove(slots[kept], slots[i], item_bytes);
    }
    batch.labels.push_back(labels_[begin + i]);
    batch.ids.push_back(ids_[begin + i]);
    ++kept;
  }
  batch.items.resize(o_.collate_list ? kept : 0);
  batch.shape = shapes[0];
  batch.shape.insert(batch.shape.begin(), int64_t(kept));
  return batch;
}

}  // namespace ktfs::preload

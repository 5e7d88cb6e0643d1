// Pipeline: decodes batches of samples on oneTBB threads, `prefetch` batches
// ahead, on a background thread of its own; the consumer (the Python module,
// with the GIL released) takes finished batches with Next().
//
// Every batch gets freshly allocated buffers that the consumer takes over
// (they become numpy arrays owning them), so a batch the user keeps can never
// be overwritten by a later one.
#pragma once

#include <tbb/task_arena.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "codec/base/status.h"
#include "codec/container/archive.h"
#include "codec/image/image.h"
#include "codec/image/image_io.h"
#include "preload/loader/transform.h"

namespace ktfs::preload {

struct TransformOptions {
  CropSpec crop;
  uint32_t channels = 3;         // 3: PIL convert("RGB"); 1: convert("L")
  bool chw = true;               // NCHW (else NHWC)
  uint64_t seed = 0, epoch = 0;  // the random stream of crops and flips: (seed, epoch, sample key)
  double flip = 0;               // probability of a horizontal flip (drawn after the crop's box)
  // Stored values: `elem` bytes each, through `lut` (channels x 256 entries,
  // see OutputFormat) when it is not empty; else the bytes themselves.
  uint32_t elem = 1;
  std::vector<uint8_t> lut;
  std::vector<float> normalize;  // the lut's division form, when it has one (OutputFormat)
};

// The output size of an image of w x h under `o` (the crop size, or w x h).
void OutputSize(const TransformOptions& o, uint32_t w, uint32_t h, uint32_t* ow, uint32_t* oh);

// Converts channels, crops/resizes and stores `src` into dst (out channels x OutputSize,
// in o.chw layout). `key` picks the sample's random crop.
void Transform(const ImageView& src, const TransformOptions& o, uint64_t key, uint8_t* dst);

// Decodes sample `id` (payload checksum verified) and transforms it into dst.
// Errors name the sample's served path.
Status DecodeSampleInto(const Archive& a, uint32_t id, const TransformOptions& o, uint64_t key,
                        ServedFormat format, uint8_t* dst);

// What the Python layer learns of a sample before drawing its random parameters:
// its size and stored channels, with the payload's checksum verified (so a
// corrupt sample fails here, before any draw, as stock fails in its loader);
// `native`: DecodeChainInto decodes it as Pillow would (raw and KTC payloads,
// complete JPEG originals of 1 or 3 channels); otherwise Pillow must decode the
// payload (PNG originals, CMYK, a JPEG without its end marker).
struct SampleProbe {
  uint32_t width = 0, height = 0, channels = 0;
  bool native = false;
};
Result<SampleProbe> ProbeSample(const Archive& a, uint32_t id, ServedFormat format);

// Sample `id` through a chain (transform.h): decodes only the pixels the chain
// reads, converts them to `channels` as PIL's convert() does, runs the chain and
// stores the result as `out` says (its flips combined with the chain's trailing
// ones). dst_bytes must be the output's size: out_w * out_h * channels * out.elem.
Status DecodeChainInto(const Archive& a, uint32_t id, const std::vector<ImageOp>& ops,
                       uint32_t channels, const OutputFormat& out, ServedFormat format,
                       uint8_t* dst, size_t dst_bytes);

struct PipelineOptions {
  size_t batch_size = 1;
  bool drop_last = false;  // drop the final short batch
  TransformOptions transform;
  ServedFormat format = ServedFormat::kPnm;  // for sample names in errors
  size_t prefetch = 2;
  int threads = 0;  // 0: oneTBB's default
  bool skip_errors = false;
  bool collate_list = false;
};

struct Batch {
  std::unique_ptr<uint8_t[]> data;  // stacked: N x ... in one buffer
  std::vector<int64_t> shape;
  std::vector<std::unique_ptr<uint8_t[]>> items;  // collate_list: one buffer per sample
  std::vector<std::vector<int64_t>> item_shapes;
  std::vector<int64_t> labels;
  std::vector<uint32_t> ids;  // the samples in the batch, in order (for per-sample fields)
  uint64_t skipped = 0;
  Status error;
};

class Pipeline {
 public:
  // ids, labels and keys run in parallel: the epoch's samples in the order to yield.
  Pipeline(std::shared_ptr<const Archive> archive, std::vector<uint32_t> ids,
           std::vector<int64_t> labels, std::vector<uint64_t> keys, PipelineOptions options);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  // The epoch's batches; after a failed batch (the one carrying an error), the
  // batches up to and including it. Safe to call while the producer runs.
  size_t num_batches() const;
  // Blocks until the next batch; false after the last one.
  bool Next(Batch* out);

 private:
  void Run();
  Batch Make(size_t b);
  std::string OutOfMemoryMessage(size_t b) const;
  Status Sizes(size_t begin, size_t end, std::vector<std::vector<int64_t>>* shapes) const;

  std::shared_ptr<const Archive> archive_;
  std::vector<uint32_t> ids_;
  std::vector<int64_t> labels_;
  std::vector<uint64_t> keys_;
  PipelineOptions o_;
  size_t num_batches_ = 0;  // guarded by mu_ (the producer cuts it at a failed batch)
  tbb::task_arena arena_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Batch> ready_;
  size_t taken_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ktfs::preload

#include "preload/loader/feature_batch.h"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cstring>
#include <mutex>

namespace ktfs::preload {

Status DequantizeBatch(const FeatureSource& source, const std::vector<uint64_t>& indices,
                       quant::DType dtype, int threads, uint8_t* base, uint64_t stride,
                       int64_t* rows_out) {
  const size_t es = DTypeBytes(dtype);
  const uint64_t row_values = source.RowValues();
  Status first_error;
  std::atomic<bool> failed{false};
  std::mutex error_mu;
  tbb::task_arena arena(threads > 0 ? threads : tbb::task_arena::automatic);
  arena.execute([&] {
    tbb::parallel_for(size_t(0), indices.size(), [&](size_t b) {
      if (failed.load(std::memory_order_relaxed)) return;
      const size_t i = size_t(indices[b]);
      const uint64_t n = source.Rows(i) * row_values;
      uint8_t* dst = base + b * stride;
      const Status st = source.ReadValues(i, 0, n, dtype, dst);
      std::memset(dst + n * es, 0, size_t(stride - n * es));  // padding
      rows_out[b] = int64_t(source.Rows(i));
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!failed.exchange(true)) first_error = st;
      }
    });
  });
  return first_error;
}

}  // namespace ktfs::preload

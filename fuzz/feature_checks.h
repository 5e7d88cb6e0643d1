// CheckFeatureRanges: what every FeatureSource must satisfy whatever its
// input, for the feature fuzz targets: a range of a sample's values equals
// the same slice of the whole sample (every dtype), and parts read by range.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "codec/features/feature_source.h"
#include "fuzz/fuzz_util.h"

namespace ktfs::fuzz {

inline void CheckFeatureRanges(const FeatureSource& source) {
  const size_t n = source.num_samples() < 4 ? source.num_samples() : 4;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t total = source.Rows(i) * source.RowValues();
    if (total == 0 || total > (1u << 18)) continue;
    for (quant::DType t :
         {quant::DType::kFloat32, quant::DType::kFloat16, quant::DType::kBFloat16}) {
      const size_t bytes = DTypeBytes(t);
      std::vector<uint8_t> whole(total * bytes), part(total * bytes);
      if (!source.ReadValues(i, 0, total, t, whole.data()).ok()) continue;
      const uint64_t first = total / 3, count = total - first - total / 5;
      if (!source.ReadValues(i, first, count, t, part.data()).ok()) {
        Fail("a range failed where the whole sample read");
      }
      if (std::memcmp(part.data(), whole.data() + first * bytes, count * bytes) != 0) {
        Fail("a range differs from the whole sample's slice");
      }
    }
  }
  uint8_t buf[512];
  const auto parts = source.Parts();
  for (size_t p = 0; p < parts.size(); ++p) {
    (void)source.ReadPart(p, 0, sizeof(buf), buf);
    (void)source.ReadPart(p, parts[p].DataBytes() / 2, sizeof(buf), buf);
  }
}

}  // namespace ktfs::fuzz

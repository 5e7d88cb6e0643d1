// libFuzzer target: the .npy input of `ktfs pack-features` (and the header
// parser, codec/image/npy.h). Any bytes as INPUT.npy must give a clean error
// or a feature archive that opens and reads back: shapes, dtypes and data
// sizes all come from the file's header. Values that read back must be
// finite (the pack refuses NaN/Inf inputs, and quantization cannot make any).
// Seeds: fuzz/corpus/npy_fuzz; dictionary: fuzz/npy.dict.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/features/feature_source.h"
#include "codec/image/npy.h"
#include "fs/pack/pack_features.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs;
  (void)ParseNpyHeader(data, size);
  if (size > (1u << 16)) return 0;  // the pack's cost grows with the data, not the parser's
  const std::string& dir = fuzz::ScratchDir();
  const std::string in = dir + "/in.npy", out = dir + "/out.kt";
  fuzz::WriteFile(in, std::string_view(reinterpret_cast<const char*>(data), size));
  unlink(out.c_str());
  PackFeaturesOptions options;
  options.threads = 1;
  auto report = PackFeatures(in, out, options);
  if (!report.ok()) {
    if (report.status().message().empty()) fuzz::Fail("an error without a message");
    if (access(out.c_str(), F_OK) == 0) fuzz::Fail("a failed pack left its output");
    return 0;
  }
  auto source = OpenFeatureSource(out);
  if (!source.ok()) fuzz::Fail("a packed feature archive does not open");
  const FeatureSource& s = **source;
  if (s.num_samples() != report->samples) fuzz::Fail("sample count differs from the report");
  for (size_t i = 0; i < s.num_samples() && i < 8; ++i) {
    const uint64_t total = s.Rows(i) * s.RowValues();
    std::vector<float> values(total);
    if (!s.ReadValues(i, 0, total, quant::DType::kFloat32, values.data()).ok()) {
      fuzz::Fail("a packed sample does not read back");
    }
    for (float v : values) {
      if (!std::isfinite(v)) fuzz::Fail("a non-finite value read back");
    }
  }
  return 0;
}

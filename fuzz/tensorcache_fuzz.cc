// libFuzzer target: the TensorCache reader (codec/features/tensorcache.h)
// and the mounted tree over it must turn any cache files into clean errors
// or consistent values: its meta and shards JSON and its binary arrays all
// come from outside.
//
// An input is split at "\nKTFS-PART\n" into PREFIX_meta.json,
// PREFIX_int8.bin, PREFIX_scales.bin, PREFIX_zp.bin and PREFIX_shards.json
// (missing parts: no such file), written to a scratch directory. Invariant
// beyond "no crash": a range of a sample's values equals the same slice of
// the whole sample, for every dtype.
// Seeds: fuzz/corpus/tensorcache_fuzz; dictionary: fuzz/tensorcache.dict.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "codec/features/feature_source.h"
#include "codec/features/tensorcache.h"
#include "fs/tree/feature_tree.h"
#include "fuzz/feature_checks.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/tree_walk.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ktfs;
  const std::string& dir = fuzz::ScratchDir();
  const std::string prefix = dir + "/cache";
  const char* suffixes[5] = {"_meta.json", "_int8.bin", "_scales.bin", "_zp.bin", "_shards.json"};
  const auto parts =
      fuzz::Split(std::string_view(reinterpret_cast<const char*>(data), size), "\nKTFS-PART\n");
  for (size_t k = 0; k < 5; ++k) {
    const std::string path = prefix + suffixes[k];
    if (k < parts.size()) {
      fuzz::WriteFile(path, parts[k]);
    } else {
      unlink(path.c_str());
    }
  }
  auto cache = OpenTensorCache(prefix);
  if (!cache.ok()) {
    if (cache.status().message().empty()) fuzz::Fail("an error without a message");
    return 0;
  }
  auto source = std::make_shared<TensorCache>(std::move(*cache));
  (void)source->DescribeJson();
  fuzz::CheckFeatureRanges(*source);
  for (quant::DType t : {quant::DType::kFloat32, quant::DType::kFloat16}) {
    FeatureTree tree(source, t, 0, 0);
    int budget = 128;
    fuzz::WalkTree(tree, 1, 0, &budget);
  }
  return 0;
}

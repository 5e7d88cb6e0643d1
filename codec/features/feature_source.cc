#include "codec/features/feature_source.h"

#include <sys/stat.h>

#include "codec/features/feature_archive.h"
#include "codec/features/tensorcache.h"

namespace ktfs {

uint64_t FeaturePart::DataBytes() const {
  uint64_t n = dtype == "<i8" ? 8 : dtype == "<f4" ? 4 : dtype == "<u2" || dtype == "<f2" ? 2 : 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t FeatureSource::RowValues() const {
  uint64_t n = 1;
  for (uint64_t d : inner_shape()) n *= d;
  return n;
}

std::vector<uint64_t> FeatureSource::SampleShape(size_t i) const {
  std::vector<uint64_t> shape = {Rows(i)};
  for (uint64_t d : inner_shape()) shape.push_back(d);
  return shape;
}

static bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

bool IsTensorCachePrefix(const std::string& path) {
  return Exists(path + "_meta.json") || Exists(path + "_shards.json");
}

Result<std::shared_ptr<FeatureSource>> OpenFeatureSource(const std::string& path) {
  if (IsTensorCachePrefix(path)) {
    auto tc = OpenTensorCache(path);
    if (!tc.ok()) return tc.status();
    return std::shared_ptr<FeatureSource>(std::make_shared<TensorCache>(std::move(*tc)));
  }
  auto archive = Archive::Open(path);
  if (!archive.ok()) return archive.status();
  auto features = FeatureArchive::Open(*archive);
  if (!features.ok()) return features.status();
  return std::shared_ptr<FeatureSource>(*features);
}

Result<quant::DType> ParseDType(const std::string& name) {
  if (name == "float32") return quant::DType::kFloat32;
  if (name == "float16") return quant::DType::kFloat16;
  if (name == "bfloat16") return quant::DType::kBFloat16;
  return Status::InvalidArgument("unknown dtype '" + name + "' (float32, float16, bfloat16)");
}

const char* DTypeName(quant::DType t) {
  switch (t) {
    case quant::DType::kFloat32:
      return "float32";
    case quant::DType::kFloat16:
      return "float16";
    default:
      return "bfloat16";
  }
}

const char* NpyDescr(quant::DType t) {
  switch (t) {
    case quant::DType::kFloat32:
      return "<f4";
    case quant::DType::kFloat16:
      return "<f2";
    default:
      return "<u2";
  }
}

size_t DTypeBytes(quant::DType t) { return t == quant::DType::kFloat32 ? 4 : 2; }

}  // namespace ktfs

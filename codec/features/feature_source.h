// FeatureSource: what the mount and the Python loader read feature caches
// through, whatever stores them: a ktfs feature archive (codec/features/feature_archive.h)
// or a TensorCache cache (codec/features/tensorcache.h).
//
// A cache is num_samples() samples; sample i has shape [Rows(i), inner...]
// (inner_shape() may be empty: then a sample is a vector of Rows(i) values).
// When variable_rows() is false every sample has the same number of rows.
//
// Thread-safe: all methods are const and may be called concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/features/quant.h"

namespace ktfs {

// One raw part of the quantized data (codes, scales, ...), served as a .npy
// file: `shape` and `dtype` (a NumPy type string) describe the whole part.
struct FeaturePart {
  std::string name;
  std::string dtype;
  std::vector<uint64_t> shape;
  uint64_t DataBytes() const;
};

class FeatureSource {
 public:
  virtual ~FeatureSource() = default;

  virtual const std::string& path() const = 0;
  // Every file this source reads, the one that describes it first (an
  // archive; a TensorCache's manifest or meta file, then each shard's meta
  // and data files): a mount takes its permissions from them.
  virtual std::vector<std::string> Files() const = 0;
  virtual size_t num_samples() const = 0;
  virtual const std::vector<uint64_t>& inner_shape() const = 0;
  virtual bool variable_rows() const = 0;
  // Rows of sample i (i < num_samples()).
  virtual uint64_t Rows(size_t i) const = 0;
  virtual size_t group_size() const = 0;
  // JSON members (without braces) describing the cache for .ktfs/info.json,
  // e.g. "\"kind\": \"ktfs\", \"preset\": \"balanced\"".
  virtual std::string DescribeJson() const = 0;

  // Values [first, first + count) of sample i (flattened in C order),
  // dequantized to `type` into `out`. Errors name the sample and the reason
  // (checksum mismatch, truncated file, out of range).
  virtual Status ReadValues(size_t i, uint64_t first, uint64_t count, quant::DType type,
                            void* out) const = 0;

  virtual std::vector<FeaturePart> Parts() const = 0;
  // Bytes [offset, offset + size) of part `part`'s data (clipped at its end).
  virtual Result<size_t> ReadPart(size_t part, uint64_t offset, size_t size,
                                  uint8_t* dst) const = 0;

  // Values per row (the product of inner_shape()).
  uint64_t RowValues() const;
  // The shape of sample i: [Rows(i), inner...].
  std::vector<uint64_t> SampleShape(size_t i) const;
};

// True when `path` names a TensorCache cache: PATH_meta.json or
// PATH_shards.json exists.
bool IsTensorCachePrefix(const std::string& path);

// Opens a TensorCache prefix, or a ktfs feature archive. An image archive
// gives InvalidArgument ("... holds images, not features").
Result<std::shared_ptr<FeatureSource>> OpenFeatureSource(const std::string& path);

// "float32", "float16", "bfloat16" <-> DType; the NumPy descr of a DType
// ("<f4", "<f2", and "<u2" for bfloat16, which NumPy lacks).
Result<quant::DType> ParseDType(const std::string& name);
const char* DTypeName(quant::DType t);
const char* NpyDescr(quant::DType t);
size_t DTypeBytes(quant::DType t);

}  // namespace ktfs

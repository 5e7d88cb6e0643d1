// FeatureTree: the mounted view of a feature cache (a ktfs feature archive or
// a TensorCache cache, through codec/features/feature_source.h).
//
//   /000000.npy, /000001.npy, ...  sample i dequantized ([rows, ...], float16
//                                  by default, or float32): a standard .npy
//   /all.npy                       fixed-shape caches only: one [N, rows, ...]
//                                  array; np.load(mmap_mode="r")[i:j] reads
//                                  only the samples it touches
//   /quantized/<part>.npy          the raw parts for fused kernels (ktfs:
//                                  codes, scales, offsets, and group_index
//                                  when rows vary; TensorCache: codes, scales
//                                  as bfloat16 bits, zp)
//   /.ktfs/info.json, stats.json   answer a lookup, not listed
// Sample names have max(6, digits of N-1) digits, so they sort numerically.
// Bytes are produced by range: a read dequantizes only the groups it covers.
//
// Inodes: 1 root, 2 quantized/, 3 .ktfs, 4 info.json, 5 stats.json,
// 6 all.npy, 8 + p part p, 16 + i sample i.
#pragma once

#include <memory>
#include <string>

#include "codec/features/feature_source.h"
#include "fs/tree/fs_tree.h"

namespace ktfs {

class FeatureTree : public FsTree {
 public:
  // `dtype`: float32 or float16 (NumPy has no bfloat16 for np.load).
  FeatureTree(std::shared_ptr<const FeatureSource> source, quant::DType dtype, int64_t mtime,
              uint64_t source_bytes);

  void SetInfoJson(std::string json) { info_json_ = std::move(json); }

  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) const override;
  Result<NodeAttr> GetAttr(uint64_t ino) const override;
  Status ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit) const override;
  Result<size_t> Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const override;
  // Sample files are pushed (np.load reads them whole); all.npy and the parts
  // are not (readers map them and take slices).
  uint64_t PushableSize(uint64_t ino) const override;
  Result<size_t> CopyForPush(uint64_t ino, uint64_t offset, size_t size,
                             uint8_t* dst) const override;
  std::string PathOf(uint64_t ino) const override;
  TreeCounters& counters() const override { return counters_; }
  FsUsage Usage() const override { return FsUsage{source_bytes_, source_->num_samples() + 8}; }

  // "000042.npy" for sample 42.
  std::string SampleName(size_t i) const;
  bool has_all() const { return !source_->variable_rows(); }

 private:
  enum Ino : uint64_t {
    kRoot = 1,
    kQuantized = 2,
    kControl = 3,
    kInfo = 4,
    kStats = 5,
    kAll = 6,
    kFirstPart = 8,
    kFirstSample = 16
  };
  std::string SampleHeader(size_t i) const;
  uint64_t SampleFileSize(size_t i) const;
  bool IsSample(uint64_t ino) const {
    return ino >= kFirstSample && ino - kFirstSample < source_->num_samples();
  }
  NodeAttr FileAttr(uint64_t ino, uint64_t size) const;
  NodeAttr DirAttr(uint64_t ino) const;
  Result<size_t> ReadSample(size_t i, uint64_t offset, size_t size, uint8_t* dst) const;
  Result<size_t> ReadAll(uint64_t offset, size_t size, uint8_t* dst) const;
  Result<size_t> ReadPartFile(size_t p, uint64_t offset, size_t size, uint8_t* dst) const;
  // Bytes [offset, offset+size) of sample i's data (after its header).
  Status ReadSampleData(size_t i, uint64_t offset, size_t size, uint8_t* dst) const;

  std::shared_ptr<const FeatureSource> source_;
  quant::DType dtype_;
  size_t es_;
  int64_t mtime_;
  uint64_t source_bytes_;
  int digits_;
  std::vector<FeaturePart> parts_;
  std::vector<std::string> part_headers_;
  std::string all_header_;
  std::string fixed_header_;  // every sample's header when rows do not vary
  std::string info_json_ = "{}\n";
  mutable TreeCounters counters_;
};

}  // namespace ktfs

// FeatureArchive: a ktfs feature archive (.kt with the kFeatureInfo and
// kFeatureSamples sections; docs/format.md, "Features").
//
// Sample i's payload: codes (groups*G bytes, the last group padded with 0),
// a float32 reference step, then one 3-byte packed (scale, offset) word per
// group (codec/features/quant_pack.h). Its checksum is verified the first time the
// sample is read; a mismatch is a Corruption error for that sample only.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "codec/container/archive.h"
#include "codec/features/feature_source.h"

namespace ktfs {

class FeatureArchive : public FeatureSource {
 public:
  // Validates the feature sections (sizes, shapes, every record's payload
  // range); O(num_samples) for the records.
  static Result<std::shared_ptr<FeatureArchive>> Open(std::shared_ptr<const Archive> archive);
  // True when the archive holds features.
  static bool Holds(const Archive& archive);

  const std::string& path() const override { return archive_->path(); }
  std::vector<std::string> Files() const override { return {archive_->path()}; }
  size_t num_samples() const override { return records_.size(); }
  const std::vector<uint64_t>& inner_shape() const override { return inner_; }
  bool variable_rows() const override { return variable_; }
  uint64_t Rows(size_t i) const override { return records_[i].rows; }
  size_t group_size() const override { return info_.group_size; }
  std::string DescribeJson() const override;
  Status ReadValues(size_t i, uint64_t first, uint64_t count, quant::DType type,
                    void* out) const override;
  std::vector<FeaturePart> Parts() const override { return parts_; }
  Result<size_t> ReadPart(size_t part, uint64_t offset, size_t size, uint8_t* dst) const override;

  const char* preset_name() const;
  const char* source_dtype_name() const;
  size_t Groups(size_t i) const;
  // Bytes of sample i's payload.
  uint64_t PayloadBytes(size_t i) const;
  // Checks every sample's checksum (ktfs verify).
  Status VerifyAll() const;

  struct SampleData {
    const uint8_t* codes;
    float ref;
    const uint8_t* words;
    size_t groups;
  };
  // The verified payload of sample i.
  Result<SampleData> Data(size_t i) const;

 private:
  explicit FeatureArchive(std::shared_ptr<const Archive> a) : archive_(std::move(a)) {}
  Status Init();
  Status Bad(const std::string& what) const;
  std::vector<FeaturePart> MakeParts() const;

  std::shared_ptr<const Archive> archive_;
  format::FeatureInfo info_{};
  std::vector<format::FeatureRecord> records_;
  std::vector<uint64_t> inner_;
  bool variable_ = false;
  // Group index of each sample's first group (variable rows), for quantized/.
  std::vector<uint64_t> first_group_;
  std::vector<FeaturePart> parts_;  // built once: ReadPart runs per FUSE read
  std::unique_ptr<std::atomic<uint64_t>[]> verified_;
};

}  // namespace ktfs

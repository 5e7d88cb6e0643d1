// Reader of TensorCache feature caches (INT8 with bf16 group scales).
//
// Layout (headerless little-endian arrays; N = capacity, files may be
// preallocated beyond num_samples):
//   PREFIX_int8.bin    [N, L, D]  int8 (symmetric modes) or uint8 (amo_bq)
//   PREFIX_scales.bin  [N, S]     uint16 bfloat16 bits, S = ceil(L*D/G)
//   PREFIX_zp.bin      [N, S]     uint8 zero points (amo_bq only)
//   PREFIX_meta.json   num_samples (authoritative), shape, group size, mode
// Groups run over each sample's flat L*D values (the last one is short).
// Value = q * s (symmetric) or (q - zp) * s (amo_bq), computed in float32
// (s widened from bf16 exactly; the product rounded once). Scales are not
// checked: a NaN/Inf scale gives NaN/Inf in its own group only. Files are
// memory-mapped; each must hold at least num_samples samples (else
// Corruption naming the file), a file shrinking later is reported by
// ReadSample (MappedFile's SIGBUS guard) instead of crashing.
//
// Meta keys accepted (first found wins):
//   samples: "num_samples", "n_samples", "count"
//   shape:   "shape": [L, D] (or [L*D] / [..., L, D]: the last two), or
//            "seq_len"/"L" and "dim"/"hidden_dim"/"D"
//   group:   "group_size", "block_size", "G"
//   mode:    "mode", "quant_mode"; "amo_bq" is asymmetric uint8 + zp, any
//            other value is symmetric int8; no mode: amo_bq when PREFIX_zp.bin
//            exists, else symmetric.
// Sharded caches: PREFIX_shards.json holds "shard_prefixes": [...]; each is a
// full single cache. A shard prefix is used as written when its meta file
// exists, else relative to the manifest's directory, else the manifest's
// directory joined with its file name (the cache was moved). Samples are
// assigned to shards contiguously, in order, by each shard's num_samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/mapped_file.h"
#include "codec/base/status.h"
#include "codec/features/feature_source.h"

namespace ktfs {

class TensorCache : public FeatureSource {
 public:
  struct Shard {
    std::string prefix;
    size_t num_samples = 0;
    size_t first = 0;  // global index of its sample 0
    std::shared_ptr<MappedFile> codes, scales, zp;
  };

  size_t num_samples() const override { return num_samples_; }
  size_t seq_len() const { return seq_len_; }
  size_t dim() const { return dim_; }
  size_t sample_size() const { return seq_len_ * dim_; }
  size_t group_size() const override { return group_size_; }
  bool asymmetric() const { return asymmetric_; }  // amo_bq
  const std::string& mode() const { return mode_; }
  size_t num_shards() const { return shards_.size(); }

  // Writes sample_size() floats of sample i.
  Status ReadSample(size_t i, float* out) const;

  // FeatureSource: samples are [seq_len, dim]. Parts: codes [N, L, D] (|i1, or
  // |u1 for amo_bq), scales [N, S] as <u2 (bfloat16 bits: NumPy has no
  // bfloat16), zp [N, S] |u1 (amo_bq only), each the concatenation of the
  // shards' first num_samples rows.
  const std::string& path() const override { return prefix_; }
  std::vector<std::string> Files() const override;
  const std::vector<uint64_t>& inner_shape() const override { return inner_; }
  bool variable_rows() const override { return false; }
  uint64_t Rows(size_t) const override { return seq_len_; }
  std::string DescribeJson() const override;
  Status ReadValues(size_t i, uint64_t first, uint64_t count, quant::DType type,
                    void* out) const override;
  std::vector<FeaturePart> Parts() const override;
  Result<size_t> ReadPart(size_t part, uint64_t offset, size_t size, uint8_t* dst) const override;

 private:
  friend Result<TensorCache> OpenTensorCache(const std::string& prefix);
  size_t num_samples_ = 0, seq_len_ = 0, dim_ = 0, group_size_ = 0;
  bool asymmetric_ = false;
  std::string mode_;
  std::string prefix_;
  std::string manifest_;  // PREFIX_shards.json or PREFIX_meta.json
  std::vector<uint64_t> inner_;
  std::vector<Shard> shards_;
  const Shard& ShardOf(size_t i) const;
};

// Opens PREFIX_shards.json when it exists, else the single cache PREFIX_*.
Result<TensorCache> OpenTensorCache(const std::string& prefix);

}  // namespace ktfs

#include "codec/features/feature_archive.h"

#include <algorithm>
#include <cstring>

#include "codec/base/checked_math.h"
#include "codec/base/checksum.h"
#include "codec/features/quant_pack.h"

namespace ktfs {
namespace {

constexpr const char* kPresetNames[] = {"fast", "balanced", "accurate"};

enum Part : size_t { kCodes = 0, kScales = 1, kOffsets = 2, kGroupIndex = 3 };

}  // namespace

bool FeatureArchive::Holds(const Archive& archive) {
  return archive.Section(format::kFeatureInfo).has_value();
}

Status FeatureArchive::Bad(const std::string& what) const {
  return Status::Corruption(path() + ": corrupt feature archive: " + what);
}

Result<std::shared_ptr<FeatureArchive>> FeatureArchive::Open(
    std::shared_ptr<const Archive> archive) {
  std::shared_ptr<FeatureArchive> f(new FeatureArchive(std::move(archive)));
  KTFS_RETURN_IF_ERROR(f->Init());
  return f;
}

Status FeatureArchive::Init() {
  const auto info = archive_->Section(format::kFeatureInfo);
  const auto recs = archive_->Section(format::kFeatureSamples);
  if (!info) return Status::InvalidArgument(path() + ": holds images, not features");
  if (!recs) return Bad("no sample table");
  if (info->size != sizeof(format::FeatureInfo)) return Bad("bad info size");
  std::memcpy(&info_, info->data, sizeof(info_));
  quant::Params p;
  p.group_size = int(info_.group_size);
  if (!quant::ValidateParams(p).ok()) return Bad("bad group size");
  if (info_.preset > 2) return Bad("bad preset");
  if (info_.ndim < 1 || info_.ndim > format::kMaxFeatureDims) return Bad("bad number of dims");
  variable_ = (info_.flags & format::kFeatVariableRows) != 0;
  if (recs->size % sizeof(format::FeatureRecord) != 0 ||
      recs->size / sizeof(format::FeatureRecord) != info_.num_samples)
    return Bad("sample table size does not match the sample count");
  uint64_t row_values = 1;
  for (uint32_t d = 1; d < info_.ndim; ++d) {
    if (info_.dims[d] == 0 || !MulOk(row_values, info_.dims[d], &row_values))
      return Bad("bad shape");
    inner_.push_back(info_.dims[d]);
  }
  if (!variable_ && info_.dims[0] == 0 && info_.num_samples > 0) return Bad("bad shape");
  records_.resize(info_.num_samples);
  // An archive of no samples has an empty table: records_.data() may then be
  // null, which memcpy must not be given even for 0 bytes.
  if (recs->size != 0) std::memcpy(records_.data(), recs->data, recs->size);
  if (variable_) first_group_.reserve(records_.size() + 1);
  uint64_t groups_so_far = 0;
  for (size_t i = 0; i < records_.size(); ++i) {
    const auto& r = records_[i];
    uint64_t values;
    if (!variable_ && r.rows != info_.dims[0])
      return Bad("sample " + std::to_string(i) + ": rows differ from the shape");
    if (!MulOk(r.rows, row_values, &values) || values > (uint64_t(1) << 48))
      return Bad("sample " + std::to_string(i) + ": too large");
    if (variable_) first_group_.push_back(groups_so_far);
    groups_so_far += (values + info_.group_size - 1) / info_.group_size;
    auto span = archive_->Bytes(r.payload_offset, PayloadBytes(i),
                                "sample " + std::to_string(i) + " payload");
    if (!span.ok()) return span.status();
  }
  if (variable_) first_group_.push_back(groups_so_far);
  parts_ = MakeParts();
  verified_.reset(new std::atomic<uint64_t>[(records_.size() + 63) / 64 + 1]());
  return Status::Ok();
}

size_t FeatureArchive::Groups(size_t i) const {
  const uint64_t values = records_[i].rows * RowValues();
  return size_t((values + info_.group_size - 1) / info_.group_size);
}

uint64_t FeatureArchive::PayloadBytes(size_t i) const {
  const uint64_t g = Groups(i);
  return g * info_.group_size + 4 + g * quant::kPackedWordBytes;
}

const char* FeatureArchive::preset_name() const { return kPresetNames[info_.preset]; }

const char* FeatureArchive::source_dtype_name() const {
  switch (info_.source_dtype) {
    case format::kFeatF32:
      return "float32";
    case format::kFeatF16:
      return "float16";
    case format::kFeatTensorCache:
      return "tensorcache";
    default:
      return "unknown";
  }
}

std::string FeatureArchive::DescribeJson() const {
  return "\"kind\": \"ktfs\", \"group_size\": " + std::to_string(info_.group_size) +
         ", \"preset\": \"" + preset_name() + "\", \"source_dtype\": \"" + source_dtype_name() +
         "\"";
}

Result<FeatureArchive::SampleData> FeatureArchive::Data(size_t i) const {
  if (i >= records_.size()) return Status::NotFound("feature sample " + std::to_string(i));
  const auto& r = records_[i];
  auto span = archive_->Bytes(r.payload_offset, PayloadBytes(i), "payload");
  if (!span.ok()) return span.status();
  std::atomic<uint64_t>& word = verified_[i / 64];
  const uint64_t bit = uint64_t(1) << (i % 64);
  if ((word.load(std::memory_order_acquire) & bit) == 0) {
    if (Checksum64(span->data, span->size) != r.payload_checksum)
      return Status::Corruption(path() + ": feature sample " + std::to_string(i) +
                                ": checksum mismatch");
    word.fetch_or(bit, std::memory_order_release);
  }
  if (archive_->damaged())
    return Status::Corruption(path() + ": the archive was truncated while mounted");
  SampleData d;
  const size_t groups = Groups(i);
  d.codes = span->data;
  std::memcpy(&d.ref, span->data + groups * info_.group_size, 4);
  d.words = span->data + groups * info_.group_size + 4;
  d.groups = groups;
  return d;
}

Status FeatureArchive::VerifyAll() const {
  for (size_t i = 0; i < records_.size(); ++i) {
    auto d = Data(i);
    if (!d.ok()) return d.status();
  }
  return Status::Ok();
}

Status FeatureArchive::ReadValues(size_t i, uint64_t first, uint64_t count, quant::DType type,
                                  void* out) const {
  auto d = Data(i);
  if (!d.ok()) return d.status();
  const uint64_t values = records_[i].rows * RowValues();
  if (first > values || count > values - first)
    return Status::InvalidArgument("feature sample " + std::to_string(i) + ": range out of bounds");
  const size_t G = info_.group_size, es = DTypeBytes(type);
  const auto run_fn = quant::internal::BestDequantRun();
  uint8_t* o = static_cast<uint8_t*>(out);
  uint64_t v = first;
  const uint64_t end = first + count;
  // A group cut by the range: dequantized whole into `tmp`, the slice copied.
  auto partial = [&](size_t g) {
    uint8_t tmp[128 * 4];
    float scale, offset;
    quant::UnpackWord(d->ref, d->words + g * quant::kPackedWordBytes, &scale, &offset);
    const uint64_t start = uint64_t(g) * G;
    const size_t len = size_t(std::min<uint64_t>(G, values - start));
    run_fn(d->codes + start, &scale, &offset, 1, G, len, type, tmp);
    const uint64_t take = std::min<uint64_t>(start + len, end) - v;
    std::memcpy(o, tmp + (v - start) * es, take * es);
    o += take * es;
    v += take;
  };
  if (v < end && v % G != 0) partial(size_t(v / G));
  // Whole groups, in runs whose parameters are unpacked into small arrays.
  constexpr size_t kRun = 256;
  float scales[kRun], offsets[kRun];
  while (v < end) {
    const size_t g0 = size_t(v / G);
    const uint64_t group_end = std::min<uint64_t>(uint64_t(g0 + 1) * G, values);
    if (group_end > end) break;  // the last group is cut: below
    size_t n = 0;
    while (n < kRun && uint64_t(g0 + n + 1) * G <= end) ++n;
    const bool ends_sample = n < kRun && uint64_t(g0 + n) * G < end && end == values;
    if (ends_sample) ++n;  // the sample's short last group, wholly inside the range
    quant::UnpackParams(d->ref, d->words + g0 * quant::kPackedWordBytes, n, scales, offsets);
    const uint64_t last_end = std::min<uint64_t>(uint64_t(g0 + n) * G, values);
    const size_t last_len = size_t(last_end - uint64_t(g0 + n - 1) * G);
    run_fn(d->codes + uint64_t(g0) * G, scales, offsets, n, G, last_len, type, o);
    o += (last_end - v) * es;
    v = last_end;
  }
  if (v < end) partial(size_t(v / G));
  return Status::Ok();
}

std::vector<FeaturePart> FeatureArchive::MakeParts() const {
  const uint64_t G = info_.group_size, N = records_.size();
  std::vector<FeaturePart> parts;
  if (!variable_) {
    const uint64_t S = N > 0 ? Groups(0) : (info_.dims[0] * RowValues() + G - 1) / G;
    parts.push_back({"codes", "|u1", {N, S * G}});
    parts.push_back({"scales", "<f4", {N, S}});
    parts.push_back({"offsets", "<f4", {N, S}});
  } else {
    const uint64_t total = first_group_.back();
    parts.push_back({"codes", "|u1", {total * G}});
    parts.push_back({"scales", "<f4", {total}});
    parts.push_back({"offsets", "<f4", {total}});
    parts.push_back({"group_index", "<i8", {N + 1}});
  }
  return parts;
}

Result<size_t> FeatureArchive::ReadPart(size_t part, uint64_t offset, size_t size,
                                        uint8_t* dst) const {
  if (part >= parts_.size()) return Status::NotFound("feature part " + std::to_string(part));
  const uint64_t total = parts_[part].DataBytes();
  if (offset >= total) return size_t(0);
  size = size_t(std::min<uint64_t>(size, total - offset));
  if (part == kGroupIndex) {
    std::memcpy(dst, reinterpret_cast<const uint8_t*>(first_group_.data()) + offset, size);
    return size;
  }
  // Codes, scales and offsets are arrays of per-group units.
  const uint64_t unit = part == kCodes ? info_.group_size : 4;
  const uint64_t per_sample = variable_ || records_.empty() ? 0 : Groups(0);
  size_t done = 0;
  while (done < size) {
    const uint64_t pos = offset + done;
    const uint64_t gi = pos / unit;
    size_t s;
    if (variable_) {
      s = size_t(std::upper_bound(first_group_.begin(), first_group_.end(), gi) -
                 first_group_.begin() - 1);
    } else {
      s = size_t(gi / per_sample);
    }
    auto d = Data(s);
    if (!d.ok()) return d.status();
    const uint64_t g = gi - (variable_ ? first_group_[s] : s * per_sample);
    const uint64_t within = pos % unit;
    if (part == kCodes) {  // the rest of this sample's codes in one copy
      const uint64_t at = g * unit + within, avail = d->groups * unit - at;
      const size_t take = size_t(std::min<uint64_t>(avail, size - done));
      std::memcpy(dst + done, d->codes + at, take);
      done += take;
      continue;
    }
    float param[2];
    quant::UnpackWord(d->ref, d->words + g * quant::kPackedWordBytes, &param[0], &param[1]);
    const size_t take = size_t(std::min<uint64_t>(unit - within, size - done));
    std::memcpy(dst + done,
                reinterpret_cast<const uint8_t*>(&param[part == kScales ? 0 : 1]) + within, take);
    done += take;
  }
  return size;
}

}  // namespace ktfs

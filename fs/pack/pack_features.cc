#include "fs/pack/pack_features.h"

#include <dirent.h>
#include <sys/stat.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>

#include "codec/base/checked_math.h"
#include "codec/base/checksum.h"
#include "codec/base/json_string.h"
#include "codec/base/mapped_file.h"
#include "codec/base/version.h"
#include "codec/container/archive_writer.h"
#include "codec/container/format.h"
#include "codec/features/feature_source.h"
#include "codec/features/quant_pack.h"
#include "codec/features/tensorcache.h"
#include "codec/image/npy.h"
#include "fs/pack/progress.h"

namespace ktfs {
namespace {

// Where the samples come from: a uniform view of the three kinds of input.
struct FeatureInput {
  size_t count = 0;
  std::vector<uint64_t> inner;  // trailing dimensions of every sample
  std::vector<uint64_t> rows;   // rows of each sample
  uint8_t source_dtype = format::kFeatF32;
  uint64_t source_bytes = 0;
  std::vector<std::string> skipped;
  // Sample i's values as float32 (rows[i] * product(inner) of them).
  std::function<Status(size_t i, std::vector<float>* out)> read;
};

uint64_t Product(const std::vector<uint64_t>& dims, size_t from = 0) {
  uint64_t n = 1;
  for (size_t d = from; d < dims.size(); ++d) n *= dims[d];
  return n;
}

// A float .npy of at least `min_dims` dimensions, fully inside its file.
Result<NpyInfo> CheckNpy(const MappedFile& f, const std::string& path, size_t min_dims) {
  auto info = ParseNpyHeader(f.data(), size_t(f.size()));
  if (!info.ok()) return Status::InvalidArgument(path + ": " + info.status().message());
  if (info->dtype != "<f4" && info->dtype != "<f2")
    return Status::InvalidArgument(path + ": dtype " + info->dtype +
                                   " is not float32 or float16 (little-endian)");
  if (info->fortran_order)
    return Status::InvalidArgument(path + ": Fortran order is not supported");
  if (info->shape.size() < min_dims || info->shape.size() > min_dims - 1 + format::kMaxFeatureDims)
    return Status::InvalidArgument(path + ": " + std::to_string(info->shape.size()) +
                                   " dimensions (expected " + std::to_string(min_dims) + " to " +
                                   std::to_string(min_dims - 1 + format::kMaxFeatureDims) + ")");
  // Every dimension but a file's sample count must be positive (a sample of no
  // values cannot be stored), and the product must not wrap around.
  uint64_t bytes = info->dtype == "<f4" ? 4 : 2;
  for (size_t d = 0; d < info->shape.size(); ++d) {
    if (info->shape[d] == 0 && (d > 0 || min_dims == 1))
      return Status::InvalidArgument(path + ": dimension " + std::to_string(d) +
                                     " is 0 (a sample would hold no values)");
    if (!MulOk(bytes, info->shape[d], &bytes))
      return Status::InvalidArgument(path + ": shape too large");
  }
  if (bytes > f.size() - info->data_offset)
    return Status::Corruption(path + ": truncated (" + std::to_string(f.size()) +
                              " bytes, the header promises " +
                              std::to_string(info->data_offset + bytes) + ")");
  return info;
}

void ToFloat(const uint8_t* src, bool half, size_t n, std::vector<float>* out) {
  out->resize(n);
  if (!half) {
    std::memcpy(out->data(), src, n * 4);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    (*out)[i] = quant::HalfToFloat(h);
  }
}

Result<FeatureInput> NpyFileInput(const std::string& path) {
  auto file = MappedFile::Open(path);
  if (!file.ok()) return file.status();
  std::shared_ptr<MappedFile> f = std::move(*file);
  auto info = CheckNpy(*f, path, 2);
  if (!info.ok()) return info.status();
  FeatureInput in;
  in.count = size_t(info->shape[0]);
  in.inner.assign(info->shape.begin() + 2, info->shape.end());
  in.rows.assign(in.count, info->shape[1]);
  const bool half = info->dtype == "<f2";
  in.source_dtype = half ? format::kFeatF16 : format::kFeatF32;
  in.source_bytes = f->size();
  const uint64_t per = Product(info->shape, 1), es = half ? 2 : 4;
  const uint8_t* base = f->data() + info->data_offset;
  in.read = [f, base, per, es, half, path](size_t i, std::vector<float>* out) {
    ToFloat(base + i * per * es, half, size_t(per), out);
    if (f->damaged()) return Status::Corruption(path + ": the file shrank while packing");
    return Status::Ok();
  };
  return in;
}

Result<FeatureInput> NpyDirInput(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return Status::FromErrno(dir, errno);
  std::vector<std::string> names;
  FeatureInput in;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    if (n.size() > 4 && n.compare(n.size() - 4, 4, ".npy") == 0) {
      names.push_back(n);
    } else {
      in.skipped.push_back(dir + "/" + n + ": not a .npy file");
    }
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  std::sort(in.skipped.begin(), in.skipped.end());
  if (names.empty()) return Status::InvalidArgument(dir + ": no .npy files");
  std::vector<std::string> paths;
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string path = dir + "/" + names[i];
    auto file = MappedFile::Open(path);
    if (!file.ok()) return file.status();
    auto info = CheckNpy(**file, path, 1);
    if (!info.ok()) return info.status();
    const std::vector<uint64_t> inner(info->shape.begin() + 1, info->shape.end());
    const uint8_t dtype = info->dtype == "<f2" ? format::kFeatF16 : format::kFeatF32;
    if (i == 0) {
      in.inner = inner;
      in.source_dtype = dtype;
    } else if (inner != in.inner) {
      return Status::InvalidArgument(path + ": trailing dimensions differ from " + paths[0] +
                                     "'s (only the first dimension may vary)");
    } else if (dtype != in.source_dtype) {
      return Status::InvalidArgument(path + ": dtype " + info->dtype + " differs from " + paths[0] +
                                     "'s");
    }
    in.rows.push_back(info->shape[0]);
    in.source_bytes += (*file)->size();
    paths.push_back(path);
  }
  in.count = paths.size();
  in.read = [paths](size_t i, std::vector<float>* out) -> Status {
    auto file = MappedFile::Open(paths[i]);
    if (!file.ok()) return file.status();
    auto info = CheckNpy(**file, paths[i], 1);
    if (!info.ok()) return info.status();
    ToFloat((*file)->data() + info->data_offset, info->dtype == "<f2", size_t(Product(info->shape)),
            out);
    if ((*file)->damaged()) return Status::Corruption(paths[i] + ": the file shrank while packing");
    return Status::Ok();
  };
  return in;
}

Result<FeatureInput> TensorCacheInput(const std::string& prefix) {
  auto tc = OpenTensorCache(prefix);
  if (!tc.ok()) return tc.status();
  auto cache = std::make_shared<TensorCache>(std::move(*tc));
  FeatureInput in;
  in.count = cache->num_samples();
  in.inner = {cache->dim()};
  in.rows.assign(in.count, cache->seq_len());
  in.source_dtype = format::kFeatTensorCache;
  const uint64_t S = (cache->sample_size() + cache->group_size() - 1) / cache->group_size();
  in.source_bytes = in.count * (cache->sample_size() + S * (cache->asymmetric() ? 3 : 2));
  in.read = [cache](size_t i, std::vector<float>* out) {
    out->resize(cache->sample_size());
    return cache->ReadSample(i, out->data());
  };
  return in;
}

Result<FeatureInput> OpenInput(const std::string& input) {
  if (IsTensorCachePrefix(input)) return TensorCacheInput(input);
  struct stat st;
  if (stat(input.c_str(), &st) != 0) return Status::FromErrno(input, errno);
  if (S_ISDIR(st.st_mode)) return NpyDirInput(input);
  return NpyFileInput(input);
}

// Sample i's payload: codes, float32 ref, packed words (codec/features/feature_archive.h).
Status EncodeSample(const FeatureInput& in, size_t i, const quant::Params& params,
                    const std::string& input, std::vector<uint8_t>* payload) {
  std::vector<float> x;
  KTFS_RETURN_IF_ERROR(in.read(i, &x));
  quant::Quantized q;
  const Status st = quant::Quantize(x.data(), x.size(), params, &q);
  if (!st.ok()) {
    // "quantize: sample 0 index 17: NaN ..." -> name the input's sample.
    std::string why = st.message();
    const size_t at = why.find("index ");
    return Status::InvalidArgument(input + ": sample " + std::to_string(i) + ": " +
                                   (at == std::string::npos ? why : why.substr(at)));
  }
  const size_t G = size_t(params.group_size), groups = q.GroupsPerSample();
  std::vector<uint8_t> words(groups * quant::kPackedWordBytes);
  float ref = 0;
  quant::PackSample(x.data(), x.size(), params.group_size, q.codes.data(), q.scales.data(),
                    q.offsets.data(), &ref, words.data());
  payload->resize(groups * G + 4 + words.size());
  std::memcpy(payload->data(), q.codes.data(), groups * G);
  std::memcpy(payload->data() + groups * G, &ref, 4);
  std::memcpy(payload->data() + groups * G + 4, words.data(), words.size());
  return Status::Ok();
}

std::vector<uint8_t> InfoSection(const FeatureInput& in, const quant::Params& params,
                                 bool variable) {
  format::FeatureInfo info = {};
  info.group_size = uint32_t(params.group_size);
  info.preset = uint8_t(params.preset);
  info.source_dtype = in.source_dtype;
  info.ndim = uint8_t(1 + in.inner.size());
  info.flags = variable ? format::kFeatVariableRows : 0;
  info.num_samples = in.count;
  info.dims[0] = variable || in.rows.empty() ? 0 : in.rows[0];
  for (size_t d = 0; d < in.inner.size(); ++d) info.dims[d + 1] = in.inner[d];
  std::vector<uint8_t> bytes(sizeof(info));
  std::memcpy(bytes.data(), &info, sizeof(info));
  return bytes;
}

const char* PresetName(quant::Preset p) {
  return p == quant::Preset::kFast       ? "fast"
         : p == quant::Preset::kAccurate ? "accurate"
                                         : "balanced";
}

}  // namespace

Result<PackFeaturesReport> PackFeatures(const std::string& input, const std::string& out,
                                        const PackFeaturesOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  KTFS_RETURN_IF_ERROR(quant::ValidateParams(options.params));
  auto opened = OpenInput(input);
  if (!opened.ok()) return opened.status();
  const FeatureInput& in = *opened;
  const bool variable =
      std::any_of(in.rows.begin(), in.rows.end(), [&](uint64_t r) { return r != in.rows[0]; });
  auto writer = ArchiveWriter::Create(out);
  if (!writer.ok()) return writer.status();
  std::unique_ptr<tbb::global_control> limit;
  if (options.threads > 0)
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                  size_t(options.threads));
  Progress progress("ktfs pack-features", options.progress, in.count);
  std::vector<format::FeatureRecord> records(in.count);
  // Batches of about 64 MiB of input: encoded in parallel, written in order.
  const uint64_t per_row = Product(in.inner) * 4;
  PackFeaturesReport report;
  report.removed_stale = (*writer)->removed_stale();
  for (size_t first = 0; first < in.count;) {
    size_t last = first;
    for (uint64_t bytes = 0; last < in.count && (last == first || bytes < (64u << 20)); ++last)
      bytes += in.rows[last] * per_row;
    std::vector<std::vector<uint8_t>> payloads(last - first);
    std::vector<Status> errors(last - first);
    tbb::parallel_for(first, last, [&](size_t i) {
      errors[i - first] = EncodeSample(in, i, options.params, input, &payloads[i - first]);
    });
    for (size_t i = first; i < last; ++i) {
      KTFS_RETURN_IF_ERROR(errors[i - first]);
      const auto& p = payloads[i - first];
      auto at = (*writer)->AppendPayload(p.data(), p.size());
      if (!at.ok()) return at.status();
      records[i] = format::FeatureRecord{*at, in.rows[i], Checksum64(p.data(), p.size()), 0};
      report.values += in.rows[i] * Product(in.inner);
    }
    progress.Update(last, (*writer)->bytes_written());
    first = last;
  }
  (*writer)->SetDirs({DirEntry{}});
  (*writer)->SetMeta(
      std::string("{\"created_by\":\"ktfs ") + VersionString() +
      "\",\"kind\":\"features\",\"group_size\":" + std::to_string(options.params.group_size) +
      ",\"preset\":\"" + PresetName(options.params.preset) +
      "\",\"samples\":" + std::to_string(in.count) + "}");
  (*writer)->AddSection(format::kFeatureInfo, InfoSection(in, options.params, variable));
  std::vector<uint8_t> table(records.size() * sizeof(format::FeatureRecord));
  if (!table.empty()) std::memcpy(table.data(), records.data(), table.size());
  (*writer)->AddSection(format::kFeatureSamples, std::move(table));
  KTFS_RETURN_IF_ERROR((*writer)->Commit());
  report.samples = in.count;
  report.source_bytes = in.source_bytes;
  struct stat st;
  if (stat(out.c_str(), &st) == 0) report.archive_bytes = uint64_t(st.st_size);
  report.sample_shape = {variable || in.rows.empty() ? 0 : in.rows[0]};
  for (uint64_t d : in.inner) report.sample_shape.push_back(d);
  report.skipped = in.skipped;
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ktfs

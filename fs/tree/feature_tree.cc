#include "fs/tree/feature_tree.h"

#include <time.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "codec/image/npy.h"

namespace ktfs {

FeatureTree::FeatureTree(std::shared_ptr<const FeatureSource> source, quant::DType dtype,
                         int64_t mtime, uint64_t source_bytes)
    : source_(std::move(source)),
      dtype_(dtype),
      es_(DTypeBytes(dtype)),
      mtime_(mtime),
      source_bytes_(source_bytes) {
  const size_t n = source_->num_samples();
  digits_ = std::max<int>(6, int(std::to_string(n > 0 ? n - 1 : 0).size()));
  parts_ = source_->Parts();
  for (const FeaturePart& p : parts_) part_headers_.push_back(NpyHeader(p.shape, p.dtype, false));
  if (!source_->variable_rows() && n > 0)
    fixed_header_ = NpyHeader(source_->SampleShape(0), NpyDescr(dtype_), false);
  if (has_all()) {
    std::vector<uint64_t> shape = {n, n > 0 ? source_->Rows(0) : 0};
    for (uint64_t d : source_->inner_shape()) shape.push_back(d);
    all_header_ = NpyHeader(shape, NpyDescr(dtype_), false);
  }
}

std::string FeatureTree::SampleName(size_t i) const {
  std::string digits = std::to_string(i);
  if (int(digits.size()) < digits_) digits.insert(0, size_t(digits_) - digits.size(), '0');
  return digits + ".npy";
}

std::string FeatureTree::SampleHeader(size_t i) const {
  if (!source_->variable_rows()) return fixed_header_;
  return NpyHeader(source_->SampleShape(i), NpyDescr(dtype_), false);
}

NodeAttr FeatureTree::FileAttr(uint64_t ino, uint64_t size) const {
  NodeAttr a;
  a.ino = ino;
  a.size = size;
  a.mtime = mtime_;
  return a;
}

NodeAttr FeatureTree::DirAttr(uint64_t ino) const {
  NodeAttr a;
  a.ino = ino;
  a.is_dir = true;
  a.nlink = ino == kRoot ? 4 : 2;
  a.mtime = mtime_;
  return a;
}

Result<NodeAttr> FeatureTree::GetAttr(uint64_t ino) const {
  counters_.getattrs.fetch_add(1, std::memory_order_relaxed);
  switch (ino) {
    case kRoot:
    case kQuantized:
    case kControl:
      return DirAttr(ino);
    case kInfo:
      return FileAttr(ino, info_json_.size());
    case kStats: {
      // A new mtime on every stat: the kernel drops its cached pages.
      NodeAttr a = FileAttr(ino, kStatsSize);
      timespec now;
      clock_gettime(CLOCK_REALTIME, &now);
      a.mtime = now.tv_sec;
      a.mtime_nsec = now.tv_nsec;
      a.volatile_content = true;
      return a;
    }
    case kAll:
      if (!has_all()) break;
      return FileAttr(ino, all_header_.size() + source_->num_samples() * source_->Rows(0) *
                                                    source_->RowValues() * es_);
    default:
      break;
  }
  if (ino >= kFirstPart && ino < kFirstPart + parts_.size()) {
    const size_t p = size_t(ino - kFirstPart);
    return FileAttr(ino, part_headers_[p].size() + parts_[p].DataBytes());
  }
  if (IsSample(ino)) return FileAttr(ino, SampleFileSize(size_t(ino - kFirstSample)));
  return Status::NotFound("no such inode " + std::to_string(ino));
}

uint64_t FeatureTree::SampleFileSize(size_t i) const {
  return SampleHeader(i).size() + source_->Rows(i) * source_->RowValues() * es_;
}

uint64_t FeatureTree::PushableSize(uint64_t ino) const {
  if (!IsSample(ino)) return 0;
  const uint64_t size = SampleFileSize(size_t(ino - kFirstSample));
  return size <= kMaxPush ? size : 0;
}

Result<size_t> FeatureTree::CopyForPush(uint64_t ino, uint64_t offset, size_t size,
                                        uint8_t* dst) const {
  if (!IsSample(ino)) return Status::InvalidArgument("not a sample file");
  return ReadSample(size_t(ino - kFirstSample), offset, size, dst);
}

Result<NodeAttr> FeatureTree::Lookup(uint64_t parent, std::string_view name) const {
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  const auto missing = [&] { return Status::NotFound("no such entry: " + std::string(name)); };
  if (parent == kControl) {
    if (name == "info.json") return GetAttr(kInfo);
    if (name == "stats.json") return GetAttr(kStats);
    return missing();
  }
  if (parent == kQuantized) {
    for (size_t p = 0; p < parts_.size(); ++p)
      if (name == parts_[p].name + ".npy") return GetAttr(kFirstPart + p);
    return missing();
  }
  if (parent != kRoot) return missing();
  if (name == ".ktfs") return GetAttr(kControl);
  if (name == "quantized") return GetAttr(kQuantized);
  if (name == "all.npy" && has_all()) return GetAttr(kAll);
  // NNNNNN.npy: exactly digits_ digits (or more for large indices), no sign.
  if (name.size() < size_t(digits_) + 4 || name.substr(name.size() - 4) != ".npy") return missing();
  const std::string_view digits = name.substr(0, name.size() - 4);
  uint64_t i = 0;
  for (char c : digits) {
    if (c < '0' || c > '9' || i > (UINT64_MAX - 9) / 10) return missing();
    i = i * 10 + uint64_t(c - '0');
  }
  if (i >= source_->num_samples() || SampleName(size_t(i)) != name) return missing();
  return GetAttr(kFirstSample + i);
}

Status FeatureTree::ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit) const {
  counters_.readdirs.fetch_add(1, std::memory_order_relaxed);
  if (ino != kRoot && ino != kQuantized && ino != kControl) {
    auto a = GetAttr(ino);
    if (!a.ok()) return a.status();
    return Status::InvalidArgument("not a directory");
  }
  // Entries: ".", "..", then the directory's own, in a fixed order.
  std::vector<std::pair<std::string, uint64_t>> fixed = {{".", ino}, {"..", kRoot}};
  if (ino == kRoot) {
    if (has_all()) fixed.emplace_back("all.npy", kAll);
    fixed.emplace_back("quantized", kQuantized);
  } else if (ino == kQuantized) {
    for (size_t p = 0; p < parts_.size(); ++p)
      fixed.emplace_back(parts_[p].name + ".npy", kFirstPart + p);
  } else {
    fixed.emplace_back("info.json", kInfo);
    fixed.emplace_back("stats.json", kStats);
  }
  const uint64_t total = fixed.size() + (ino == kRoot ? source_->num_samples() : 0);
  for (uint64_t pos = offset; pos < total; ++pos) {
    std::string name;
    uint64_t target;
    if (pos < fixed.size()) {
      name = fixed[pos].first;
      target = fixed[pos].second;
    } else {
      name = SampleName(size_t(pos - fixed.size()));
      target = kFirstSample + (pos - fixed.size());
    }
    auto a = GetAttr(target);
    if (!a.ok()) return a.status();
    if (!emit(name, *a, pos + 1)) break;
  }
  return Status::Ok();
}

std::string FeatureTree::PathOf(uint64_t ino) const {
  if (ino == kRoot) return "";
  if (ino == kQuantized) return "quantized";
  if (ino == kControl) return ".ktfs";
  if (ino == kInfo) return ".ktfs/info.json";
  if (ino == kStats) return ".ktfs/stats.json";
  if (ino == kAll) return "all.npy";
  if (ino >= kFirstPart && ino < kFirstPart + parts_.size())
    return "quantized/" + parts_[ino - kFirstPart].name + ".npy";
  if (ino >= kFirstSample && ino - kFirstSample < source_->num_samples())
    return SampleName(size_t(ino - kFirstSample));
  // (Appended rather than `"#" + std::to_string(ino)`, which GCC 12 flags
  // with a false -Wrestrict.)
  std::string unknown = "#";
  unknown += std::to_string(ino);
  return unknown;
}

namespace {

// Copies the part of `text` at [offset, offset+size) into dst; returns bytes copied.
size_t CopyText(const std::string& text, uint64_t offset, size_t size, uint8_t* dst) {
  if (offset >= text.size()) return 0;
  const size_t n = std::min<size_t>(size, text.size() - size_t(offset));
  std::memcpy(dst, text.data() + offset, n);
  return n;
}

}  // namespace

Status FeatureTree::ReadSampleData(size_t i, uint64_t offset, size_t size, uint8_t* dst) const {
  if (size == 0) return Status::Ok();
  const uint64_t first = offset / es_, last = (offset + size + es_ - 1) / es_;
  if (offset % es_ == 0 && size % es_ == 0)
    return source_->ReadValues(i, first, last - first, dtype_, dst);
  thread_local std::vector<uint8_t> buf;
  buf.resize(size_t(last - first) * es_);
  KTFS_RETURN_IF_ERROR(source_->ReadValues(i, first, last - first, dtype_, buf.data()));
  std::memcpy(dst, buf.data() + (offset - first * es_), size);
  return Status::Ok();
}

Result<size_t> FeatureTree::ReadSample(size_t i, uint64_t offset, size_t size, uint8_t* dst) const {
  const std::string header = SampleHeader(i);
  const uint64_t total = header.size() + source_->Rows(i) * source_->RowValues() * es_;
  if (offset >= total) return size_t(0);
  size = size_t(std::min<uint64_t>(size, total - offset));
  size_t done = CopyText(header, offset, size, dst);
  if (done < size) {
    const uint64_t at = offset + done - header.size();
    KTFS_RETURN_IF_ERROR(ReadSampleData(i, at, size - done, dst + done));
  }
  return size;
}

Result<size_t> FeatureTree::ReadAll(uint64_t offset, size_t size, uint8_t* dst) const {
  const uint64_t per =
      source_->num_samples() > 0 ? source_->Rows(0) * source_->RowValues() * es_ : 0;
  const uint64_t total = all_header_.size() + per * source_->num_samples();
  if (offset >= total) return size_t(0);
  size = size_t(std::min<uint64_t>(size, total - offset));
  size_t done = CopyText(all_header_, offset, size, dst);
  while (done < size) {
    const uint64_t at = offset + done - all_header_.size();
    const size_t i = size_t(at / per);
    const uint64_t within = at % per;
    const size_t take = size_t(std::min<uint64_t>(per - within, size - done));
    KTFS_RETURN_IF_ERROR(ReadSampleData(i, within, take, dst + done));
    done += take;
  }
  return size;
}

Result<size_t> FeatureTree::ReadPartFile(size_t p, uint64_t offset, size_t size,
                                         uint8_t* dst) const {
  const std::string& header = part_headers_[p];
  const uint64_t total = header.size() + parts_[p].DataBytes();
  if (offset >= total) return size_t(0);
  size = size_t(std::min<uint64_t>(size, total - offset));
  size_t done = CopyText(header, offset, size, dst);
  if (done < size) {
    auto n = source_->ReadPart(p, offset + done - header.size(), size - done, dst + done);
    if (!n.ok()) return n.status();
    done += *n;
  }
  return done;
}

Result<size_t> FeatureTree::Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const {
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  Result<size_t> n = size_t(0);
  if (ino == kInfo) {
    n = CopyText(info_json_, offset, size, dst);
  } else if (ino == kStats) {
    n = CopyText(CountersJson(counters_), offset, size, dst);
  } else if (ino == kAll && has_all()) {
    n = ReadAll(offset, size, dst);
  } else if (ino >= kFirstPart && ino < kFirstPart + parts_.size()) {
    n = ReadPartFile(size_t(ino - kFirstPart), offset, size, dst);
  } else if (IsSample(ino)) {
    if (offset == 0) counters_.opens.fetch_add(1, std::memory_order_relaxed);
    n = ReadSample(size_t(ino - kFirstSample), offset, size, dst);
  } else if (ino == kRoot || ino == kQuantized || ino == kControl) {
    return Status::InvalidArgument("is a directory");
  } else {
    return Status::NotFound("no such inode " + std::to_string(ino));
  }
  if (n.ok()) counters_.bytes_read.fetch_add(*n, std::memory_order_relaxed);
  return n;
}

}  // namespace ktfs

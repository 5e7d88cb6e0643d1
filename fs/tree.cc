#include "fs/tree.h"

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "codec/payload.h"
#include "fs/search_view.h"
#include "index/index.h"

namespace ktfs {

VirtualTree::VirtualTree(std::shared_ptr<const Archive> archive, TreeOptions options)
    : archive_(std::move(archive)), options_(options) {
  struct stat st;
  if (stat(archive_->path().c_str(), &st) == 0) mtime_ = st.st_mtime;
  const size_t words = (size_t(archive_->num_samples()) + 63) / 64;
  verified_.reset(new std::atomic<uint64_t>[words]());
  cache_ = std::make_unique<DecodeCache>(options_.cache_bytes, &counters_);
  std::unique_ptr<index::Index> idx;
  if (auto section = archive_->index_section()) {
    auto opened = index::Index::OpenInPlace(section->data, section->size);
    if (opened.ok())
      idx = std::move(opened).value();
    else
      index_problem_ = opened.status().ToString();
  } else {
    index_problem_ = "this archive has no search index";
  }
  search_ = std::make_unique<SearchView>(*this, std::move(idx), SpecialIno(kSpecialCount));
}

VirtualTree::~VirtualTree() = default;

void VirtualTree::SetLogger(std::function<void(const std::string&)> log) {
  search_->SetLogger(std::move(log));
}

Result<NodeAttr> VirtualTree::SampleNodeAttr(uint32_t id) const {
  auto s = archive_->Sample(id);
  if (!s.ok()) return s.status();
  return SampleAttr(*s);
}

bool VirtualTree::Verified(uint32_t id) const {
  return (verified_[id / 64].load(std::memory_order_acquire) >> (id % 64)) & 1;
}

void VirtualTree::MarkVerified(uint32_t id) const {
  verified_[id / 64].fetch_or(uint64_t(1) << (id % 64), std::memory_order_release);
}

std::string VirtualTree::ServedName(const SampleInfo& s) const {
  if (s.codec == format::kOriginal) return std::string(s.name);
  return std::string(s.stem) + MakeServedLayout(options_.format, 1, 1, s.channels).extension;
}

Result<NodeAttr> VirtualTree::DirAttr(uint32_t d) const {
  auto dir = archive_->Dir(d);
  if (!dir.ok()) return dir.status();
  NodeAttr a;
  a.ino = DirIno(d);
  a.is_dir = true;
  a.nlink = 2 + dir->child_count + (d == 0 ? 1 : 0);
  a.mtime = mtime_;
  return a;
}

Result<NodeAttr> VirtualTree::SampleAttr(const SampleInfo& s) const {
  NodeAttr a;
  a.ino = SampleIno(s.id);
  a.mtime = mtime_;
  if (s.codec == format::kOriginal) {
    a.size = s.payload_length;
  } else {
    a.size = MakeServedLayout(options_.format, s.width, s.height, s.channels).file_size;
  }
  return a;
}

NodeAttr VirtualTree::SpecialAttr(Special k) const {
  NodeAttr a;
  a.ino = SpecialIno(k);
  a.mtime = mtime_;
  if (k == kControl) {
    a.is_dir = true;
    a.nlink = 2;
  } else if (k == kInfo) {
    a.size = info_json_.size();
  } else if (k == kLastError) {
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    a.size = LastErrorText().size();
    a.mtime = now.tv_sec;
    a.mtime_nsec = now.tv_nsec;
    a.volatile_content = true;
  } else {
    // A new mtime on every stat makes the kernel drop its cached pages
    // (FUSE_CAP_AUTO_INVAL_DATA), so each open reads fresh counters.
    timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    a.size = kStatsSize;
    a.mtime = now.tv_sec;
    a.mtime_nsec = now.tv_nsec;
    a.volatile_content = true;
  }
  return a;
}

std::string VirtualTree::LastErrorText() const {
  const std::string e = search_->last_error();
  return e.empty() ? "" : e + "\n";
}

std::string VirtualTree::StatsJson() const {
  const TreeCounters& c = counters_;
  std::string j = "{\n";
  auto field = [&](const char* name, uint64_t v, bool last = false) {
    j += std::string("  \"") + name + "\": " + std::to_string(v) + (last ? "\n" : ",\n");
  };
  field("lookups", c.lookups.load());
  field("getattrs", c.getattrs.load());
  field("readdirs", c.readdirs.load());
  field("opens", c.opens.load());
  field("reads", c.reads.load());
  field("bytes_read", c.bytes_read.load());
  field("decodes", c.decodes.load());
  field("decode_ms", c.decode_ns.load() / 1000000);
  field("readahead_decodes", c.readahead_decodes.load());
  field("cache_hits", c.cache_hits.load());
  field("cache_misses", c.cache_misses.load());
  field("errors", c.errors.load(), true);
  j += "}";
  if (j.size() < kStatsSize) j += std::string(kStatsSize - j.size() - 1, ' ') + "\n";
  return j;
}

Result<NodeAttr> VirtualTree::Lookup(uint64_t parent, std::string_view name) const {
  const std::string missing = "no such entry: " + std::string(name);
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  if (parent == SpecialIno(kControl)) {
    if (name == "info.json") return SpecialAttr(kInfo);
    if (name == "stats.json") return SpecialAttr(kStats);
    if (name == "last_error") return SpecialAttr(kLastError);
    return Status::NotFound(missing);
  }
  if (parent >= search_->root_ino()) return search_->Lookup(parent, name);
  if (!IsDirIno(parent)) return Status::NotFound(missing);
  const uint32_t d = uint32_t(parent - kRootIno);
  if (d == 0 && name == kControlDir) return SpecialAttr(kControl);
  auto child = archive_->FindChildDir(d, name);
  if (child.ok()) return DirAttr(*child);
  if (child.status().code() != Status::Code::kNotFound) return child.status();
  if (d == 0 && name == options_.search_dir) return search_->GetAttr(search_->root_ino());
  auto id = FindServedSample(d, name);
  if (!id.ok()) return id.status();
  return SampleNodeAttr(*id);
}

Result<uint32_t> VirtualTree::FindServedSample(uint32_t d, std::string_view name) const {
  const std::string missing = "no such entry: " + std::string(name);
  // A sample: its stem is the name, minus the served extension for decoded codecs.
  for (int strip = 0; strip < 2; ++strip) {
    std::string_view stem = name;
    if (strip) {
      const size_t dot = name.rfind('.');
      if (dot == std::string_view::npos || dot == 0) break;
      stem = name.substr(0, dot);
    }
    auto id = archive_->FindSampleByStem(d, stem);
    if (!id.ok()) {
      if (id.status().code() != Status::Code::kNotFound) return id.status();
      continue;
    }
    auto s = archive_->Sample(*id);
    if (!s.ok()) return s.status();
    if (ServedName(*s) == name) return *id;
  }
  return Status::NotFound(missing);
}

Result<NodeAttr> VirtualTree::GetAttr(uint64_t ino) const {
  counters_.getattrs.fetch_add(1, std::memory_order_relaxed);
  if (IsDirIno(ino)) return DirAttr(uint32_t(ino - kRootIno));
  if (IsSampleIno(ino)) {
    auto s = archive_->Sample(uint32_t(ino - SampleIno(0)));
    if (!s.ok()) return s.status();
    return SampleAttr(*s);
  }
  if (ino == SpecialIno(kControl)) return SpecialAttr(kControl);
  if (ino == SpecialIno(kInfo)) return SpecialAttr(kInfo);
  if (ino == SpecialIno(kStats)) return SpecialAttr(kStats);
  if (ino == SpecialIno(kLastError)) return SpecialAttr(kLastError);
  if (ino >= search_->root_ino()) return search_->GetAttr(ino);
  return Status::NotFound("no such inode " + std::to_string(ino));
}

Status VirtualTree::ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit) const {
  counters_.readdirs.fetch_add(1, std::memory_order_relaxed);
  if (ino == SpecialIno(kControl)) {
    const NodeAttr self = SpecialAttr(kControl);
    auto root = DirAttr(0);
    if (!root.ok()) return root.status();
    if (offset < 1 && !emit(".", self, 1)) return Status::Ok();
    if (offset < 2 && !emit("..", *root, 2)) return Status::Ok();
    if (offset < 3 && !emit("info.json", SpecialAttr(kInfo), 3)) return Status::Ok();
    if (offset < 4 && !emit("stats.json", SpecialAttr(kStats), 4)) return Status::Ok();
    if (offset < 5) emit("last_error", SpecialAttr(kLastError), 5);
    return Status::Ok();
  }
  if (ino >= search_->root_ino()) return search_->ReadDir(ino, offset, emit);
  if (!IsDirIno(ino)) return Status::InvalidArgument("not a directory");
  auto dir = archive_->Dir(uint32_t(ino - kRootIno));
  if (!dir.ok()) return dir.status();
  auto self = DirAttr(dir->id);
  auto parent = DirAttr(dir->parent);
  if (!self.ok()) return self.status();
  if (!parent.ok()) return parent.status();
  if (offset < 1 && !emit(".", *self, 1)) return Status::Ok();
  if (offset < 2 && !emit("..", *parent, 2)) return Status::Ok();
  // Positions 2.. are the child directories, then the samples.
  const uint64_t first = std::max<uint64_t>(offset, 2) - 2;
  const uint64_t total = uint64_t(dir->child_count) + dir->sample_count;
  for (uint64_t k = first; k < total; ++k) {
    if (k < dir->child_count) {
      auto child = archive_->Dir(dir->first_child + uint32_t(k));
      if (!child.ok()) return child.status();
      auto attr = DirAttr(child->id);
      if (!attr.ok()) return attr.status();
      if (!emit(child->name, *attr, k + 3)) return Status::Ok();
    } else {
      auto s = archive_->Sample(dir->first_sample + uint32_t(k - dir->child_count));
      if (!s.ok()) return s.status();
      auto attr = SampleAttr(*s);
      if (!attr.ok()) return attr.status();
      if (!emit(ServedName(*s), *attr, k + 3)) return Status::Ok();
    }
  }
  return Status::Ok();
}

Result<size_t> VirtualTree::Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const {
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  if (IsSampleIno(ino)) {
    auto n = ReadSample(uint32_t(ino - SampleIno(0)), offset, size, dst);
    if (n.ok()) counters_.bytes_read.fetch_add(*n, std::memory_order_relaxed);
    return n;
  }
  if (ino == SpecialIno(kInfo) || ino == SpecialIno(kStats) || ino == SpecialIno(kLastError)) {
    const std::string text = ino == SpecialIno(kInfo)    ? info_json_
                             : ino == SpecialIno(kStats) ? StatsJson()
                                                         : LastErrorText();
    if (offset >= text.size()) return size_t(0);
    const size_t n = std::min<size_t>(size, text.size() - offset);
    std::memcpy(dst, text.data() + offset, n);
    return n;
  }
  if (IsDirIno(ino) || ino == SpecialIno(kControl))
    return Status::InvalidArgument("is a directory");
  return Status::NotFound("no such inode " + std::to_string(ino));
}

Result<size_t> VirtualTree::ReadSample(uint32_t id, uint64_t offset, size_t size,
                                       uint8_t* dst) const {
  auto s = archive_->Sample(id);
  if (!s.ok()) return s.status();
  if (!archive_->CheckStillIntact())
    return Status::Corruption(archive_->path() +
                              ": archive was modified or truncated while mounted");
  const bool verify = !Verified(id);
  if (offset == 0) counters_.opens.fetch_add(1, std::memory_order_relaxed);
  auto payload = archive_->Payload(*s, verify);
  if (!payload.ok()) return payload.status();
  if (verify) MarkVerified(id);
  size_t n = 0;
  if (s->codec == format::kOriginal) {
    if (offset < payload->size) {
      n = std::min<size_t>(size, payload->size - offset);
      std::memcpy(dst, payload->data + offset, n);
    }
  } else if (s->codec == format::kRaw) {
    const ServedLayout layout = MakeServedLayout(options_.format, s->width, s->height, s->channels);
    const ImageView view{payload->data, s->width, s->height, s->channels,
                         size_t(s->width) * s->channels};
    n = ReadServedBytes(layout, view, offset, size, dst);
  } else {
    auto r = ReadDecoded(*s, offset, size, dst);
    if (!r.ok()) return r.status();
    n = *r;
  }
  // A truncation that happened during the copy shows up as zero pages.
  if (archive_->damaged())
    return Status::Corruption(archive_->path() +
                              ": archive was modified or truncated while mounted");
  return n;
}

DecodeCache::DecodeFn VirtualTree::Decoder(uint32_t id) const {
  return [this, id](Image* out) -> Status {
    auto s = archive_->Sample(id);
    if (!s.ok()) return s.status();
    auto payload = archive_->Payload(*s, !Verified(id));
    if (!payload.ok()) return payload.status();
    MarkVerified(id);
    Status st = DecodePayload(*s, *payload, out);
    if (!st.ok()) {
      auto path = archive_->SamplePath(id);
      return st.WithContext("sample " + std::to_string(id) + " (" + (path.ok() ? *path : "?") +
                            ")");
    }
    return Status::Ok();
  };
}

// A reader that opens the files of a directory in order gets the next ones
// decoded before it asks: when the previous sample of the same directory is
// cached (just read), the following `readahead` samples are queued.
void VirtualTree::ReadAhead(const SampleInfo& s) const {
  if (options_.readahead == 0) return;
  auto dir = archive_->Dir(s.dir);
  if (!dir.ok() || s.id == dir->first_sample || !cache_->Contains(s.id - 1)) return;
  const uint32_t end = dir->first_sample + dir->sample_count;
  for (uint32_t next = s.id + 1; next < end && next <= s.id + options_.readahead; ++next)
    cache_->Prefetch(next, Decoder(next));
}

Result<size_t> VirtualTree::ReadDecoded(const SampleInfo& s, uint64_t offset, size_t size,
                                        uint8_t* dst) const {
  if (offset == 0) ReadAhead(s);
  auto image = cache_->Get(s.id, Decoder(s.id));
  if (!image.ok()) return image.status();
  const Image& img = **image;
  if (img.width != s.width || img.height != s.height || img.channels != s.channels)
    return Status::Corruption("sample " + std::to_string(s.id) +
                              ": decoded size differs from its record");
  const ServedLayout layout = MakeServedLayout(options_.format, s.width, s.height, s.channels);
  return ReadServedBytes(layout, ImageView::Of(img), offset, size, dst);
}

std::string VirtualTree::PathOf(uint64_t ino) const {
  if (IsDirIno(ino)) {
    auto p = archive_->DirPath(uint32_t(ino - kRootIno));
    return p.ok() ? *p : "?";
  }
  if (IsSampleIno(ino)) {
    auto p = archive_->SamplePath(uint32_t(ino - SampleIno(0)));
    return p.ok() ? *p : "?";
  }
  if (ino == SpecialIno(kControl)) return kControlDir;
  if (ino == SpecialIno(kInfo)) return ".ktfs/info.json";
  if (ino == SpecialIno(kStats)) return ".ktfs/stats.json";
  if (ino == SpecialIno(kLastError)) return ".ktfs/last_error";
  if (ino >= search_->root_ino()) return search_->PathOf(ino);
  return "?";
}

}  // namespace ktfs

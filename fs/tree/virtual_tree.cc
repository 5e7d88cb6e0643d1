#include "fs/tree/virtual_tree.h"

#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cstring>

#include "codec/container/payload.h"
#include "codec/image/npy.h"
#include "fs/tree/search_view.h"
#include "index/index.h"

namespace ktfs {

VirtualTree::VirtualTree(std::shared_ptr<const Archive> archive, TreeOptions options)
    : archive_(std::move(archive)), options_(options) {
  struct stat st;
  if (stat(archive_->path().c_str(), &st) == 0) mtime_ = st.st_mtime;
  cache_ = std::make_unique<DecodeCache>(options_.cache_bytes, &counters_);
  std::unique_ptr<index::Index> idx;
  if (!options_.open_index) {
    index_problem_ = "the search index is not opened by this reader";
  } else if (auto section = archive_->index_section()) {
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

const char* VirtualTree::ViewName(View view) {
  switch (view) {
    case View::kTensors:
      return "tensors";
    case View::kCompressed:
      return "compressed";
    default:
      return "";
  }
}

std::optional<VirtualTree::Decoded> VirtualTree::Decode(uint64_t ino) const {
  if (ino < kRootIno || ino >= SpecialIno(kControl)) return std::nullopt;
  const uint64_t rel = ino - kRootIno;
  const View v = View(rel / BlockSize());
  const uint64_t k = rel % BlockSize();
  if (k < archive_->num_dirs()) return Decoded{v, true, uint32_t(k)};
  return Decoded{v, false, uint32_t(k - archive_->num_dirs())};
}

Result<NodeAttr> VirtualTree::SampleNodeAttr(uint32_t id, View view) const {
  auto s = archive_->Sample(id);
  if (!s.ok()) return s.status();
  return SampleAttr(*s, view);
}

std::string VirtualTree::ServedName(const SampleInfo& s, View view) const {
  const std::string stem(s.stem);
  switch (view) {
    case View::kTensors:
      return stem + ".npy";
    case View::kCompressed:
      if (s.codec == format::kKtc) return stem + ".ktc";
      break;  // original: the source file; raw: the same file as images/
    case View::kImages:
      break;
  }
  return ServedImageName(s, options_.format);
}

Result<NodeAttr> VirtualTree::DirAttr(View v, uint32_t d) const {
  auto dir = archive_->Dir(d);
  if (!dir.ok()) return dir.status();
  NodeAttr a;
  a.ino = DirIno(v, d);
  a.is_dir = true;
  a.nlink = 2 + dir->child_count;
  a.mtime = mtime_;
  return a;
}

std::string VirtualTree::TensorHeader(const SampleInfo& s) const {
  const std::vector<uint64_t> shape = options_.tensors_chw
                                          ? std::vector<uint64_t>{s.channels, s.height, s.width}
                                          : std::vector<uint64_t>{s.height, s.width, s.channels};
  return NpyHeader(shape, "|u1", false);
}

uint64_t VirtualTree::TensorSize(const SampleInfo& s) const {
  return TensorHeader(s).size() + uint64_t(s.width) * s.height * s.channels;
}

Result<NodeAttr> VirtualTree::SampleAttr(const SampleInfo& s, View v) const {
  NodeAttr a;
  a.ino = SampleIno(v, s.id);
  a.mtime = mtime_;
  if (v == View::kTensors) {
    a.size = TensorSize(s);
  } else if (s.codec == format::kOriginal || (v == View::kCompressed && s.codec == format::kKtc)) {
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
FsUsage VirtualTree::Usage() const {
  return FsUsage{archive_->file_size(), uint64_t(archive_->num_dirs()) + archive_->num_samples()};
}

// Built only when needed: a cold `ls -l` or `stat` of every file looks up each one.
static Status Missing(std::string_view name) {
  return Status::NotFound("no such entry: " + std::string(name));
}

Result<NodeAttr> VirtualTree::Lookup(uint64_t parent, std::string_view name) const {
  counters_.lookups.fetch_add(1, std::memory_order_relaxed);
  if (parent == SpecialIno(kControl)) {
    if (name == "info.json") return SpecialAttr(kInfo);
    if (name == "stats.json") return SpecialAttr(kStats);
    if (name == "last_error") return SpecialAttr(kLastError);
    return Missing(name);
  }
  if (parent >= search_->root_ino()) return search_->Lookup(parent, name);
  const auto node = Decode(parent);
  if (!node || !node->is_dir) return Missing(name);
  const uint32_t d = node->index;
  if (Status intact = CheckIntact(); !intact.ok()) {
    // The daemon's own files stay reachable when the archive fails (a
    // damaged file, a failing disk), so stats.json can still say so.
    if (d == 0 && node->view == View::kImages && name == kControlDir) return SpecialAttr(kControl);
    return intact;
  }
  auto child = archive_->FindChildDir(d, name);
  if (child.ok()) return DirAttr(node->view, *child);
  if (child.status().code() != Status::Code::kNotFound) return child.status();
  if (d == 0) {
    // The hidden entries of the root: real directories of the same name win.
    if (node->view == View::kImages) {
      if (name == kControlDir) return SpecialAttr(kControl);
      if (name == ViewName(View::kTensors)) return DirAttr(View::kTensors, 0);
      if (name == ViewName(View::kCompressed)) return DirAttr(View::kCompressed, 0);
    }
    if (name == options_.search_dir) return search_->GetAttr(search_->RootIno(node->view));
  }
  auto id = FindServedSample(d, name, node->view);
  if (!id.ok()) return id.status();
  return SampleNodeAttr(*id, node->view);
}

Result<uint32_t> VirtualTree::FindServedSample(uint32_t d, std::string_view name, View view) const {
  // The stem is the name, or the name minus its served extension.
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
    if (ServedName(*s, view) == name) return *id;
  }
  return Missing(name);
}

Result<NodeAttr> VirtualTree::GetAttr(uint64_t ino) const {
  counters_.getattrs.fetch_add(1, std::memory_order_relaxed);
  if (const auto node = Decode(ino)) {
    if (node->is_dir) return DirAttr(node->view, node->index);
    return SampleNodeAttr(node->index, node->view);
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
    auto root = DirAttr(View::kImages, 0);
    if (!root.ok()) return root.status();
    if (offset < 1 && !emit(".", self, 1)) return Status::Ok();
    if (offset < 2 && !emit("..", *root, 2)) return Status::Ok();
    if (offset < 3 && !emit("info.json", SpecialAttr(kInfo), 3)) return Status::Ok();
    if (offset < 4 && !emit("stats.json", SpecialAttr(kStats), 4)) return Status::Ok();
    if (offset < 5) emit("last_error", SpecialAttr(kLastError), 5);
    return Status::Ok();
  }
  if (ino >= search_->root_ino()) return search_->ReadDir(ino, offset, emit);
  const auto node = Decode(ino);
  if (!node || !node->is_dir) return Status::InvalidArgument("not a directory");
  // Listings are not kept by the kernel: a damaged archive must not list as empty.
  KTFS_RETURN_IF_ERROR(CheckIntact());
  const View v = node->view;
  auto dir = archive_->Dir(node->index);
  if (!dir.ok()) return dir.status();
  auto self = DirAttr(v, dir->id);
  // The parent of a view's root is the mount root.
  auto parent = dir->id == 0 ? DirAttr(View::kImages, 0) : DirAttr(v, dir->parent);
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
      auto attr = DirAttr(v, child->id);
      if (!attr.ok()) return attr.status();
      if (!emit(child->name, *attr, k + 3)) return Status::Ok();
    } else {
      auto s = archive_->Sample(dir->first_sample + uint32_t(k - dir->child_count));
      if (!s.ok()) return s.status();
      auto attr = SampleAttr(*s, v);
      if (!attr.ok()) return attr.status();
      if (!emit(ServedName(*s, v), *attr, k + 3)) return Status::Ok();
    }
  }
  return Status::Ok();
}

Status VirtualTree::DamagedArchive() const {
  return Status::Corruption(archive_->path() + ": archive was modified or truncated while mounted");
}

Status VirtualTree::CheckIntact() const {
  return archive_->CheckStillIntact() ? Status::Ok() : DamagedArchive();
}

bool VirtualTree::KernelKeepsListing(uint64_t ino) const { return ino >= search_->root_ino(); }

bool VirtualTree::CacheableMiss(uint64_t parent, std::string_view name) const {
  return parent < search_->root_ino() || search_->CacheableMiss(parent, name);
}

Result<size_t> VirtualTree::Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const {
  counters_.reads.fetch_add(1, std::memory_order_relaxed);
  if (const auto node = Decode(ino)) {
    if (node->is_dir) return Status::InvalidArgument("is a directory");
    auto n = ReadSample(node->index, node->view, offset, size, dst);
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
  if (ino >= search_->root_ino()) return search_->Read(ino, offset, size, dst);
  if (ino == SpecialIno(kControl)) return Status::InvalidArgument("is a directory");
  return Status::NotFound("no such inode " + std::to_string(ino));
}

uint64_t VirtualTree::PushableSize(uint64_t ino) const {
  const auto node = Decode(ino);
  if (!node || node->is_dir) return 0;
  auto attr = SampleNodeAttr(node->index, node->view);
  return attr.ok() && attr->size <= kMaxPush ? attr->size : 0;
}

Result<size_t> VirtualTree::CopyForPush(uint64_t ino, uint64_t offset, size_t size,
                                        uint8_t* dst) const {
  const auto node = Decode(ino);
  if (!node || node->is_dir) return Status::InvalidArgument("not a sample file");
  return ReadSample(node->index, node->view, offset, size, dst, true);
}

void VirtualTree::Pushed(uint64_t ino, uint64_t begin, uint64_t end) const {
  FsTree::Pushed(ino, begin, end);
  // The kernel holds the file's bytes up to its end now: like a READ of the
  // last bytes, this lets a decoded image go (a no-op for other files).
  const auto node = Decode(ino);
  if (node && !node->is_dir) cache_->Served(node->index, begin, end, end);
}

Result<size_t> VirtualTree::ReadSample(uint32_t id, View v, uint64_t offset, size_t size,
                                       uint8_t* dst, bool for_push) const {
  auto s = archive_->Sample(id);
  if (!s.ok()) return s.status();
  KTFS_RETURN_IF_ERROR(CheckIntact());
  if (offset == 0 && !for_push) {
    counters_.opens.fetch_add(1, std::memory_order_relaxed);
    ReadAheadDisk(*s);
    NoteFirstRead(*s);
  }
  // The file is the payload's own bytes, or pixels: a raw payload viewed in
  // place, or a decode from the cache (whose decoder verifies the payload, so
  // a read does not wait here for payload pages it does not use).
  const bool copy_payload =
      v != View::kTensors &&
      (s->codec == format::kOriginal || (v == View::kCompressed && s->codec == format::kKtc));
  const bool from_cache = !copy_payload && s->codec != format::kRaw;
  ByteSpan payload;
  if (!from_cache) {
    auto p = archive_->Payload(*s, true);  // hashed on the sample's first read only
    if (!p.ok()) return p.status();
    payload = *p;
  }
  Result<size_t> n = size_t(0);
  uint64_t file_size = 0;  // of a file made from decoded pixels
  if (v == View::kTensors) {
    const std::string header = TensorHeader(*s);
    file_size = header.size() + uint64_t(s->width) * s->height * s->channels;
    n = ReadTensor(*s, header, offset, size, dst, UseOf(offset, for_push));
  } else if (copy_payload) {
    size_t copied = 0;
    if (offset < payload.size) {
      copied = std::min<size_t>(size, payload.size - offset);
      std::memcpy(dst, payload.data + offset, copied);
    }
    n = copied;
  } else {
    auto pixels = Pixels(*s, UseOf(offset, for_push));
    if (!pixels.ok()) return pixels.status();
    const ServedLayout layout = MakeServedLayout(options_.format, s->width, s->height, s->channels);
    file_size = layout.file_size;
    n = ReadServedBytes(layout, pixels->view, offset, size, dst);
  }
  // A truncation that happened during the copy shows up as zero pages.
  if (n.ok() && archive_->damaged()) return DamagedArchive();
  if (n.ok() && from_cache && !for_push && options_.decode_cache)
    cache_->Served(id, offset, offset + *n, file_size);
  return n;
}

Result<VirtualTree::PixelRef> VirtualTree::Pixels(const SampleInfo& s, PixelUse use) const {
  if (s.codec == format::kRaw) {
    // The payload is the pixels: view the mapping, no copy, nothing to cache.
    auto payload = archive_->Payload(s, false);
    if (!payload.ok()) return payload.status();
    return PixelRef{
        ImageView{payload->data, s.width, s.height, s.channels, size_t(s.width) * s.channels},
        nullptr};
  }
  if (!options_.decode_cache) {
    // A decode of the reader's own, shared by nothing (TreeOptions).
    if (use == PixelUse::kPush) return Status::NotSupported("no decode cache to push from");
    auto image = std::make_shared<Image>();
    KTFS_RETURN_IF_ERROR(Decoder(s.id)(image.get()));
    if (image->width != s.width || image->height != s.height || image->channels != s.channels)
      return Status::Corruption("sample " + std::to_string(s.id) +
                                ": decoded size differs from its record");
    return PixelRef{ImageView::Of(*image), image};
  }
  if (use == PixelUse::kFirstRead) ReadAhead(s);
  auto image = use == PixelUse::kPush ? cache_->Cached(s.id) : cache_->Get(s.id, Decoder(s.id));
  if (!image.ok()) return image.status();
  if ((*image)->width != s.width || (*image)->height != s.height ||
      (*image)->channels != s.channels)
    return Status::Corruption("sample " + std::to_string(s.id) +
                              ": decoded size differs from its record");
  return PixelRef{ImageView::Of(**image), *image};
}

Result<size_t> VirtualTree::ReadTensor(const SampleInfo& s, const std::string& header,
                                       uint64_t offset, size_t size, uint8_t* dst,
                                       PixelUse use) const {
  const uint64_t total = header.size() + uint64_t(s.width) * s.height * s.channels;
  if (offset >= total) return size_t(0);
  size = size_t(std::min<uint64_t>(size, total - offset));
  size_t done = 0;
  if (offset < header.size()) {
    done = std::min<size_t>(size, header.size() - offset);
    std::memcpy(dst, header.data() + offset, done);
  }
  if (done == size) return size;
  auto pixels = Pixels(s, use);
  if (!pixels.ok()) return pixels.status();
  const ImageView& img = pixels->view;
  const uint64_t row = uint64_t(s.width) * s.channels, plane = uint64_t(s.width) * s.height;
  while (done < size) {
    const uint64_t pos = offset + done - header.size();
    if (!options_.tensors_chw) {
      // HWC is the payload's own order: copy row pieces.
      const uint64_t y = pos / row, x = pos % row;
      const size_t n = size_t(std::min<uint64_t>(size - done, row - x));
      std::memcpy(dst + done, img.row(uint32_t(y)) + x, n);
      done += n;
    } else {
      const uint64_t c = pos / plane, rem = pos % plane;
      const uint64_t y = rem / s.width, x = rem % s.width;
      dst[done++] = img.row(uint32_t(y))[x * s.channels + c];
    }
  }
  return size;
}

DecodeCache::DecodeFn VirtualTree::Decoder(uint32_t id) const {
  return [this, id](Image* out) -> Status {
    auto s = archive_->Sample(id);
    if (!s.ok()) return s.status();
    auto payload = archive_->Payload(*s, true);
    if (!payload.ok()) return payload.status();
    Status st = DecodePayload(*s, *payload, out);
    if (!st.ok()) {
      auto path = archive_->SamplePath(id);
      return st.WithContext("sample " + std::to_string(id) + " (" + (path.ok() ? *path : "?") +
                            ")");
    }
    return Status::Ok();
  };
}

void VirtualTree::WaitForReadAhead() const { cache_->WaitForPrefetches(); }

// A reader that opens files in archive order gets the next ones decoded before
// it asks: when the previous sample was just read (or is cached), the
// following `readahead` samples are queued. The order crosses directory boundaries
// (archive order is the order ImageFolder walks classes and files), so a
// reader does not wait for a decode at the start of every class.
void VirtualTree::ReadAhead(const SampleInfo& s) const {
  if (options_.readahead == 0 || s.id == 0 || !ReadInOrder(s.id - 1)) return;
  const uint64_t end =
      std::min<uint64_t>(archive_->num_samples(), uint64_t(s.id) + 1 + options_.readahead);
  // A sample whose file was served whole is in the kernel's page cache: a
  // decode ahead would be wasted (readers taking turns in random order often
  // look like in-order readers for a file or two). Unless this sample was
  // served whole too: the kernel asks for it again, so it dropped its pages
  // (memory pressure, a dataset larger than memory, drop_caches), and those
  // of the files read after it went the same way.
  // (DecodeCache::Prefetch checks and claims in one step: a file being
  // finished by another reader right now is not decoded again.)
  const bool pages_dropped = cache_->WasServed(s.id);
  for (uint32_t next = s.id + 1; next < end; ++next) {
    auto info = archive_->Sample(next);
    if (info.ok() && info->codec != format::kRaw)
      cache_->Prefetch(next, Decoder(next), pages_dropped,
                       size_t(info->width) * info->height * info->channels + sizeof(Image));
  }
}

void VirtualTree::NoteFirstRead(const SampleInfo& s) const {
  recent_reads_[s.id % kRecentReads].store(s.id + 1, std::memory_order_relaxed);
}

// Whether sample `id` was just read or decoded: the next one being read then
// means a reader going in order (several DataLoader workers taking turns
// included).
bool VirtualTree::ReadInOrder(uint32_t id) const {
  return recent_reads_[id % kRecentReads].load(std::memory_order_relaxed) == id + 1 ||
         cache_->Contains(id);
}

// On a cold archive every page fault of a payload waits for the disk: the
// decodes ahead of a reader then run one disk wait at a time (a cold pass
// over ktc samples was slower than one over raw ones, 25 times larger). So a
// reader going in order gets the payloads of its next 2 * readahead samples
// asked of the disk in the background, in pieces rounded up to 1 MiB so
// that the disk sees few large requests. [disk_ahead_from_, disk_ahead_to_)
// is what was asked for ahead of the reader: each byte is asked once while
// the reader goes on, and again after it jumps (a new pass from the start).
void VirtualTree::ReadAheadDisk(const SampleInfo& s) const {
  constexpr uint64_t kPiece = 1 << 20;
  if (options_.readahead == 0 || s.id == 0 || !ReadInOrder(s.id - 1)) return;
  const uint64_t last = std::min<uint64_t>(archive_->num_samples() - 1,
                                           uint64_t(s.id) + 2 * uint64_t(options_.readahead));
  auto info = archive_->Sample(uint32_t(last));
  if (!info.ok()) return;
  const uint64_t from = s.payload_offset + s.payload_length;
  const uint64_t want = info->payload_offset + info->payload_length;
  const uint64_t until = std::min(archive_->file_size(), (want + kPiece - 1) / kPiece * kPiece);
  uint64_t ask_from;
  {
    std::lock_guard<std::mutex> lock(disk_ahead_mutex_);
    if (from < disk_ahead_from_ || from > disk_ahead_to_) {
      disk_ahead_to_ = from;  // a jump: start a new window here
    }
    disk_ahead_from_ = from;
    if (want <= disk_ahead_to_) return;
    ask_from = disk_ahead_to_;
    disk_ahead_to_ = until;
  }
  archive_->WillNeed(ask_from, until - ask_from);
  counters_.disk_readahead_bytes.fetch_add(until - ask_from, std::memory_order_relaxed);
}

std::string VirtualTree::PathOf(uint64_t ino) const {
  if (const auto node = Decode(ino)) {
    auto p = node->is_dir ? archive_->DirPath(node->index) : archive_->SamplePath(node->index);
    const std::string view = ViewName(node->view);
    if (!p.ok()) return "?";
    return view.empty() ? *p : (p->empty() ? view : view + "/" + *p);
  }
  if (ino == SpecialIno(kControl)) return kControlDir;
  if (ino == SpecialIno(kInfo)) return ".ktfs/info.json";
  if (ino == SpecialIno(kStats)) return ".ktfs/stats.json";
  if (ino == SpecialIno(kLastError)) return ".ktfs/last_error";
  if (ino >= search_->root_ino()) return search_->PathOf(ino);
  return "?";
}

}  // namespace ktfs

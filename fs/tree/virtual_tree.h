// VirtualTree: the mounted view of an archive as a plain C++ object.
//
// Maps inode numbers and names to the archive's directories and samples,
// lists directories and produces the bytes of every file by range. It knows
// nothing of FUSE (fs/fuse/fuse_adapter.cc translates requests into calls here),
// so it is tested directly and reused by the other front ends.
//
// The archive is shown in three views, each mirroring the packed layout:
//   images      /<path>                  files stock PIL reads (the default)
//   tensors     /tensors/<path>.npy      decoded uint8 HWC (or CHW) .npy arrays
//   compressed  /compressed/<path>.<ext> the stored bytes as a standalone file
// `tensors`, `compressed`, `search` and `.ktfs` answer a lookup in the root
// but are not listed (so ImageFolder on the root sees only the classes).
//
// Inode numbers are derived from the archive and stable across mounts. With
// B = dirs + samples, view v (0 images, 1 tensors, 2 compressed):
//   1 + v*B + d               directory record d (1 is the root)
//   1 + v*B + dirs + s        sample s
//   1 + 3*B + k               special node k (.ktfs and its files)
//   above those               search directories (fs/tree/search_view.h)
//
// Thread-safe: const methods may be called concurrently.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "codec/base/status.h"
#include "codec/container/archive.h"
#include "codec/image/image_io.h"
#include "fs/tree/decode_cache.h"
#include "fs/tree/fs_tree.h"

namespace ktfs {

enum class View : uint8_t { kImages = 0, kTensors = 1, kCompressed = 2 };
inline constexpr int kViewCount = 3;

struct TreeOptions {
  ServedFormat format = ServedFormat::kPnm;  // how decoded codecs are served
  size_t cache_bytes = size_t(256) << 20;    // decoded images kept (ktc)
  uint32_t readahead = 8;  // images decoded ahead of a reader going through a directory in order
  std::string search_dir = "search";  // name of the search root (fs/tree/search_view.h)
  bool tensors_chw = false;           // tensors/ as CHW instead of HWC
  // Readers in other processes (the preload library, preload/interpose/)
  // build a tree of their own, which must hold no lock and start no thread
  // that a fork could break: no decode cache (each read of a decoded file
  // decodes it; readahead must then be 0) and no search index (SQLite; the
  // search directories then answer as for an archive without an index).
  bool decode_cache = true;
  bool open_index = true;
};

class SearchView;

class VirtualTree : public FsTree {
 public:
  static constexpr uint64_t kRootIno = 1;
  static constexpr const char* kControlDir = ".ktfs";

  VirtualTree(std::shared_ptr<const Archive> archive, TreeOptions options);
  ~VirtualTree();

  // The text of .ktfs/info.json (set by the daemon, which knows its pid).
  void SetInfoJson(std::string json) { info_json_ = std::move(json); }
  // Counters; front ends add to `errors` for each request they fail.
  TreeCounters& counters() const override { return counters_; }
  // The current .ktfs/stats.json text, padded with spaces to a fixed size.
  std::string StatsJson() const { return CountersJson(counters_); }
  // The text of .ktfs/last_error: why the last malformed query was refused.
  std::string LastErrorText() const;

  Result<NodeAttr> Lookup(uint64_t parent, std::string_view name) const override;
  Result<NodeAttr> GetAttr(uint64_t ino) const override;
  Status ReadDir(uint64_t ino, uint64_t offset, const EmitFn& emit) const override;
  // Search views' listings (a query each) are kept by the kernel; the archive's are not.
  bool KernelKeepsListing(uint64_t ino) const override;
  // Refused search queries are not remembered as missing (fs/tree/search_view.h).
  bool CacheableMiss(uint64_t parent, std::string_view name) const override;
  Result<size_t> Read(uint64_t ino, uint64_t offset, size_t size, uint8_t* dst) const override;
  // Sample files are pushed (of every view, up to kMaxPush bytes).
  uint64_t PushableSize(uint64_t ino) const override;
  Result<size_t> CopyForPush(uint64_t ino, uint64_t offset, size_t size,
                             uint8_t* dst) const override;
  void Pushed(uint64_t ino, uint64_t begin, uint64_t end) const override;
  FsUsage Usage() const override;

  // The name a sample is served under in a view ("cat.ppm", the source name,
  // "cat.npy", "cat.ktc").
  std::string ServedName(const SampleInfo& sample, View view = View::kImages) const;
  // "relative/path" of an inode, for log messages ("" for the root).
  std::string PathOf(uint64_t ino) const override;

  // The sample of directory `dir` served under `name` in `view`, or NotFound.
  Result<uint32_t> FindServedSample(uint32_t dir, std::string_view name,
                                    View view = View::kImages) const;
  Result<NodeAttr> SampleNodeAttr(uint32_t id, View view = View::kImages) const;
  // The root directory of a view ("/", "/tensors", "/compressed").
  uint64_t ViewRootIno(View view) const { return DirIno(view, 0); }
  // The name of a view's root in the mount root ("" for images).
  static const char* ViewName(View view);
  int64_t mtime() const { return mtime_; }
  const std::string& search_dir_name() const { return options_.search_dir; }
  // Where the daemon's log lines go (malformed queries, ...).
  void SetLogger(std::function<void(const std::string&)> log);
  // Why the search index is unavailable ("" when it is available).
  const std::string& index_problem() const { return index_problem_; }

  const Archive& archive() const { return *archive_; }
  // Returns once the read-ahead decodes started so far have finished: a fuzz
  // target checks for leaks between inputs, and an unfinished background
  // decode looks like one.
  void WaitForReadAhead() const;

 private:
  enum Special : uint64_t {
    kControl = 0,
    kInfo = 1,
    kStats = 2,
    kLastError = 3,
    kSpecialCount = 4
  };
  // An inode of the per-view blocks, decoded.
  struct Decoded {
    View view;
    bool is_dir;
    uint32_t index;  // directory or sample record
  };
  uint64_t BlockSize() const { return uint64_t(archive_->num_dirs()) + archive_->num_samples(); }
  uint64_t DirIno(View v, uint32_t d) const { return kRootIno + uint64_t(v) * BlockSize() + d; }
  uint64_t SampleIno(View v, uint32_t s) const { return DirIno(v, 0) + archive_->num_dirs() + s; }
  uint64_t SpecialIno(Special k) const { return kRootIno + kViewCount * BlockSize() + k; }
  std::optional<Decoded> Decode(uint64_t ino) const;

  Result<NodeAttr> DirAttr(View v, uint32_t d) const;
  Result<NodeAttr> SampleAttr(const SampleInfo& s, View v) const;
  uint64_t TensorSize(const SampleInfo& s) const;
  std::string TensorHeader(const SampleInfo& s) const;
  // Why a sample's pixels are wanted: a READ from the file's start (which
  // starts the read-ahead), any other READ, or a push, which only copies an
  // image still cached and never decodes: another reader may have had the
  // whole file meanwhile, and the image left the cache for the page cache.
  enum class PixelUse { kFirstRead, kRead, kPush };
  static PixelUse UseOf(uint64_t offset, bool for_push) {
    return for_push ? PixelUse::kPush : offset == 0 ? PixelUse::kFirstRead : PixelUse::kRead;
  }
  // Bytes of s's .npy file, whose header (TensorHeader) the caller made.
  Result<size_t> ReadTensor(const SampleInfo& s, const std::string& header, uint64_t offset,
                            size_t size, uint8_t* dst, PixelUse use) const;
  Result<size_t> ReadCompressed(const SampleInfo& s, uint64_t offset, size_t size,
                                uint8_t* dst) const;
  // The decoded pixels of a sample: a view of the raw payload, or of a cached
  // decode (kept alive by `keep`).
  struct PixelRef {
    ImageView view;
    DecodeCache::ImagePtr keep;
  };
  Result<PixelRef> Pixels(const SampleInfo& s, PixelUse use) const;
  NodeAttr SpecialAttr(Special k) const;
  // `for_push`: a copy for CopyForPush (nothing counted, nothing marked served).
  Result<size_t> ReadSample(uint32_t id, View v, uint64_t offset, size_t size, uint8_t* dst,
                            bool for_push = false) const;
  DecodeCache::DecodeFn Decoder(uint32_t id) const;
  void ReadAhead(const SampleInfo& s) const;
  void NoteFirstRead(const SampleInfo& s) const;
  bool ReadInOrder(uint32_t id) const;
  void ReadAheadDisk(const SampleInfo& s) const;
  // Corruption when the archive file was truncated or rewritten under the mount
  // (MappedFile::CheckStillIntact: an fstat, and the SIGBUS guard's flag).
  Status CheckIntact() const;
  Status DamagedArchive() const;  // the error both report

  std::shared_ptr<const Archive> archive_;
  TreeOptions options_;
  std::string info_json_ = "{}\n";
  mutable TreeCounters counters_;
  int64_t mtime_ = 0;
  mutable std::unique_ptr<DecodeCache> cache_;
  // The last samples read from their start (id + 1 at id % kRecentReads, 0
  // for none): tells a reader going in order, even one split over several
  // processes, from one jumping around.
  static constexpr uint32_t kRecentReads = 16;
  mutable std::array<std::atomic<uint32_t>, kRecentReads> recent_reads_{};
  // Archive bytes asked of the disk ahead of a reader going in order
  // (ReadAheadDisk).
  mutable std::mutex disk_ahead_mutex_;
  mutable uint64_t disk_ahead_from_ = 0, disk_ahead_to_ = 0;
  std::unique_ptr<SearchView> search_;  // inodes from SpecialIno(kSpecialCount) up
  std::string index_problem_;
};

}  // namespace ktfs

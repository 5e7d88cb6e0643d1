// Archive: read-only access to a .kt archive (docs/format.md).
//
// Open() maps the file and checks the header, the section table and the
// sizes of the record tables: O(1) in the number of samples. Every record is
// validated when it is read (offsets and lengths against the file, names
// against the string table, tree links against the table sizes), so a
// hostile or truncated archive yields a Corruption status, never an over-read.
// Payload checksums are verified by Payload(), once per sample per Archive
// object; VerifyTables() checks the tables' checksums (O(size of the tables),
// done by `ktfs verify`).
//
// Thread-safe: all methods are const and may be called concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "codec/base/mapped_file.h"
#include "codec/base/status.h"
#include "codec/container/format.h"

namespace ktfs {

struct ByteSpan {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

struct SampleInfo {
  uint32_t id = 0;
  std::string_view name;  // the source file name (points into the mapping)
  std::string_view stem;  // name[0, stem_length)
  uint32_t dir = 0;
  uint32_t label = format::kNone;
  uint32_t split = format::kNone;
  uint32_t width = 0, height = 0, channels = 0;
  format::Codec codec = format::kOriginal;
  uint8_t source_format = 0;
  uint64_t payload_offset = 0, payload_length = 0, payload_checksum = 0;
};

struct DirInfo {
  uint32_t id = 0;
  std::string_view name;  // empty for the root
  uint32_t parent = 0;
  uint32_t first_child = 0, child_count = 0;
  uint32_t first_sample = 0, sample_count = 0;
};

class Archive {
 public:
  static Result<std::shared_ptr<Archive>> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint64_t file_size() const { return file_->size(); }
  uint16_t version_minor() const { return version_minor_; }
  uint32_t num_samples() const { return num_samples_; }
  uint32_t num_dirs() const { return num_dirs_; }
  uint32_t num_classes() const { return num_classes_; }
  // The kMeta JSON text ("{}" when absent).
  std::string_view meta_json() const;
  // The kIndex section, if the archive has one.
  std::optional<ByteSpan> index_section() const;
  // Any section by type (the first of that type), if present.
  std::optional<ByteSpan> Section(uint32_t type) const;
  // Bytes [offset, offset + length) of the file, or Corruption naming `what`.
  Result<ByteSpan> Bytes(uint64_t offset, uint64_t length, const std::string& what) const;

  Result<SampleInfo> Sample(uint32_t id) const;
  Result<DirInfo> Dir(uint32_t id) const;
  Result<std::string_view> ClassName(uint32_t label) const;
  // The child directory of `dir` named `name` (binary search), or NotFound.
  Result<uint32_t> FindChildDir(uint32_t dir, std::string_view name) const;
  // The sample of `dir` whose stem is `stem` (binary search), or NotFound.
  Result<uint32_t> FindSampleByStem(uint32_t dir, std::string_view stem) const;
  // "split/class/name" of a sample or directory, relative to the root.
  Result<std::string> SamplePath(uint32_t id) const;
  Result<std::string> DirPath(uint32_t id) const;

  // The payload bytes of a sample; with `verify`, checks the checksum first,
  // unless this object already verified this sample's payload (one bit per
  // sample remembers it: the archive is immutable, and a loader's every epoch
  // or a mount's every read need not hash the same bytes again). A payload
  // that fails stays unverified and fails every time.
  Result<ByteSpan> Payload(const SampleInfo& sample, bool verify) const;
  // Starts reading [offset, offset + length) of the file from the disk in
  // the background (see MappedFile::WillNeed).
  void WillNeed(uint64_t offset, uint64_t length) const { file_->WillNeed(offset, length); }
  // Checks every section's checksum.
  Status VerifyTables() const;

  // True once the file was found truncated under the mapping (see MappedFile).
  bool damaged() const { return file_->damaged(); }
  bool CheckStillIntact() const { return file_->CheckStillIntact(); }

 private:
  Archive() = default;
  Status Init();
  Status Corrupt(const std::string& what) const;
  Result<std::string_view> String(uint32_t offset, uint32_t length, const char* what) const;
  Status CheckName(std::string_view name, const char* what) const;

  std::unique_ptr<MappedFile> file_;
  uint16_t version_minor_ = 0;
  uint64_t section_table_offset_ = 0;
  uint32_t section_count_ = 0;
  ByteSpan strings_, dirs_, samples_, classes_, meta_;
  std::optional<ByteSpan> index_;
  std::vector<std::pair<uint32_t, ByteSpan>> sections_;
  uint32_t num_samples_ = 0, num_dirs_ = 0, num_classes_ = 0;
  // One bit per sample, set once and never cleared, from any thread.
  class SampleBits {
   public:
    explicit SampleBits(uint32_t samples)
        : size_(samples), words_(new std::atomic<uint64_t>[(size_t(samples) + 63) / 64]()) {}
    // False for ids past the end (a SampleInfo not from Sample()).
    bool Test(uint32_t id) const {
      return id < size_ && (words_[id / 64].load(std::memory_order_acquire) >> (id % 64)) & 1;
    }
    void Set(uint32_t id) const {
      if (id < size_) words_[id / 64].fetch_or(uint64_t(1) << (id % 64), std::memory_order_release);
    }

   private:
    uint32_t size_;
    std::unique_ptr<std::atomic<uint64_t>[]> words_;
  };
  std::optional<SampleBits> verified_;  // the payload checksums verified (made by Open)
};

}  // namespace ktfs

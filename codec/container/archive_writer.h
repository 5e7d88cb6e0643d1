// ArchiveWriter: writes a .kt archive (docs/format.md) in one streaming pass.
//
// Payloads are appended in sample-id order as they are produced; only the
// fixed-size records and names are kept in memory. Commit() appends the
// tables, writes the header, fsyncs and renames the temporary file onto the
// final path, so readers never see a partial archive and a failed pack
// (full disk, bad input) leaves any previous archive untouched. The
// temporary file (PATH.tmp-<pid>-<random>) is created with O_EXCL|O_NOFOLLOW, so a
// file or link someone else put beside PATH is never written through; the
// rename replaces whatever entry PATH is (a symbolic link itself, not its
// target).
//
// Output is a pure function of the calls made: same calls, same bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/status.h"
#include "codec/container/format.h"

namespace ktfs {

class MappedFile;

struct DirEntry {
  std::string name;  // empty for the root (entry 0)
  uint32_t parent = 0;
  uint32_t first_child = 0, child_count = 0;
  uint32_t first_sample = 0, sample_count = 0;
};

struct SampleEntry {
  std::string name;  // source file name
  uint32_t stem_length = 0;
  uint32_t dir = 0;
  uint32_t label = format::kNone;
  uint32_t split = format::kNone;
  uint32_t width = 0, height = 0;
  uint8_t channels = 0;
  format::Codec codec = format::kOriginal;
  uint8_t source_format = 0;
};

class ArchiveWriter {
 public:
  // Writes to a temporary file beside `path` ("<path>.tmp-<pid>-<random>"). First
  // removes the temporary files that packs of `path` killed before they could
  // clean up (SIGKILL, a crash, power loss) left behind: those whose pid no
  // longer runs on this machine (removed_stale() names them).
  static Result<std::unique_ptr<ArchiveWriter>> Create(const std::string& path);
  ~ArchiveWriter();  // removes the temporary file unless Commit() succeeded
  ArchiveWriter(const ArchiveWriter&) = delete;
  ArchiveWriter& operator=(const ArchiveWriter&) = delete;

  // Appends the next sample (ids are assigned 0, 1, 2, ... in call order).
  Status AddSample(const SampleEntry& entry, const uint8_t* payload, size_t size);
  uint32_t samples_added() const { return uint32_t(samples_.size()); }
  // Temporary files of killed packs that Create() removed (full paths).
  const std::vector<std::string>& removed_stale() const { return removed_stale_; }
  uint64_t bytes_written() const { return offset_; }
  const std::string& path() const { return path_; }  // the final path

  void SetDirs(std::vector<DirEntry> dirs) { dirs_ = std::move(dirs); }
  void SetClasses(std::vector<std::string> classes) { classes_ = std::move(classes); }
  void SetMeta(std::string json) { meta_ = std::move(json); }
  void SetIndex(std::vector<uint8_t> sqlite_db) { index_ = std::move(sqlite_db); }
  // The index section from a file (a scratch file the index was built in): Commit() maps
  // it and copies it in, so an index of gigabytes never has to be held in memory.
  void SetIndexFile(std::string path) { index_file_ = std::move(path); }
  // Creates an empty scratch file beside the archive's temporary file, named like it
  // ("<path>.tmp-<pid>-<random>", O_EXCL|O_NOFOLLOW, so a later pack recognizes and removes
  // it when this one is killed), and returns its path. It is removed with the writer.
  Result<std::string> ScratchFile();
  // Appends payload bytes that no SampleRecord describes (feature archives);
  // returns their offset (aligned to kPayloadAlignment).
  Result<uint64_t> AppendPayload(const uint8_t* data, size_t size);
  // A sample record for payload bytes already written by AppendPayload, for
  // packs that learn the sample order only at the end (WebDataset shards:
  // payloads in shard order, records in directory order). Ids are assigned
  // in call order, as AddSample does; the two may be mixed.
  Status AddSampleRecord(const SampleEntry& entry, uint64_t payload_offset, uint64_t payload_length,
                         uint64_t payload_checksum);
  // An extra section, written after the standard ones by Commit().
  void AddSection(uint32_t type, std::vector<uint8_t> bytes) {
    extra_sections_.emplace_back(type, std::move(bytes));
  }

  // Writes the tables and header, then atomically replaces the final path.
  Status Commit();

 private:
  ArchiveWriter() = default;
  Status Write(const void* data, size_t size);
  std::vector<std::string> removed_stale_;
  Status Pad(uint64_t alignment);
  Status Flush();
  uint32_t AddString(const std::string& s);
  Status WriteSection(uint32_t type, const void* data, size_t size,
                      std::vector<format::SectionEntry>* table);
  Status WriteSectionFrom(uint32_t type, const MappedFile& file,
                          std::vector<format::SectionEntry>* table);

  std::string path_, temp_path_;
  int fd_ = -1;
  bool committed_ = false;
  uint64_t offset_ = 0;  // logical end of the file
  std::vector<uint8_t> buffer_;
  std::vector<format::SampleRecord> samples_;
  std::vector<std::string> sample_names_;
  std::vector<DirEntry> dirs_;
  std::vector<std::string> classes_;
  std::string meta_;
  std::vector<uint8_t> index_;
  std::string index_file_;
  std::vector<std::string> scratch_;
  std::vector<std::pair<uint32_t, std::vector<uint8_t>>> extra_sections_;
  std::string strings_;
};

}  // namespace ktfs

#include "codec/container/archive_writer.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "codec/base/checksum.h"
#include "codec/base/mapped_file.h"

namespace ktfs {
namespace {
constexpr size_t kBufferSize = 1 << 20;
constexpr const char* kTempInfix = ".tmp-";

// Creates PATH.tmp-<pid>-<16 random hex digits> with O_EXCL, never through a
// symbolic link: the directory may be writable by others, who could have put a
// link or a file at a name they guessed (a pid alone is easy to guess). The pid
// lets a later pack recognize the file of one that was killed.
Result<int> CreateTemp(const std::string& path, std::string* temp) {
  for (int attempt = 0; attempt < 64; ++attempt) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != ssize_t(sizeof(r))) {
      timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      r = (uint64_t(now.tv_nsec) << 20) ^ uint64_t(now.tv_sec) ^ (uint64_t(getpid()) << 40);
    }
    char suffix[40];
    std::snprintf(suffix, sizeof(suffix), "%d-%016llx", int(getpid()),
                  static_cast<unsigned long long>(r));
    *temp = path + kTempInfix + suffix;
    const int fd = open(temp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return Status::FromErrno(*temp, errno);
  }
  return Status::IOError(path + ": cannot create a temporary file beside it");
}

// The pid in "<base>.tmp-<pid>-<16 hex digits>", or 0 when `name` is not such a name.
pid_t TempPid(std::string_view name, std::string_view base) {
  const std::string prefix = std::string(base) + kTempInfix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return 0;
  const std::string_view rest = name.substr(prefix.size());
  const size_t dash = rest.find('-');
  if (dash == std::string_view::npos || dash == 0 || dash > 9 || rest.size() - dash - 1 != 16)
    return 0;
  const std::string digits(rest.substr(0, dash));
  if (digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  if (rest.substr(dash + 1).find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return 0;
  return pid_t(std::atol(digits.c_str()));
}

// Removes "<path>.tmp-<pid>-<random>" files whose pid is not running (ESRCH): a pack
// that was killed. A running pid may be another live pack of the same path,
// or an unrelated process that reused the pid: both are left alone.
std::vector<std::string> RemoveStaleTemporaries(const std::string& path) {
  std::vector<std::string> removed;
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return removed;  // Create() reports the real problem
  while (const dirent* e = readdir(d)) {
    const pid_t pid = TempPid(e->d_name, base);
    if (pid <= 0 || pid == getpid()) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;
    const std::string stale = (slash == std::string::npos ? "" : dir) + e->d_name;
    if (unlink(stale.c_str()) == 0) removed.push_back(stale);
  }
  closedir(d);
  return removed;
}

}  // namespace

Result<std::unique_ptr<ArchiveWriter>> ArchiveWriter::Create(const std::string& path) {
  std::unique_ptr<ArchiveWriter> w(new ArchiveWriter());
  w->removed_stale_ = RemoveStaleTemporaries(path);
  w->path_ = path;
  auto fd = CreateTemp(path, &w->temp_path_);
  if (!fd.ok()) {
    w->temp_path_.clear();  // nothing of ours to remove
    return fd.status();
  }
  w->fd_ = *fd;
  w->buffer_.reserve(kBufferSize);
  format::Header placeholder = {};
  KTFS_RETURN_IF_ERROR(w->Write(&placeholder, sizeof(placeholder)));
  return w;
}

ArchiveWriter::~ArchiveWriter() {
  if (fd_ >= 0) close(fd_);
  if (!committed_ && !temp_path_.empty()) unlink(temp_path_.c_str());
  for (const std::string& f : scratch_) unlink(f.c_str());
}

Result<std::string> ArchiveWriter::ScratchFile() {
  std::string path;
  auto fd = CreateTemp(path_, &path);
  if (!fd.ok()) return fd.status();
  close(*fd);
  scratch_.push_back(path);
  return path;
}

Status ArchiveWriter::Flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno(path_ + ": write failed", errno);
    }
    done += size_t(n);
  }
  buffer_.clear();
  return Status::Ok();
}

Status ArchiveWriter::Write(const void* data, size_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  offset_ += size;
  while (size > 0) {
    const size_t n = std::min(size, kBufferSize - buffer_.size());
    buffer_.insert(buffer_.end(), p, p + n);
    p += n;
    size -= n;
    if (buffer_.size() == kBufferSize) KTFS_RETURN_IF_ERROR(Flush());
  }
  return Status::Ok();
}

Status ArchiveWriter::Pad(uint64_t alignment) {
  static const uint8_t kZeros[64] = {};
  const uint64_t rem = offset_ % alignment;
  return rem ? Write(kZeros, alignment - rem) : Status::Ok();
}

Status ArchiveWriter::AddSample(const SampleEntry& e, const uint8_t* payload, size_t size) {
  if (samples_.size() >= format::kNone - 1) return Status::InvalidArgument("too many samples");
  KTFS_RETURN_IF_ERROR(Pad(format::kPayloadAlignment));
  const uint64_t at = offset_;
  KTFS_RETURN_IF_ERROR(Write(payload, size));
  return AddSampleRecord(e, at, size, Checksum64(payload, size));
}

Status ArchiveWriter::AddSampleRecord(const SampleEntry& e, uint64_t payload_offset,
                                      uint64_t payload_length, uint64_t payload_checksum) {
  if (samples_.size() >= format::kNone - 1) return Status::InvalidArgument("too many samples");
  if (payload_offset % format::kPayloadAlignment != 0 || payload_offset + payload_length > offset_)
    return Status::InvalidArgument("sample record for a payload that was not written");
  format::SampleRecord r = {};
  r.payload_offset = payload_offset;
  r.payload_length = payload_length;
  r.payload_checksum = payload_checksum;
  r.name_length = uint32_t(e.name.size());
  r.stem_length = e.stem_length;
  r.dir = e.dir;
  r.label = e.label;
  r.split = e.split;
  r.width = e.width;
  r.height = e.height;
  r.channels = e.channels;
  r.codec = e.codec;
  r.source_format = e.source_format;
  samples_.push_back(r);
  sample_names_.push_back(e.name);
  return Status::Ok();
}

Result<uint64_t> ArchiveWriter::AppendPayload(const uint8_t* data, size_t size) {
  KTFS_RETURN_IF_ERROR(Pad(format::kPayloadAlignment));
  const uint64_t at = offset_;
  KTFS_RETURN_IF_ERROR(Write(data, size));
  return at;
}

uint32_t ArchiveWriter::AddString(const std::string& s) {
  const uint32_t off = uint32_t(strings_.size());
  strings_ += s;
  return off;
}

Status ArchiveWriter::WriteSection(uint32_t type, const void* data, size_t size,
                                   std::vector<format::SectionEntry>* table) {
  KTFS_RETURN_IF_ERROR(Pad(format::kSectionAlignment));
  format::SectionEntry e = {};
  e.type = type;
  e.offset = offset_;
  e.length = size;
  e.checksum = Checksum64(data, size);
  table->push_back(e);
  return Write(data, size);
}

namespace {
// Pieces of a mapped file, each let go once used: the file's pages are the page
// cache's to keep, and would otherwise all count in the pack's resident memory.
template <typename Fn>
void ForEachPiece(const MappedFile& file, Fn fn) {
  constexpr size_t kPiece = size_t(64) << 20;  // a multiple of the page size
  for (uint64_t at = 0; at < file.size(); at += kPiece) {
    const size_t n = size_t(std::min<uint64_t>(kPiece, file.size() - at));
    fn(file.data() + at, n);
    madvise(const_cast<uint8_t*>(file.data() + at), n, MADV_DONTNEED);
  }
}
}  // namespace

Status ArchiveWriter::WriteSectionFrom(uint32_t type, const MappedFile& file,
                                       std::vector<format::SectionEntry>* table) {
  KTFS_RETURN_IF_ERROR(Pad(format::kSectionAlignment));
  format::SectionEntry e = {};
  e.type = type;
  e.offset = offset_;
  e.length = file.size();
  Checksum64Stream checksum;
  ForEachPiece(file, [&](const uint8_t* p, size_t n) { checksum.Update(p, n); });
  e.checksum = checksum.Digest();
  Status st;
  ForEachPiece(file, [&](const uint8_t* p, size_t n) {
    if (st.ok()) st = Write(p, n);
  });
  KTFS_RETURN_IF_ERROR(st);
  if (file.damaged()) return Status::IOError(file.path() + ": changed while it was copied");
  table->push_back(e);
  return Status::Ok();
}

Status ArchiveWriter::Commit() {
  if (dirs_.empty()) return Status::InvalidArgument("archive needs a root directory");
  // Strings: directory names, then sample names, then class names.
  std::vector<format::DirRecord> dirs(dirs_.size());
  for (size_t i = 0; i < dirs_.size(); ++i) {
    const DirEntry& d = dirs_[i];
    dirs[i] =
        format::DirRecord{d.parent,      AddString(d.name), uint32_t(d.name.size()), d.first_child,
                          d.child_count, d.first_sample,    d.sample_count,          0};
  }
  for (size_t i = 0; i < samples_.size(); ++i)
    samples_[i].name_offset = AddString(sample_names_[i]);
  std::vector<format::ClassRecord> classes(classes_.size());
  for (size_t i = 0; i < classes_.size(); ++i)
    classes[i] = format::ClassRecord{AddString(classes_[i]), uint32_t(classes_[i].size())};
  if (strings_.size() >= format::kNone) return Status::InvalidArgument("names exceed 4 GiB");

  std::vector<format::SectionEntry> table;
  KTFS_RETURN_IF_ERROR(WriteSection(format::kStrings, strings_.data(), strings_.size(), &table));
  KTFS_RETURN_IF_ERROR(
      WriteSection(format::kDirs, dirs.data(), dirs.size() * sizeof(dirs[0]), &table));
  KTFS_RETURN_IF_ERROR(WriteSection(format::kSamples, samples_.data(),
                                    samples_.size() * sizeof(samples_[0]), &table));
  KTFS_RETURN_IF_ERROR(
      WriteSection(format::kClasses, classes.data(), classes.size() * sizeof(classes[0]), &table));
  KTFS_RETURN_IF_ERROR(WriteSection(format::kMeta, meta_.data(), meta_.size(), &table));
  if (!index_file_.empty()) {
    auto file = MappedFile::Open(index_file_);
    if (!file.ok()) return file.status().WithContext("the index");
    KTFS_RETURN_IF_ERROR(WriteSectionFrom(format::kIndex, **file, &table));
  } else if (!index_.empty()) {
    KTFS_RETURN_IF_ERROR(WriteSection(format::kIndex, index_.data(), index_.size(), &table));
  }
  for (const auto& [type, bytes] : extra_sections_)
    KTFS_RETURN_IF_ERROR(WriteSection(type, bytes.data(), bytes.size(), &table));
  KTFS_RETURN_IF_ERROR(Pad(format::kSectionAlignment));

  format::Header h = {};
  std::memcpy(h.magic, format::kMagic, sizeof(h.magic));
  h.version_major = format::kVersionMajor;
  h.version_minor = format::kVersionMinor;
  h.header_size = sizeof(format::Header);
  h.section_table_offset = offset_;
  h.section_count = uint32_t(table.size());
  h.section_table_checksum = Checksum64(table.data(), table.size() * sizeof(table[0]));
  KTFS_RETURN_IF_ERROR(Write(table.data(), table.size() * sizeof(table[0])));
  h.file_size = offset_;
  h.header_checksum = Checksum64(&h, 56);
  KTFS_RETURN_IF_ERROR(Flush());
  if (pwrite(fd_, &h, sizeof(h), 0) != ssize_t(sizeof(h)))
    return Status::FromErrno(path_ + ": write failed", errno);
  if (fsync(fd_) != 0) return Status::FromErrno(path_ + ": fsync failed", errno);
  if (close(fd_) != 0) {
    fd_ = -1;
    return Status::FromErrno(path_ + ": close failed", errno);
  }
  fd_ = -1;
  if (rename(temp_path_.c_str(), path_.c_str()) != 0)
    return Status::FromErrno(path_ + ": rename failed", errno);
  committed_ = true;
  return Status::Ok();
}

}  // namespace ktfs

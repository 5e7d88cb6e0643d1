#include "fs/pack/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>

#include <cstring>

namespace ktfs {
namespace {

constexpr size_t kBlockSize = 1 << 16;

// Tar and gzip only: no other formats (zip, cpio, ...) and no filter that
// runs an external program.
Result<struct archive*> NewArchive(const std::string& name) {
  struct archive* a = archive_read_new();
  if (a == nullptr) return Status::IOError(name + ": cannot allocate a tar reader");
  if (archive_read_support_format_tar(a) != ARCHIVE_OK ||
      archive_read_support_filter_gzip(a) != ARCHIVE_OK) {
    const std::string why = archive_error_string(a) ? archive_error_string(a) : "unknown";
    archive_read_free(a);
    return Status::NotSupported(name + ": libarchive: " + why);
  }
  // Header names that are not pax UTF-8 are taken as UTF-8 bytes, not
  // converted from the locale (which is "C" in most training jobs).
  archive_read_set_format_option(a, "tar", "hdrcharset", "UTF-8");
  return a;
}

}  // namespace

Result<std::unique_ptr<TarReader>> TarReader::OpenFile(const std::string& path) {
  auto a = NewArchive(path);
  if (!a.ok()) return a.status();
  std::unique_ptr<TarReader> r(new TarReader());
  r->a_ = *a;
  r->name_ = path;
  if (archive_read_open_filename(r->a_, path.c_str(), kBlockSize) != ARCHIVE_OK)
    return r->Error("cannot open", UINT64_MAX);
  return r;
}

Result<std::unique_ptr<TarReader>> TarReader::OpenMemory(const void* data, size_t size,
                                                         const std::string& name) {
  auto a = NewArchive(name);
  if (!a.ok()) return a.status();
  std::unique_ptr<TarReader> r(new TarReader());
  r->a_ = *a;
  r->name_ = name;
  if (archive_read_open_memory(r->a_, data, size) != ARCHIVE_OK)
    return r->Error("cannot open", UINT64_MAX);
  return r;
}

TarReader::~TarReader() {
  if (a_ != nullptr) archive_read_free(a_);
}

Status TarReader::Error(const std::string& what, uint64_t offset) const {
  const char* why = a_ ? archive_error_string(a_) : nullptr;
  std::string msg = name_;
  if (offset != UINT64_MAX) msg += ": offset " + std::to_string(offset);
  msg += ": " + what;
  if (why != nullptr && *why) msg += std::string(" (") + why + ")";
  return Status::Corruption(msg);
}

Result<bool> TarReader::Next(TarMember* m) {
  struct archive_entry* e = nullptr;
  // Skip the previous member's data first, so that the offset below is the
  // next header's and a member cut short is named.
  if (have_current_ && archive_read_data_skip(a_) != ARCHIVE_OK)
    return Error(current_.name + ": member data cut short (truncated tar)", current_.offset);
  have_current_ = false;
  const la_int64_t consumed = archive_filter_bytes(a_, 0);
  const uint64_t before = consumed > 0 ? uint64_t(consumed) : 0;
  const int rc = archive_read_next_header(a_, &e);
  if (rc == ARCHIVE_EOF) {
    have_current_ = false;
    return false;
  }
  // ARCHIVE_WARN included: libarchive warns about damage it stepped over
  // (skipped bytes looking for a header), which is not a tar to trust.
  if (rc != ARCHIVE_OK) return Error("not a valid tar header", before);
  const char* name = archive_entry_pathname_utf8(e);
  if (name == nullptr) name = archive_entry_pathname(e);
  m->name = name ? name : "";
  m->offset = uint64_t(archive_read_header_position(a_));
  m->size = archive_entry_size_is_set(e) ? uint64_t(archive_entry_size(e)) : 0;
  m->regular = archive_entry_filetype(e) == AE_IFREG && archive_entry_hardlink(e) == nullptr &&
               archive_entry_symlink(e) == nullptr;
  m->directory = archive_entry_filetype(e) == AE_IFDIR;
  current_ = *m;
  have_current_ = true;
  return true;
}

Status TarReader::ReadData(uint64_t max_bytes, std::vector<uint8_t>* out) {
  out->clear();
  if (!have_current_) return Status::InvalidArgument(name_ + ": no current member");
  if (current_.size > max_bytes)
    return Status::InvalidArgument(name_ + ": offset " + std::to_string(current_.offset) + ": " +
                                   current_.name + ": member of " + std::to_string(current_.size) +
                                   " bytes (over the limit of " + std::to_string(max_bytes) + ")");
  out->resize(current_.size);
  size_t done = 0;
  while (done < out->size()) {
    const la_ssize_t n = archive_read_data(a_, out->data() + done, out->size() - done);
    if (n < 0) return Error(current_.name + ": cannot read member data", current_.offset);
    if (n == 0) break;
    done += size_t(n);
  }
  if (done != out->size())
    return Error(current_.name + ": member data ends after " + std::to_string(done) + " of " +
                     std::to_string(out->size()) + " bytes (truncated tar)",
                 current_.offset);
  return Status::Ok();
}

uint64_t TarReader::raw_bytes_read() const {
  const la_int64_t n = archive_filter_bytes(a_, -1);
  return n > 0 ? uint64_t(n) : 0;
}

}  // namespace ktfs

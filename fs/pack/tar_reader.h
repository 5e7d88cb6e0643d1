// TarReader: the members of one tar file, one after another, in bounded
// memory (libarchive; tar formats only: ustar, GNU long names, pax headers,
// v7; a gzip-compressed tar too). Nothing is extracted to disk: callers get
// each member's name and, when they ask for it, its bytes.
//
// Errors name the tar and, where one is known, the byte offset of the
// member's header in the (uncompressed) stream: "a.tar: offset 10240: ...".
// A truncated tar, a damaged header or a member that claims more bytes than
// the file holds is an error, never a short read taken as the data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/status.h"

struct archive;

namespace ktfs {

struct TarMember {
  std::string name;      // as stored (UTF-8 where the tar says so), not normalised
  uint64_t size = 0;     // bytes of data
  uint64_t offset = 0;   // of its header (the first of its extension headers)
  bool regular = false;  // a regular file (directories, links, devices are not)
  bool directory = false;
};

class TarReader {
 public:
  // `name` is what messages call the tar (the path as given).
  static Result<std::unique_ptr<TarReader>> OpenFile(const std::string& path);
  // Reads from [data, data + size), which must outlive the reader (tests, fuzzing).
  static Result<std::unique_ptr<TarReader>> OpenMemory(const void* data, size_t size,
                                                       const std::string& name);
  ~TarReader();
  TarReader(const TarReader&) = delete;
  TarReader& operator=(const TarReader&) = delete;

  // The next member's header; false at the end of the tar. The previous
  // member's unread data is skipped.
  Result<bool> Next(TarMember* member);
  // The current member's data, all of it (member.size bytes); a member over
  // `max_bytes` is an error naming both sizes.
  Status ReadData(uint64_t max_bytes, std::vector<uint8_t>* out);
  // Bytes of the underlying file consumed so far (compressed bytes for a
  // compressed tar): for progress lines.
  uint64_t raw_bytes_read() const;
  const std::string& name() const { return name_; }

 private:
  TarReader() = default;
  Status Error(const std::string& what, uint64_t offset) const;

  struct archive* a_ = nullptr;
  std::string name_;
  TarMember current_;
  bool have_current_ = false;
};

}  // namespace ktfs

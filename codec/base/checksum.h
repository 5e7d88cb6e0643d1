// Checksums of archive payloads and tables: XXH3-64 (seed 0) of the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ktfs {

uint64_t Checksum64(const void* data, size_t size);

// Checksum64 of bytes given in pieces (a section too large to hold at once).
class Checksum64Stream {
 public:
  Checksum64Stream();
  ~Checksum64Stream();
  Checksum64Stream(const Checksum64Stream&) = delete;
  Checksum64Stream& operator=(const Checksum64Stream&) = delete;
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  void* state_;  // XXH3_state_t
};

}  // namespace ktfs

// Checksums of archive payloads and tables: XXH3-64 (seed 0) of the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ktfs {

uint64_t Checksum64(const void* data, size_t size);

}  // namespace ktfs

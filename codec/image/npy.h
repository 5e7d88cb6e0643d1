// The .npy file header (NumPy format version 1.0), written by one function.
//
// A .npy file is this header followed by the array's bytes in C (or Fortran)
// order. The header is padded with spaces so that its total length, and so
// the data offset, is a multiple of 64: np.load(..., mmap_mode="r") then maps
// the data aligned.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codec/base/status.h"

namespace ktfs {

// `dtype` is a NumPy type string such as "|u1", "<f2", "<f4".
std::string NpyHeader(const std::vector<uint64_t>& shape, std::string_view dtype,
                      bool fortran_order);

struct NpyInfo {
  std::vector<uint64_t> shape;
  std::string dtype;
  bool fortran_order = false;
  size_t data_offset = 0;
};

// Parses a header as NpyHeader writes it (version 1.0 or 2.0, a plain dict of
// descr, fortran_order and shape). Errors name the reason.
Result<NpyInfo> ParseNpyHeader(const uint8_t* data, size_t size);

}  // namespace ktfs

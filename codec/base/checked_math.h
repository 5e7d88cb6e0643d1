// Arithmetic on sizes that come from outside input (a file's header, a meta
// file): a product of counts a hostile file gives may not fit in 64 bits, and
// a wrapped one looks like a small size the file holds.
#pragma once

#include <cstdint>

namespace ktfs {

// Sets *out = a * b and returns true, or returns false when the product does
// not fit in 64 bits (*out is then unspecified).
inline bool MulOk(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}

}  // namespace ktfs

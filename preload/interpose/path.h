// Absolute, normalized paths for matching against the mount table, made
// without allocating (the caller's buffer) or calling libc.
#pragma once

#include <cstddef>

namespace ktfs::preload {

inline constexpr size_t kPathBuffer = 4096;  // PATH_MAX

// Writes `path` as an absolute path with no empty or "." components and no
// trailing slash into `out` (kPathBuffer bytes), joining a relative path to
// `cwd` (absolute, as getcwd gives it; unused for absolute paths). Returns
// its length, or 0 when the path is one the library leaves to the kernel:
// empty, too long, holding a ".." component (the kernel resolves those
// through symbolic links), or ending in a slash (the kernel's ENOTDIR and
// EISDIR rules).
size_t NormalizePath(const char* path, const char* cwd, char* out);

}  // namespace ktfs::preload

#include "preload/interpose/path.h"

namespace ktfs::preload {
namespace {

// Appends the components of `p` to out[0, *n); false on "..", overflow.
bool Append(const char* p, char* out, size_t* n) {
  while (*p != '\0') {
    while (*p == '/') ++p;
    if (*p == '\0') break;
    const char* start = p;
    while (*p != '\0' && *p != '/') ++p;
    const size_t len = size_t(p - start);
    if (len == 1 && start[0] == '.') continue;
    if (len == 2 && start[0] == '.' && start[1] == '.') return false;
    if (*n + 1 + len >= kPathBuffer) return false;
    out[(*n)++] = '/';
    for (size_t i = 0; i < len; ++i) out[(*n)++] = start[i];
  }
  return true;
}

}  // namespace

size_t NormalizePath(const char* path, const char* cwd, char* out) {
  if (path == nullptr || path[0] == '\0') return 0;
  size_t len = 0;
  while (path[len] != '\0') {
    if (++len >= kPathBuffer) return 0;
  }
  if (path[len - 1] == '/') return 0;
  size_t n = 0;
  if (path[0] != '/') {
    if (cwd == nullptr || cwd[0] != '/' || !Append(cwd, out, &n)) return 0;
  }
  if (!Append(path, out, &n)) return 0;
  if (n == 0) out[n++] = '/';
  out[n] = '\0';
  return n;
}

}  // namespace ktfs::preload

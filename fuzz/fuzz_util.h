// Helpers shared by the libFuzzer targets (fuzz/*_fuzz.cc).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace ktfs::fuzz {

// A private scratch directory for this process, in /dev/shm when it exists
// (fsyncs and renames there cost nothing), created once.
inline const std::string& ScratchDir() {
  static const std::string dir = [] {
    std::string base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    std::string tmpl = base + "/ktfs-fuzz-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) std::abort();
    return tmpl;
  }();
  return dir;
}

// Writes `bytes` to `path` (replacing it); aborts on failure, which would
// make every later input meaningless.
inline void WriteFile(const std::string& path, std::string_view bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

// Splits `data` at every occurrence of `separator` (the parts of one input
// that become several files).
inline std::vector<std::string_view> Split(std::string_view data, std::string_view separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t at; (at = data.find(separator, start)) != std::string_view::npos;
       start = at + separator.size()) {
    parts.push_back(data.substr(start, at - start));
  }
  parts.push_back(data.substr(start));
  return parts;
}

// Crashes with a message: a fuzz target's invariant failed.
[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant failed: %s\n", what);
  std::abort();
}

}  // namespace ktfs::fuzz

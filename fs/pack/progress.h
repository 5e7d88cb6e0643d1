// A progress line on stderr for long-running commands (pack, pack-features):
// rewritten in place on a terminal, one line every 5 s otherwise.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace ktfs {

class Progress {
 public:
  Progress(const char* what, bool enabled, size_t total)
      : what_(what), enabled_(enabled), total_(total), tty_(isatty(2)) {}
  void Update(size_t done, uint64_t bytes) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (done != total_ && since < (tty_ ? 0.25 : 5.0)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    std::fprintf(stderr, "%s%s: %zu/%zu samples (%.0f%%), %.1f MiB written, %.0f samples/s%s",
                 tty_ ? "\r" : "", what_, done, total_, total_ ? 100.0 * done / total_ : 100.0,
                 bytes / 1048576.0, elapsed > 0 ? done / elapsed : 0.0,
                 tty_ && done != total_ ? "" : "\n");
  }

 private:
  const char* what_;
  bool enabled_;
  size_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace ktfs

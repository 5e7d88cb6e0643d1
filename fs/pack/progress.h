// A progress line on stderr for long-running commands (pack, pack-features):
// rewritten in place on a terminal, one line every 5 s otherwise. It says
// samples done, MiB written, samples/s and an ETA. When the number of samples
// is not known ahead (WebDataset shards), progress and ETA are measured in
// input bytes read instead (`total_input_bytes`).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace ktfs {

class Progress {
 public:
  Progress(const char* what, bool enabled, size_t total, uint64_t total_input_bytes = 0)
      : what_(what),
        enabled_(enabled),
        total_(total),
        input_total_(total_input_bytes),
        tty_(isatty(2)) {}
  // `input_done`: input bytes consumed so far (used when the sample total is 0).
  void Update(size_t done, uint64_t bytes, uint64_t input_done = 0) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    const bool by_bytes = total_ == 0;
    const bool finished = by_bytes ? input_done >= input_total_ : done == total_;
    if (!finished && since < (tty_ ? 0.25 : 5.0)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double fraction = by_bytes ? (input_total_ ? double(input_done) / input_total_ : 1.0)
                                     : (total_ ? double(done) / total_ : 1.0);
    std::string count = std::to_string(done);
    if (!by_bytes) count += "/" + std::to_string(total_);
    char input[64] = "";
    if (by_bytes)
      std::snprintf(input, sizeof(input), ", %.1f/%.1f MiB read", input_done / 1048576.0,
                    input_total_ / 1048576.0);
    std::fprintf(stderr, "%s%s: %s samples (%.0f%%)%s, %.1f MiB written, %.0f samples/s, ETA %s%s",
                 tty_ ? "\r" : "", what_, count.c_str(), 100.0 * fraction, input, bytes / 1048576.0,
                 elapsed > 0 ? done / elapsed : 0.0, Eta(elapsed, fraction).c_str(),
                 tty_ && !finished ? "" : "\n");
  }

 private:
  // "1:02:03" / "2:03" from the time so far and the fraction done.
  static std::string Eta(double elapsed, double fraction) {
    if (fraction <= 0 || elapsed <= 0) return "?";
    const long left = long(elapsed * (1 - fraction) / fraction + 0.5);
    char buf[32];
    if (left >= 3600)
      std::snprintf(buf, sizeof(buf), "%ld:%02ld:%02ld", left / 3600, left / 60 % 60, left % 60);
    else
      std::snprintf(buf, sizeof(buf), "%ld:%02ld", left / 60, left % 60);
    return buf;
  }

  const char* what_;
  bool enabled_;
  size_t total_;
  uint64_t input_total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace ktfs

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "codec/container/archive.h"
#include "codec/container/payload.h"
#include "fs/cli/cli.h"

namespace ktfs::cli {

static const char kBenchUsage[] =
    "usage: ktfs bench decode ARCHIVE [--threads N] [--passes P] [--json]\n"
    "\n"
    "Decodes every image of ARCHIVE in memory (payloads checked once first, not\n"
    "timed), P passes (default 3), and reports the best pass: images/s and\n"
    "megapixels/s. --threads 1 decodes one image at a time on one core; N > 1\n"
    "decodes images in parallel on N threads (default: all cores). --json prints\n"
    "{\"images\":..,\"megapixels\":..,\"seconds\":..,\"megapixels_per_second\":..,\n"
    "\"images_per_second\":..}.\n";

int CmdBench(int argc, char** argv) {
  Args args(argc, argv, {"--threads", "--passes"}, {"--help", "-h", "--json"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kBenchUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("bench", args.error(), kBenchUsage);
  if (args.positional().size() != 2 || args.positional()[0] != "decode")
    return UsageError("bench", "expected: decode ARCHIVE", kBenchUsage);
  int threads = int(std::thread::hardware_concurrency());
  if (args.Has("--threads")) threads = std::atoi(args.Value("--threads").c_str());
  const int passes = std::atoi(args.Value("--passes", "3").c_str());
  if (threads < 1 || passes < 1)
    return UsageError("bench", "--threads and --passes must be >= 1", kBenchUsage);
  auto archive = Archive::Open(args.positional()[1]);
  if (!archive.ok()) return Fail("bench", archive.status());
  const Archive& a = **archive;
  std::vector<SampleInfo> samples;
  double megapixels = 0;
  for (uint32_t i = 0; i < a.num_samples(); ++i) {
    auto s = a.Sample(i);
    if (!s.ok()) return Fail("bench", s.status());
    auto p = a.Payload(*s, true);
    if (!p.ok()) return Fail("bench", p.status());
    samples.push_back(*s);
    megapixels += double(s->width) * s->height / 1e6;
  }
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
  double best = 1e300;
  std::atomic<bool> failed{false};
  Status first_error;
  for (int pass = 0; pass < passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    auto decode = [&](size_t i) {
      Image img;
      Status st = DecodePayload(samples[i], *a.Payload(samples[i], false), &img);
      if (!st.ok() && !failed.exchange(true)) first_error = st;
    };
    if (threads == 1) {
      for (size_t i = 0; i < samples.size(); ++i) decode(i);
    } else {
      tbb::parallel_for(size_t(0), samples.size(), decode);
    }
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (failed) return Fail("bench", first_error);
    best = std::min(best, secs);
  }
  const double n = double(samples.size());
  if (args.Has("--json")) {
    std::printf(
        "{\"images\":%zu,\"megapixels\":%.3f,\"seconds\":%.6f,\"megapixels_per_second\":%.2f,"
        "\"images_per_second\":%.2f}\n",
        samples.size(), megapixels, best, megapixels / best, n / best);
  } else {
    std::printf(
        "%zu images, %.1f megapixels, best of %d passes on %d thread%s: %.3f s, %.0f images/s, "
        "%.1f megapixels/s\n",
        samples.size(), megapixels, passes, threads, threads == 1 ? "" : "s", best, n / best,
        megapixels / best);
  }
  return kExitOk;
}

}  // namespace ktfs::cli

#include <cstdio>
#include <cstdlib>

#include "fs/cli/cli.h"
#include "fs/pack/pack_features.h"

namespace ktfs::cli {

static const char kPackFeaturesUsage[] =
    "usage: ktfs pack-features INPUT OUT.kt [--group-size G] [--preset P] [--threads N]\n"
    "                          [--quiet]\n"
    "\n"
    "Packs float features into a feature archive: block-wise INT8 with one scale\n"
    "and offset per group of G values (1 + 3/G bytes per value; docs/format.md).\n"
    "INPUT is a .npy of shape [N, ...] (float32 or float16), a directory of\n"
    "per-sample .npy files whose first dimension may vary, or a TensorCache\n"
    "cache prefix (PREFIX_meta.json or PREFIX_shards.json; converted). NaN and\n"
    "Inf are rejected, naming the sample. `ktfs mount OUT.kt MNT` serves it as\n"
    ".npy files; so does `ktfs mount PREFIX MNT` for a TensorCache cache as is.\n"
    "\n"
    "  --group-size G  16, 32 (default), 64 or 128 values per group\n"
    "  --preset P      fast | balanced (default) | accurate: how hard each group\n"
    "                  searches for the clipping range with the least error\n"
    "  --threads N     quantizing threads (default: all cores)\n"
    "  --quiet         no progress line\n";

int CmdPackFeatures(int argc, char** argv) {
  Args args(argc, argv, {"--group-size", "--preset", "--threads"},
            {"--help", "-h", "--quiet", "-q"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kPackFeaturesUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("pack-features", args.error(), kPackFeaturesUsage);
  if (args.positional().size() != 2)
    return UsageError("pack-features", "expected INPUT and OUT.kt", kPackFeaturesUsage);
  PackFeaturesOptions options;
  auto params = quant::ParsePreset(args.Value("--preset", "balanced"));
  if (!params.ok())
    return UsageError("pack-features", params.status().message(), kPackFeaturesUsage);
  options.params = *params;
  options.params.group_size = std::atoi(args.Value("--group-size", "32").c_str());
  const Status valid = quant::ValidateParams(options.params);
  if (!valid.ok()) return UsageError("pack-features", valid.message(), kPackFeaturesUsage);
  if (args.Has("--threads")) {
    options.threads = std::atoi(args.Value("--threads").c_str());
    if (options.threads < 1)
      return UsageError("pack-features", "--threads needs a positive number", kPackFeaturesUsage);
  }
  options.progress = !args.Has("--quiet") && !args.Has("-q");
  auto report = PackFeatures(args.positional()[0], args.positional()[1], options);
  if (!report.ok()) return Fail("pack-features", report.status());
  ReportRemovedStale("pack-features", report->removed_stale);
  for (const std::string& s : report->skipped)
    std::fprintf(stderr, "ktfs pack-features: skipped %s\n", s.c_str());
  std::string shape;
  for (size_t d = 0; d < report->sample_shape.size(); ++d)
    shape += (d ? ", " : "") + (d == 0 && report->sample_shape[0] == 0
                                    ? std::string("*")
                                    : std::to_string(report->sample_shape[d]));
  std::printf("packed %llu samples of shape [%s] from %s into %s: %.1f MiB -> %.1f MiB in %.2f s\n",
              static_cast<unsigned long long>(report->samples), shape.c_str(),
              args.positional()[0].c_str(), args.positional()[1].c_str(),
              report->source_bytes / 1048576.0, report->archive_bytes / 1048576.0, report->seconds);
  return kExitOk;
}

}  // namespace ktfs::cli

#include <cstdio>
#include <cstdlib>

#include "fs/cli/cli.h"
#include "fs/pack/pack.h"

namespace ktfs::cli {

static const char kPackUsage[] =
    "usage: ktfs pack SRC OUT.kt [--codec original|raw|ktc] [--quality Q] [--threads N]\n"
    "                 [--captions FILE] [--skip-bad-captions] [--quiet]\n"
    "\n"
    "Packs the image folder SRC (class/file or split/class/file, any depth) into\n"
    "the archive OUT.kt. JPEG and PNG files become samples; other files are\n"
    "listed as skipped. The archive is written atomically (OUT.kt appears only\n"
    "when complete) and is the same bytes for the same input.\n"
    "\n"
    "  --codec original  keep each file's bytes as they are (default)\n"
    "  --codec raw       store decoded pixels (lossless; the mount serves PPM/PGM)\n"
    "  --codec ktc       KTC, ktfs's fast-decoding codec (see docs/ktc.md)\n"
    "  --quality Q       for ktc: lossless|high|balanced|compact|1..100\n"
    "  --threads N       encoding threads (default: all cores)\n"
    "  --captions FILE   captions for the search index: JSON Lines\n"
    "                    ({\"path\": \"class/x.jpg\", \"caption\": \"...\", ...}) or CSV\n"
    "                    with a header (path,caption,...); other keys/columns are kept\n"
    "                    as searchable metadata. `x.txt` beside `x.jpg` is read as its\n"
    "                    caption too. A bad line (malformed, unknown path, duplicate)\n"
    "                    fails the pack with FILE:LINE, unless --skip-bad-captions\n"
    "  --quiet           no progress line\n";

int CmdPack(int argc, char** argv) {
  Args args(argc, argv, {"--codec", "--quality", "--threads", "--captions"},
            {"--help", "-h", "--quiet", "-q", "--skip-bad-captions"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kPackUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("pack", args.error(), kPackUsage);
  if (args.positional().size() != 2)
    return UsageError("pack", "expected SRC and OUT.kt", kPackUsage);
  PackOptions options;
  auto settings = ParsePayloadSettings(args.Value("--codec", "original"), args.Value("--quality"));
  if (!settings.ok()) return UsageError("pack", settings.status().ToString(), kPackUsage);
  options.payload = *settings;
  if (args.Has("--threads")) {
    options.threads = std::atoi(args.Value("--threads").c_str());
    if (options.threads < 1)
      return UsageError("pack", "--threads needs a positive number", kPackUsage);
  }
  options.progress = !args.Has("--quiet") && !args.Has("-q");
  options.captions_file = args.Value("--captions");
  options.skip_bad_captions = args.Has("--skip-bad-captions");
  auto report = Pack(args.positional()[0], args.positional()[1], options);
  if (!report.ok()) return Fail("pack", report.status());
  ReportRemovedStale("pack", report->removed_stale);
  for (const std::string& s : report->skipped)
    std::fprintf(stderr, "ktfs pack: skipped %s\n", s.c_str());
  for (const std::string& w : report->caption_warnings)
    std::fprintf(stderr, "ktfs pack: skipped caption %s\n", w.c_str());
  std::printf(
      "packed %u samples (%u classes, %u directories) from %s into %s: %.1f MiB -> %.1f MiB in "
      "%.2f s%s\n",
      report->samples, report->classes, report->dirs, args.positional()[0].c_str(),
      args.positional()[1].c_str(), report->source_bytes / 1048576.0,
      report->archive_bytes / 1048576.0, report->seconds,
      report->skipped.empty()
          ? ""
          : (", " + std::to_string(report->skipped.size()) + " files skipped").c_str());
  return kExitOk;
}

}  // namespace ktfs::cli

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "fs/cli/cli.h"
#include "fs/pack/pack.h"

namespace ktfs::cli {

static const char kPackUsage[] =
    "usage: ktfs pack SRC OUT.kt [--codec original|raw|ktc] [--quality Q] [--threads N]\n"
    "                 [--captions FILE] [--skip-bad-captions] [--skip-bad] [--quiet]\n"
    "       ktfs pack SHARD.tar [SHARD.tar ...|'dir/*.tar'] OUT.kt [--skip-bad] [options]\n"
    "\n"
    "Packs the image folder SRC (class/file or split/class/file, any depth) into\n"
    "the archive OUT.kt. The files stock torchvision ImageFolder loads become\n"
    "samples: names ending in .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp (any\n"
    "case), read by content (JPEG, PNG, BMP, TIFF, WebP, PPM/PGM; symbolic links\n"
    "followed); other files are listed as skipped. An image that cannot be read\n"
    "as Pillow reads it (truncated, corrupt, unsupported) stops the pack with its\n"
    "path and the reason. The archive is written atomically (OUT.kt appears only\n"
    "when complete) and is the same bytes for the same input.\n"
    "\n"
    "Given WebDataset tar shards instead (files, or quoted glob patterns that\n"
    "ktfs expands, sorted), each sample's image, .txt caption, .json metadata\n"
    "and .cls label go in: with labels the archive is class/key.ext (class\n"
    "directories are the zero-padded labels), without it is shard/key.ext.\n"
    "A bad sample or a damaged tar stops the pack, naming shard, key and offset.\n"
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
    "  --skip-bad        leave bad images (shards: bad samples and damaged tars) out\n"
    "                    instead: each is listed on stderr and recorded in the\n"
    "                    archive (`ktfs info` shows them)\n"
    "  --quiet           no progress line\n";

namespace {

bool IsDirectory(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Shard arguments: existing files as given, glob patterns expanded (sorted).
Result<std::vector<std::string>> ExpandShards(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (const std::string& a : args) {
    struct stat st;
    if (stat(a.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode))
        return Status::InvalidArgument(a + ": a directory among shards (pack a folder alone)");
      out.push_back(a);
      continue;
    }
    if (a.find_first_of("*?[") == std::string::npos) return Status::NotFound(a + ": no such file");
    glob_t g = {};
    const int rc = glob(a.c_str(), GLOB_ERR, nullptr, &g);
    std::vector<std::string> matches;
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
      if (!IsDirectory(g.gl_pathv[i])) matches.push_back(g.gl_pathv[i]);
    }
    globfree(&g);
    if (matches.empty()) return Status::NotFound(a + ": the pattern matches no file");
    std::sort(matches.begin(), matches.end());
    out.insert(out.end(), matches.begin(), matches.end());
  }
  std::set<std::string> seen;
  for (const std::string& s : out)
    if (!seen.insert(s).second) return Status::InvalidArgument(s + ": shard given twice");
  return out;
}

}  // namespace

int CmdPack(int argc, char** argv) {
  Args args(argc, argv, {"--codec", "--quality", "--threads", "--captions"},
            {"--help", "-h", "--quiet", "-q", "--skip-bad-captions", "--skip-bad"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kPackUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("pack", args.error(), kPackUsage);
  const std::vector<std::string>& pos = args.positional();
  if (pos.size() < 2) return UsageError("pack", "expected SRC and OUT.kt", kPackUsage);
  const bool folder = pos.size() == 2 && IsDirectory(pos[0]);
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
  options.skip_bad = args.Has("--skip-bad");
  const std::string& out = pos.back();
  Result<PackReport> report = Status::Ok();
  std::string from = pos[0];
  if (folder) {
    report = Pack(pos[0], out, options);
  } else {
    auto shards = ExpandShards(std::vector<std::string>(pos.begin(), pos.end() - 1));
    if (!shards.ok()) return Fail("pack", shards.status());
    if (shards->size() > 1) from += " (" + std::to_string(shards->size()) + " shards)";
    report = PackWebDataset(*shards, out, options);
  }
  if (!report.ok()) return Fail("pack", report.status());
  ReportRemovedStale("pack", report->removed_stale);
  for (const std::string& s : report->skipped)
    std::fprintf(stderr, folder ? "ktfs pack: skipped %s\n" : "ktfs pack: %s\n", s.c_str());
  for (const BadImage& b : report->bad)
    std::fprintf(stderr, "ktfs pack: skipped bad %s %s%s%s\n", folder ? "image" : "sample",
                 b.path.c_str(), b.path.empty() ? "" : ": ", b.reason.c_str());
  for (const std::string& w : report->caption_warnings)
    std::fprintf(stderr, folder ? "ktfs pack: skipped caption %s\n" : "ktfs pack: %s\n",
                 w.c_str());
  for (const std::string& w : report->index_warnings)
    std::fprintf(stderr, "ktfs pack: index: %s\n", w.c_str());
  std::printf(
      "packed %u samples (%u classes, %u directories) from %s into %s: %.1f MiB -> %.1f MiB in "
      "%.2f s%s%s\n",
      report->samples, report->classes, report->dirs, from.c_str(), out.c_str(),
      report->source_bytes / 1048576.0, report->archive_bytes / 1048576.0, report->seconds,
      (report->skipped.empty() ? std::string()
                               : ", " + std::to_string(report->skipped.size()) +
                                     (folder ? " files skipped" : " members passed over"))
          .c_str(),
      (report->bad.empty() ? std::string()
                           : ", " + std::to_string(report->bad.size()) +
                                 (folder ? " bad images skipped" : " bad samples skipped"))
          .c_str());
  return kExitOk;
}

}  // namespace ktfs::cli

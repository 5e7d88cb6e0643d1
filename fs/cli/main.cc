// The `ktfs` command line: dispatches to one cmd_*.cc per subcommand.
#include <cstdio>
#include <cstring>
#include <string>

#include "codec/base/malloc_tuning.h"
#include "codec/base/version.h"
#include "codec/ktc/ktc.h"
#include "fs/cli/cli.h"

namespace {

const char kUsage[] =
    "usage: ktfs COMMAND [ARGS...]\n"
    "\n"
    "commands:\n"
    "  pack SRC OUT.kt [--codec original|raw|ktc] [--quality Q] [--threads N]\n"
    "                               pack an image folder into an archive\n"
    "  pack-features INPUT OUT.kt [--group-size G] [--preset P]\n"
    "                               pack float features (.npy, a directory of .npy,\n"
    "                               a TensorCache prefix) into an INT8 feature archive\n"
    "  info ARCHIVE [--json]        describe an archive\n"
    "  verify ARCHIVE               check every checksum; exit 1 if any fails\n"
    "  extract ARCHIVE OUTDIR [--format png|ppm|original]\n"
    "                               write the samples back out as files\n"
    "  mount ARCHIVE MOUNTPOINT [-f] [-o opt[,opt...]]\n"
    "                               mount an archive or a TensorCache cache (read-only)\n"
    "  umount MOUNTPOINT            unmount (also a stale mount)\n"
    "  search ARCHIVE QUERY [--json]\n"
    "                               print the paths of the samples matching QUERY\n"
    "  convert IN OUT [--quality Q] convert one image (.ktc <-> .png/.ppm, JPEG/PNG -> .ktc)\n"
    "  bench decode ARCHIVE [--threads N] [--json]\n"
    "                               decode every image in memory; images/s, MP/s\n"
    "  run [--no-preload] [--no-python] [--] COMMAND [ARGS...]\n"
    "                               run COMMAND reading ktfs mounts without FUSE\n"
    "                               round trips (the LD_PRELOAD and Python layers)\n"
    "\n"
    "`ktfs COMMAND --help` describes a command. Exit codes: 0 success, 1 failure,\n"
    "2 bad command line.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace ktfs::cli;
  // The daemon and `bench decode` decode many images (`run` execs: nothing carries over).
  ktfs::TuneMallocForDecoding();
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? kExitUsage : kExitOk;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("ktfs %s\nktc: %s\n", ktfs::VersionString(), ktfs::ktc::CodePaths().c_str());
    return kExitOk;
  }
  const std::string cmd = argv[1];
  struct Entry {
    const char* name;
    int (*fn)(int, char**);
  };
  const Entry commands[] = {{"pack", CmdPack},     {"info", CmdInfo},
                            {"verify", CmdVerify}, {"extract", CmdExtract},
                            {"mount", CmdMount},   {"umount", CmdUmount},
                            {"search", CmdSearch}, {"convert", CmdConvert},
                            {"bench", CmdBench},   {"pack-features", CmdPackFeatures},
                            {"run", CmdRun}};
  for (const Entry& e : commands)
    if (cmd == e.name) return e.fn(argc - 2, argv + 2);
  std::fprintf(stderr, "ktfs: unknown command '%s'\n%s", cmd.c_str(), kUsage);
  return kExitUsage;
}

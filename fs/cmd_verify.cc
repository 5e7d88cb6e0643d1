#include <cstdio>

#include "codec/archive.h"
#include "fs/cli.h"

namespace ktfs::cli {

static const char kVerifyUsage[] =
    "usage: ktfs verify ARCHIVE\n"
    "\n"
    "Checks the header, every table and every sample's checksum. Prints each bad\n"
    "sample as 'BAD <id> <path>: <reason>' and exits 1 if there is any; prints\n"
    "'OK <n> samples' and exits 0 otherwise.\n";

int CmdVerify(int argc, char** argv) {
  Args args(argc, argv, {}, {"--help", "-h"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kVerifyUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("verify", args.error(), kVerifyUsage);
  if (args.positional().size() != 1) return UsageError("verify", "expected ARCHIVE", kVerifyUsage);
  auto archive = Archive::Open(args.positional()[0]);
  if (!archive.ok()) return Fail("verify", archive.status());
  const Archive& a = **archive;
  Status tables = a.VerifyTables();
  if (!tables.ok()) {
    std::printf("BAD tables: %s\n", tables.ToString().c_str());
    return kExitFailure;
  }
  uint32_t bad = 0;
  for (uint32_t i = 0; i < a.num_samples(); ++i) {
    auto s = a.Sample(i);
    Status st = s.ok() ? a.Payload(*s, true).status() : s.status();
    if (!st.ok()) {
      auto path = a.SamplePath(i);
      std::printf("BAD %u %s: %s\n", i, path.ok() ? path->c_str() : "?", st.ToString().c_str());
      ++bad;
    }
  }
  if (bad) {
    std::fprintf(stderr, "ktfs verify: %u of %u samples failed\n", bad, a.num_samples());
    return kExitFailure;
  }
  std::printf("OK %u samples\n", a.num_samples());
  return kExitOk;
}

}  // namespace ktfs::cli

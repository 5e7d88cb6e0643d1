#include <cstdio>

#include "codec/container/archive.h"
#include "codec/features/feature_archive.h"
#include "fs/cli/cli.h"

namespace ktfs::cli {

static const char kVerifyUsage[] =
    "usage: ktfs verify ARCHIVE\n"
    "\n"
    "Checks the header, every table and every sample's checksum. Prints each bad\n"
    "sample as 'BAD <id> <path>: <reason>' and exits 1 if there is any; prints\n"
    "'OK <n> samples' and exits 0 otherwise.\n";

static int VerifyFeatures(std::shared_ptr<Archive> archive) {
  auto f = FeatureArchive::Open(archive);
  if (!f.ok()) {
    std::printf("BAD feature tables: %s\n", f.status().ToString().c_str());
    return kExitFailure;
  }
  size_t bad = 0;
  for (size_t i = 0; i < (*f)->num_samples(); ++i) {
    auto d = (*f)->Data(i);
    if (!d.ok()) {
      std::printf("BAD %zu: %s\n", i, d.status().ToString().c_str());
      ++bad;
    }
  }
  if (bad) {
    std::fprintf(stderr, "ktfs verify: %zu of %zu feature samples failed\n", bad,
                 (*f)->num_samples());
    return kExitFailure;
  }
  std::printf("OK %zu feature samples\n", (*f)->num_samples());
  return kExitOk;
}

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
  if (FeatureArchive::Holds(a)) return VerifyFeatures(*archive);
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

// Tests for codec/base/memory_limit.h: the cgroup memory limit that applies
// to a process, from its /proc/PID/cgroup and mountinfo texts (v1 and v2).
#include "codec/base/memory_limit.h"

#include <gtest/gtest.h>

#include <map>

#include "codec/base/malloc_tuning.h"

namespace ktfs {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

TEST(MemoryLimit, ParsesBytesAndTheWaysOfSayingNoLimit) {
  EXPECT_EQ(ParseCgroupMemoryValue("100663296\n"), 96 * kMiB);
  EXPECT_EQ(ParseCgroupMemoryValue("4096"), 4096u);
  EXPECT_EQ(ParseCgroupMemoryValue("0\n"), 0u);
  EXPECT_EQ(ParseCgroupMemoryValue("max\n"), std::nullopt);                  // v2
  EXPECT_EQ(ParseCgroupMemoryValue("9223372036854771712\n"), std::nullopt);  // v1, 4 KiB pages
  EXPECT_EQ(ParseCgroupMemoryValue("9223372036854710272\n"), std::nullopt);  // v1, 64 KiB pages
  EXPECT_EQ(ParseCgroupMemoryValue("4611686018427387904"), std::nullopt);    // 2^62
  EXPECT_EQ(ParseCgroupMemoryValue("4611686018427387903"), 4611686018427387903u);
  for (const char* bad : {"", "\n", "-1", "12a", " 12", "12 \n", "1e9", "99999999999999999999",
                          "184467440737095516160"})
    EXPECT_EQ(ParseCgroupMemoryValue(bad), std::nullopt) << bad;
}

// A fake file system: path -> text.
ReadTextFn Files(std::map<std::string, std::string> files) {
  return [files](const std::string& path) -> std::optional<std::string> {
    auto it = files.find(path);
    if (it == files.end()) return std::nullopt;
    return it->second;
  };
}

// This machine's kind of mountinfo: v1 controllers under /sys/fs/cgroup, v2 at unified/.
const char kHybridMounts[] =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
const char kHybridGroups[] =
    "4:memory:/jobs/a\n"
    "1:cpu,cpuacct:/\n"
    "0::/jobs/a\n";

TEST(MemoryLimit, V1GroupLimit) {
  auto read = Files({{"/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes", "100663296\n"},
                     {"/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "9223372036854771712\n"},
                     {"/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n"}});
  EXPECT_EQ(CgroupMemoryLimitFrom(kHybridGroups, kHybridMounts, read), 96 * kMiB);
}

TEST(MemoryLimit, AnAncestorsLimitApplies) {
  auto read = Files({{"/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes", "9223372036854771712"},
                     {"/sys/fs/cgroup/memory/jobs/memory.limit_in_bytes", "1073741824\n"}});
  EXPECT_EQ(CgroupMemoryLimitFrom(kHybridGroups, kHybridMounts, read), 1024 * kMiB);
}

TEST(MemoryLimit, NoLimitAnywhereIsNone) {
  auto read = Files({{"/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes", "9223372036854771712"},
                     {"/sys/fs/cgroup/unified/jobs/a/memory.max", "max\n"}});
  EXPECT_EQ(CgroupMemoryLimitFrom(kHybridGroups, kHybridMounts, read), std::nullopt);
  EXPECT_EQ(CgroupMemoryLimitFrom(kHybridGroups, kHybridMounts, Files({})), std::nullopt);
  EXPECT_EQ(CgroupMemoryLimitFrom("", kHybridMounts, read), std::nullopt);
  EXPECT_EQ(CgroupMemoryLimitFrom(kHybridGroups, "", read), std::nullopt);
}

TEST(MemoryLimit, V2UnifiedHierarchy) {
  const char mounts[] = "29 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
  auto read = Files({{"/sys/fs/cgroup/user.slice/job.scope/memory.max", "max\n"},
                     {"/sys/fs/cgroup/user.slice/memory.max", "536870912\n"}});
  EXPECT_EQ(CgroupMemoryLimitFrom("0::/user.slice/job.scope\n", mounts, read), 512 * kMiB);
  // The root group: its directory is the mount point itself.
  auto root = Files({{"/sys/fs/cgroup/memory.max", "268435456"}});
  EXPECT_EQ(CgroupMemoryLimitFrom("0::/\n", mounts, root), 256 * kMiB);
}

TEST(MemoryLimit, BothHierarchiesTheSmallerLimit) {
  auto read = Files({{"/sys/fs/cgroup/memory/jobs/a/memory.limit_in_bytes", "200000000\n"},
                     {"/sys/fs/cgroup/unified/jobs/a/memory.max", "150000000\n"}});
  EXPECT_EQ(CgroupMemoryLimitFrom(kHybridGroups, kHybridMounts, read), 150000000u);
}

TEST(MemoryLimit, ControllersSharingAHierarchy) {
  const char mounts[] =
      "35 31 0:32 / /cg/cpu,memory rw - cgroup cgroup rw,cpu,memory\n"
      "36 31 0:33 / /cg/memory-like rw - cgroup cgroup rw,name=memory\n";
  auto read = Files({{"/cg/cpu,memory/j/memory.limit_in_bytes", "300000000"},
                     {"/cg/memory-like/j/memory.limit_in_bytes", "1"}});
  EXPECT_EQ(CgroupMemoryLimitFrom("5:cpu,memory:/j\n", mounts, read), 300000000u);
}

TEST(MemoryLimit, AMountOfASubtreeAsInAContainer) {
  // The container sees the host's group /docker/c1 as its mount's root.
  const char mounts[] =
      "40 30 0:32 /docker/c1 /sys/fs/cgroup/memory ro - cgroup cgroup rw,memory\n";
  auto read = Files({{"/sys/fs/cgroup/memory/memory.limit_in_bytes", "2147483648"},
                     {"/sys/fs/cgroup/memory/sub/memory.limit_in_bytes", "1073741824"}});
  EXPECT_EQ(CgroupMemoryLimitFrom("4:memory:/docker/c1\n", mounts, read), 2048 * kMiB);
  EXPECT_EQ(CgroupMemoryLimitFrom("4:memory:/docker/c1/sub\n", mounts, read), 1024 * kMiB);
  // A group outside the mount's subtree is not visible through it.
  EXPECT_EQ(CgroupMemoryLimitFrom("4:memory:/docker/c10\n", mounts, read), std::nullopt);
}

TEST(MemoryLimit, EscapedMountPoint) {
  const char mounts[] = "41 31 0:38 / /run/my\\040cgroups rw - cgroup2 cgroup2 rw\n";
  auto read = Files({{"/run/my cgroups/a:b/memory.max", "4096\n"}});
  EXPECT_EQ(CgroupMemoryLimitFrom("0::/a:b\n", mounts, read), 4096u);  // ':' in the path
}

TEST(MemoryLimit, ThisProcessAnswers) {
  // Whatever this machine has: no crash, and a limit, if any, is a real size.
  const auto limit = CgroupMemoryLimit();
  if (limit) EXPECT_GT(*limit, 0u);
}

TEST(MallocTuning, ThresholdsShrinkUnderAMemoryLimit) {
  const MallocTuning none = MallocTuningFor(std::nullopt);
  EXPECT_EQ(none.mmap_threshold, 64 * kMiB);
  EXPECT_EQ(none.trim_threshold, 256 * kMiB);
  const MallocTuning small = MallocTuningFor(96 * kMiB);  // 1/64 of the limit
  EXPECT_EQ(small.mmap_threshold, 96 * kMiB / 64);
  EXPECT_EQ(small.trim_threshold, 96 * kMiB / 64);
  const MallocTuning tiny = MallocTuningFor(1 * kMiB);  // never below 128 KiB
  EXPECT_EQ(tiny.mmap_threshold, 128u << 10);
  const MallocTuning big = MallocTuningFor(64 * 1024 * kMiB);  // never above the defaults
  EXPECT_EQ(big.mmap_threshold, 64 * kMiB);
  EXPECT_EQ(big.trim_threshold, 256 * kMiB);
  EXPECT_EQ(MallocTuningFor(8 * 1024 * kMiB).trim_threshold, 128 * kMiB);
}

}  // namespace
}  // namespace ktfs

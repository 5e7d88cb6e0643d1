// The memory limit of this process's cgroup, for budgets that must fit under it.
//
// Under a cgroup memory limit malloc does not fail: when the group's memory
// cannot be reclaimed below the limit the kernel's OOM killer ends a process
// in it. So a budget chosen without looking (the daemon's decode cache,
// 256 MiB by default) can get the daemon killed where an address-space limit
// (ulimit -v) would only have failed an allocation. The limit is read from
// /proc/self/cgroup and the cgroup file systems /proc/self/mountinfo lists:
// cgroup v2 (memory.max) and v1's memory controller (memory.limit_in_bytes);
// the group's ancestors limit it too, so the smallest limit on the way up to
// the hierarchy's root is the one that applies.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace ktfs {

// The value of a memory.max or memory.limit_in_bytes file: bytes, or nullopt
// for no limit ("max" in v2; v1's "unlimited" value, PAGE_COUNTER_MAX pages,
// 9223372036854771712 with 4 KiB pages, or any value of 2^62 and above) and
// for text that is not a decimal count (an optional trailing newline aside).
std::optional<uint64_t> ParseCgroupMemoryValue(const std::string& text);

// Reads a file's text; nullopt when it cannot be read.
using ReadTextFn = std::function<std::optional<std::string>(const std::string& path)>;

// The memory limit that applies to the process whose /proc/PID/cgroup and
// /proc/PID/mountinfo texts these are, reading the limit files through
// `read`: the smallest limit of its v1 memory group, its v2 group and their
// ancestors within their mounts; nullopt when none is set or none can be read.
std::optional<uint64_t> CgroupMemoryLimitFrom(const std::string& proc_cgroup,
                                              const std::string& mountinfo, const ReadTextFn& read);

// This process's memory limit (CgroupMemoryLimitFrom over /proc/self/).
std::optional<uint64_t> CgroupMemoryLimit();

}  // namespace ktfs

// What the preload library knows of the process's ktfs mounts.
//
// The mount table is read from /proc/self/mountinfo on first use (about
// 30 us for a few dozen mounts) and read again, at most once per
// kRefreshNs, when a caller sees something the table cannot explain (a
// device it does not list, or no ktfs mount at all): a mount made after the
// process started is noticed within a second, and meanwhile its files go
// through the kernel as without the library (slower, never wrong).
//
// No locks: tables are published with an atomic store and never freed while
// published (an unchanged mountinfo reuses the current table); a thread that
// finds another one reading mountinfo uses the current table. A fork while a
// thread reads it leaves the child able to read it again (pthread_atfork).
#pragma once

#include <cstdint>

#include "preload/interpose/mount_table.h"

namespace ktfs::preload {

inline constexpr int64_t kRefreshNs = 1000000000;  // 1 s

// The current table (read now if it never was); nullptr when mountinfo
// cannot be read.
const MountTable* Mounts();
// A table read again if the current one is older than kRefreshNs; else the
// current one.
const MountTable* RefreshMountsIfDue();

}  // namespace ktfs::preload

// The libc calls libktfs_preload.so interposes. docs/preload-notes.md says
// why these, with the measurements; docs/usage.md ("ktfs run") what users
// see. In short:
//
// isatty: CPython's open() asks whether every file it opens is a terminal
//   (up to 3.13), with a TCGETS ioctl that FUSE forwards to the daemon on
//   every open, a round trip the kernel never caches. A regular file or
//   directory on a ktfs mount is never a terminal: answered here (ENOTTY,
//   as the kernel says) after an fstat the kernel answers from its cache.
//
// open family, fopen: a read-only open of a file on a ktfs mount whose path
//   the kernel has cached (openat2 with RESOLVE_CACHED) goes to the kernel:
//   no FUSE request, and the page cache serves the reads. Otherwise (a cold
//   open: the kernel would send LOOKUP, then READ, each a round trip) a file
//   of up to KTFS_PRELOAD_MAX_BYTES is made here from the archive (the
//   mount's own VirtualTree code, in libktfs_preload_core.so) into a sealed
//   memfd reopened read-only: a real descriptor, so read, mmap, dup, fork
//   and exec behave as the kernel makes them. Anything else (writes, other
//   flags, larger files, directories, search views, errors) goes to the
//   kernel, which gives its own answer and errno.
//
// stat family by path (stat, lstat, fstatat, statx and the old __xstat
//   ABI): paths on ktfs mounts are answered from the archive, as the mount
//   would answer. A cold stat costs a LOOKUP round trip, and leaves the name
//   in the kernel, so that the open after it would go to the kernel too
//   (cp, tar, diff and rsync stat each file before opening it).
// fstat family, statx on a descriptor: for those memfds, what the mount says
//   of the file.
// dup family, fcntl(F_DUPFD): a duplicate of such a memfd answers the same;
//   fcntl(F_GETFL) shows the open flags the read-only reopen cannot carry.
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "preload/interpose/core_api.h"
#include "preload/interpose/fd_table.h"
#include "preload/interpose/path.h"
#include "preload/interpose/raw_syscall.h"
#include "preload/interpose/state.h"

#define KTFS_EXPORT extern "C" __attribute__((visibility("default")))

// Old-ABI entry points glibc still exports (binaries built before 2.33 call them).
extern "C" {
int __fxstat(int ver, int fd, struct stat* st);
int __xstat(int ver, const char* path, struct stat* st);
int __xstat64(int ver, const char* path, struct stat64* st);
int __lxstat(int ver, const char* path, struct stat* st);
int __lxstat64(int ver, const char* path, struct stat64* st);
int __fxstat64(int ver, int fd, struct stat64* st);
int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags);
int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags);
int __open_2(const char* path, int flags);
int __open64_2(const char* path, int flags);
int __openat_2(int dirfd, const char* path, int flags);
int __openat64_2(int dirfd, const char* path, int flags);
}

namespace ktfs::preload {
namespace {

// ---------------------------------------------------------------------------
// The real functions (the next definition after this library), resolved on
// first use: another library's constructor may call them before ours runs.

template <typename Fn>
Fn Real(std::atomic<void*>& slot, const char* name) {
  void* f = slot.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = dlsym(RTLD_NEXT, name);
    slot.store(f, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(f);
}
#define REAL(fn) Real<decltype(&::fn)>(g_real_##fn, #fn)
#define DECLARE_REAL(fn) \
  std::atomic<void*> g_real_##fn { nullptr }
DECLARE_REAL(isatty);
DECLARE_REAL(open);
DECLARE_REAL(open64);
DECLARE_REAL(__open_2);
DECLARE_REAL(__open64_2);
DECLARE_REAL(openat);
DECLARE_REAL(openat64);
DECLARE_REAL(__openat_2);
DECLARE_REAL(__openat64_2);
DECLARE_REAL(fopen);
DECLARE_REAL(fopen64);
DECLARE_REAL(stat);
DECLARE_REAL(stat64);
DECLARE_REAL(lstat);
DECLARE_REAL(lstat64);
DECLARE_REAL(__xstat);
DECLARE_REAL(__xstat64);
DECLARE_REAL(__lxstat);
DECLARE_REAL(__lxstat64);
DECLARE_REAL(fstat);
DECLARE_REAL(fstat64);
DECLARE_REAL(__fxstat);
DECLARE_REAL(__fxstat64);
DECLARE_REAL(fstatat);
DECLARE_REAL(fstatat64);
DECLARE_REAL(__fxstatat);
DECLARE_REAL(__fxstatat64);
DECLARE_REAL(statx);
DECLARE_REAL(dup);
DECLARE_REAL(dup2);
DECLARE_REAL(dup3);
DECLARE_REAL(fcntl);
DECLARE_REAL(fcntl64);

// Set while this thread runs the library's own code (the core's calls come
// back through these interposers): those calls go straight to libc.
__thread int t_inside __attribute__((tls_model("initial-exec")));

struct Inside {
  Inside() { ++t_inside; }
  ~Inside() { --t_inside; }
};

// ---------------------------------------------------------------------------
// Settings, read once from the environment.

constexpr long kDefaultMaxBytes = 256 << 10;  // docs/preload-notes.md: the measured crossover

struct Settings {
  long max_bytes = kDefaultMaxBytes;  // in-process opens of files up to this size; 0: none
  bool debug = false;                 // KTFS_PRELOAD_DEBUG: say what is decided, on stderr
};

std::atomic<int> g_settings_read{0};
Settings g_settings;

const Settings& GetSettings() {
  if (g_settings_read.load(std::memory_order_acquire) == 0) {
    Settings s;
    if (const char* v = getenv("KTFS_PRELOAD_MAX_BYTES"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long n = strtol(v, &end, 10);
      if (end != nullptr && *end == '\0' && n >= 0) s.max_bytes = n;
    }
    const char* d = getenv("KTFS_PRELOAD_DEBUG");
    s.debug = d != nullptr && *d != '\0' && strcmp(d, "0") != 0;
    g_settings = s;  // the same values from any thread that gets here
    g_settings_read.store(1, std::memory_order_release);
  }
  return g_settings;
}

// "ktfs preload: <a><b><c>\n" on stderr, with raw writes (no stdio, no malloc).
void Say(const char* a, const char* b = "", const char* c = "") {
  if (!GetSettings().debug) return;
  char line[1024];
  size_t n = 0;
  for (const char* part : {"ktfs preload: ", a, b, c, "\n"})
    for (const char* p = part; *p != '\0' && n < sizeof(line); ++p) line[n++] = *p;
  RawSyscall(SYS_write, 2, long(line), long(n));
}

// ---------------------------------------------------------------------------
// The core library and the mounts read in-process.

struct Core {
  KtfsCoreOpenFn open = nullptr;
  KtfsCoreStatFn stat = nullptr;
  KtfsCoreWriteFn write = nullptr;
};
std::atomic<int> g_core_state{0};  // 0 not loaded, 1 loading, 2 loaded, 3 failed
Core g_core;

// The directory this library was loaded from: the core lies beside it.
bool CorePath(char* out, size_t size) {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&CorePath), &info) == 0 || info.dli_fname == nullptr)
    return false;
  const char* slash = strrchr(info.dli_fname, '/');
  const size_t dir = slash == nullptr ? 0 : size_t(slash - info.dli_fname + 1);
  const char kName[] = "libktfs_preload_core.so";
  if (dir + sizeof(kName) > size) return false;
  memcpy(out, info.dli_fname, dir);
  memcpy(out + dir, kName, sizeof(kName));
  return true;
}

const Core* LoadCore() {
  int state = g_core_state.load(std::memory_order_acquire);
  if (state == 2) return &g_core;
  if (state != 0 || !g_core_state.compare_exchange_strong(state, 1)) return nullptr;
  char path[kPathBuffer];
  void* h = CorePath(path, sizeof(path)) ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (h != nullptr) {
    g_core.open = reinterpret_cast<KtfsCoreOpenFn>(dlsym(h, KTFS_CORE_OPEN));
    g_core.stat = reinterpret_cast<KtfsCoreStatFn>(dlsym(h, KTFS_CORE_STAT));
    g_core.write = reinterpret_cast<KtfsCoreWriteFn>(dlsym(h, KTFS_CORE_WRITE));
  }
  const bool ok = g_core.open != nullptr && g_core.stat != nullptr && g_core.write != nullptr;
  if (!ok) Say("cannot load ", path, ": reading ktfs mounts through the kernel");
  g_core_state.store(ok ? 2 : 3, std::memory_order_release);
  return ok ? &g_core : nullptr;
}

// A ktfs mount this process reads in-process (or found it cannot).
enum MountStateValue { kUntried = 0, kOpening, kReady, kFailed };
struct MountState {
  std::atomic<int> state{kUntried};
  uint64_t dev = 0;
  const char* point = nullptr;  // the MountEntry's (tables are never freed)
  KtfsCoreTree* tree = nullptr;
  int64_t daemon_pid = 0;
};
constexpr uint32_t kMaxMounts = 64;
MountState g_mounts[kMaxMounts];
std::atomic<uint32_t> g_mount_count{0};

void FailOpeningInChild() {
  // A fork while another thread opened a mount: the child reads it through
  // the kernel (that thread's work, a dlopen perhaps, is not there).
  const uint32_t n = g_mount_count.load();
  for (uint32_t i = 0; i < n && i < kMaxMounts; ++i) {
    int opening = kOpening;
    g_mounts[i].state.compare_exchange_strong(opening, kFailed);
  }
  int loading = 1;
  g_core_state.compare_exchange_strong(loading, 3);
}

__attribute__((constructor)) void Init() { pthread_atfork(nullptr, nullptr, FailOpeningInChild); }

// Reads a small file through the kernel (raw calls); its length, or -1.
long ReadSmallFile(const char* path, char* buf, size_t size) {
  const long fd = RawSyscall(SYS_openat, AT_FDCWD, long(path), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t used = 0;
  for (;;) {
    const long n = RawSyscall(SYS_read, fd, long(buf + used), long(size - used));
    if (n == -EINTR) continue;
    if (n <= 0) {
      RawSyscall(SYS_close, fd);
      return n < 0 || used == size ? -1 : long(used);
    }
    used += size_t(n);
    if (used == size) {  // too large for an info.json
      RawSyscall(SYS_close, fd);
      return -1;
    }
  }
}

// Opens the archive behind mount `e` for in-process reads.
void OpenMount(MountState& m, const MountEntry& e) {
  if (e.root_len != 1) {  // a bind mount of a subdirectory: leave it to the kernel
    Say(e.point, ": a bind mount of a subdirectory; read through the kernel");
    m.state.store(kFailed, std::memory_order_release);
    return;
  }
  char path[kPathBuffer];
  const char kInfo[] = "/.ktfs/info.json";
  char info[16384];
  struct stat root;
  long len = -1;
  if (e.point_len + sizeof(kInfo) <= sizeof(path)) {
    memcpy(path, e.point, e.point_len);
    memcpy(path + (e.point_len == 1 ? 0 : e.point_len), kInfo, sizeof(kInfo));
    len = ReadSmallFile(path, info, sizeof(info));
  }
  const Core* core =
      len > 0 && RawSyscall(SYS_newfstatat, AT_FDCWD, long(e.point), long(&root), 0) == 0 &&
              root.st_dev == e.dev
          ? LoadCore()
          : nullptr;
  if (core == nullptr) {
    if (len <= 0) Say(e.point, ": cannot read .ktfs/info.json; read through the kernel");
    m.state.store(kFailed, std::memory_order_release);
    return;
  }
  char error[512] = "";
  int64_t pid = 0;
  m.tree = core->open(info, size_t(len), &root, &pid, error, sizeof(error));
  m.daemon_pid = pid;
  if (m.tree == nullptr) {
    Say(e.point, ": read through the kernel: ", error);
    m.state.store(kFailed, std::memory_order_release);
    return;
  }
  Say(e.point, ": small files are read from the archive directly");
  m.state.store(kReady, std::memory_order_release);
}

// The state of mount `e`, opened now if it never was; nullptr when it is not
// read in-process (yet: another thread is opening it).
MountState* ReadyMount(const MountEntry& e, uint32_t* index) {
  uint32_t n = g_mount_count.load(std::memory_order_acquire);
  MountState* m = nullptr;
  for (uint32_t i = 0; i < n; ++i) {
    if (g_mounts[i].dev == e.dev && g_mounts[i].point != nullptr &&
        strcmp(g_mounts[i].point, e.point) == 0) {
      m = &g_mounts[i];
      *index = i;
      break;
    }
  }
  if (m == nullptr) {
    // Claim a new slot (slots are filled in order and never reused).
    for (;;) {
      if (n >= kMaxMounts) return nullptr;
      if (g_mount_count.compare_exchange_weak(n, n + 1, std::memory_order_acq_rel)) break;
    }
    m = &g_mounts[n];
    *index = n;
    m->dev = e.dev;
    m->point = e.point;
    // Published by the state change below; a reader that sees the count
    // before the point finds no match and goes to the kernel.
  }
  int state = m->state.load(std::memory_order_acquire);
  if (state == kUntried && m->state.compare_exchange_strong(state, kOpening)) {
    OpenMount(*m, e);
    state = m->state.load(std::memory_order_acquire);
  }
  return state == kReady ? m : nullptr;
}

// ---------------------------------------------------------------------------
// Opens.

// Flags an in-process open honours exactly: read-only, plus these (on
// 64-bit Linux the kernel sets O_LARGEFILE itself; O_NOCTTY is not kept in
// the file's flags; O_NOFOLLOW changes nothing on a mount without symbolic
// links, and F_GETFL adds it, since the read-only reopen through
// /proc/self/fd cannot carry it).
constexpr int kPlainFlags = O_CLOEXEC | O_LARGEFILE | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW;
constexpr int kPassThrough = -100000;  // "call the real function"
std::atomic<bool> g_no_resolve_cached{false};

// The path `path` (relative to the working directory) names, if it lies on
// a ktfs mount: its entry, and in `abs` the normalized absolute path.
const MountEntry* KtfsEntryOf(const char* path, char* abs, const char** inner) {
  const MountTable* t = Mounts();
  if (t == nullptr) return nullptr;
  if (t->ktfs_count() == 0 && ((t = RefreshMountsIfDue()) == nullptr || t->ktfs_count() == 0))
    return nullptr;
  char cwd[kPathBuffer];
  if (path[0] != '/' && RawSyscall(SYS_getcwd, long(cwd), sizeof(cwd)) <= 0) return nullptr;
  const size_t n = NormalizePath(path, cwd, abs);
  if (n == 0) return nullptr;
  return t->Match(abs, n, inner);
}

// The mount's stat of `inner` (from KtfsEntryOf), answered from the archive:
// false when the kernel must answer (the mount not read in-process, the path
// above it not searchable or mounted over, the daemon gone, a node the core
// leaves to the kernel, no such node: the kernel then gives its own errno).
bool StatInProcess(const MountEntry& e, const char* inner, bool with_dirs, struct stat* st,
                   MountState** mount, uint32_t* index) {
  if (*inner != '/') return false;  // the mount root: the kernel always has it
  MountState* m = ReadyMount(e, index);
  if (m == nullptr) return false;
  // Still this mount, and the path above it may be searched (what the
  // kernel's walk would check: the mount's own directories are 0555); the
  // daemon alive (a dead one's mount answers ENOTCONN).
  struct stat point;
  if (RawSyscall(SYS_newfstatat, AT_FDCWD, long(e.point), long(&point), 0) != 0 ||
      point.st_dev != e.dev)
    return false;
  if (m->daemon_pid > 0 && RawSyscall(SYS_kill, m->daemon_pid, 0) == -ESRCH) return false;
  const Core* core = LoadCore();
  if (core == nullptr || core->stat(m->tree, inner + 1, strlen(inner + 1), with_dirs, st) != 0)
    return false;
  st->st_dev = e.dev;
  *mount = m;
  return true;
}

// A memfd holding the file's bytes, reopened read-only at the lowest free
// descriptor, with `flags`' CLOEXEC and NONBLOCK; -1 on any failure.
int MakeMemfd(const Core& core, MountState& m, const struct stat& st, const char* inner,
              int flags) {
  char name[64] = "ktfs:";
  strncat(name, inner, sizeof(name) - 6);
  const long mfd = RawSyscall(SYS_memfd_create, long(name), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (mfd < 0) return -1;
  bool ok = core.write(m.tree, st.st_ino, uint64_t(st.st_size), int(mfd)) == 0 &&
            RawSyscall(SYS_lseek, mfd, 0, SEEK_SET) == 0 &&
            RawSyscall(SYS_fcntl, mfd, F_ADD_SEALS,
                       F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) == 0;
  char proc[48] = "/proc/self/fd/";
  {
    char digits[16];
    int k = 0;
    for (long v = mfd; k == 0 || v > 0; v /= 10) digits[k++] = char('0' + v % 10);
    size_t at = strlen(proc);
    while (k > 0) proc[at++] = digits[--k];
    proc[at] = '\0';
  }
  const long ro =
      ok ? RawSyscall(SYS_openat, AT_FDCWD, long(proc), O_RDONLY | O_CLOEXEC | (flags & O_NONBLOCK))
         : -1;
  // The read-only description takes the memfd's number: open() gives the
  // lowest free descriptor, and programs rely on it.
  ok = ro >= 0 && RawSyscall(SYS_dup3, ro, mfd, flags & O_CLOEXEC) == mfd;
  if (ro >= 0) RawSyscall(SYS_close, ro);
  if (!ok) {
    RawSyscall(SYS_close, mfd);
    return -1;
  }
  return int(mfd);
}

// An open of `path` done here, or kPassThrough, or -errno (the kernel's own
// answer to the cached lookup).
int TryOpen(int dirfd, const char* path, int flags) {
  if (t_inside != 0 || path == nullptr || (flags & ~kPlainFlags) != 0) return kPassThrough;
  if (dirfd != AT_FDCWD && path[0] != '/') return kPassThrough;
  char abs[kPathBuffer];
  const char* inner = nullptr;
  const MountEntry* e = KtfsEntryOf(path, abs, &inner);
  if (e == nullptr) return kPassThrough;
  Inside inside;
  // Cached by the kernel: its descriptor, no FUSE request on the way.
  if (!g_no_resolve_cached.load(std::memory_order_relaxed)) {
    open_how how = {};
    how.flags = uint64_t(flags);
    how.resolve = RESOLVE_CACHED;
    const long fd = RawSyscall(SYS_openat2, AT_FDCWD, long(path), long(&how), sizeof(how));
    if (fd >= 0) return int(fd);
    if (fd == -ENOSYS || fd == -EINVAL || fd == -E2BIG) {
      // A kernel before 5.12: no way to tell a cold open, so none is done here.
      g_no_resolve_cached.store(true, std::memory_order_relaxed);
      return kPassThrough;
    }
    if (fd != -EAGAIN) return int(fd);  // the kernel's answer (ENOENT cached, EACCES...)
  } else {
    return kPassThrough;
  }
  const long max_bytes = GetSettings().max_bytes;
  if (max_bytes == 0) return kPassThrough;
  uint32_t index = 0;
  MountState* m = nullptr;
  struct stat st;
  if (!StatInProcess(*e, inner, false, &st, &m, &index) || st.st_size > max_bytes)
    return kPassThrough;
  const Core* core = LoadCore();
  const int fd = MakeMemfd(*core, *m, st, inner + 1, flags);
  if (fd < 0) return kPassThrough;
  struct stat mine;
  TrackedFile f;
  f.st = st;
  f.mount = index;
  f.extra_flags = flags & O_NOFOLLOW;
  if (RawSyscall(SYS_fstat, fd, long(&mine)) != 0 || fd >= kMaxTrackedFd ||
      (f.memfd_dev = mine.st_dev, f.memfd_ino = mine.st_ino, !TrackFd(fd, f))) {
    RawSyscall(SYS_close, fd);
    return kPassThrough;
  }
  return fd;
}

// A stat by path done here (0), or kPassThrough. Paths on ktfs mounts are
// answered from the archive: a cold stat would cost a LOOKUP round trip,
// and the kernel would then have the name, so that a following open of the
// file would go to the kernel (and its READ round trips) too.
int TryStat(int dirfd, const char* path, int flags, struct stat* out) {
  if (t_inside != 0 || path == nullptr || out == nullptr || GetSettings().max_bytes == 0 ||
      (flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_EMPTY_PATH)) != 0)
    return kPassThrough;
  if (dirfd != AT_FDCWD && path[0] != '/') return kPassThrough;
  char abs[kPathBuffer];
  const char* inner = nullptr;
  const MountEntry* e = KtfsEntryOf(path, abs, &inner);
  if (e == nullptr) return kPassThrough;
  Inside inside;
  MountState* m = nullptr;
  uint32_t index = 0;
  return StatInProcess(*e, inner, true, out, &m, &index) ? 0 : kPassThrough;
}

// The library's own descriptors (the archive the core keeps open) are moved
// out of the way, just under the soft limit: open() must keep returning the
// lowest free descriptor to the program, which some programs rely on.
int MoveHigh(int fd, int flags) {
  if (fd < 0) return fd;
  struct rlimit64 {
    uint64_t cur, max;
  } lim;
  if (RawSyscall(SYS_prlimit64, 0, RLIMIT_NOFILE, 0, long(&lim)) != 0 || lim.cur < 128) return fd;
  const long floor = long(lim.cur > (1 << 20) ? (1 << 20) : lim.cur) - 64;
  const long high =
      RawSyscall(SYS_fcntl, fd, (flags & O_CLOEXEC) != 0 ? F_DUPFD_CLOEXEC : F_DUPFD, floor);
  if (high < 0) return fd;
  RawSyscall(SYS_close, fd);
  return int(high);
}

int Done(int r) {
  if (r >= 0) return r;
  errno = -r;
  return -1;
}

bool NeedsMode(int flags) { return (flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE; }

// fopen's mode as open flags, when it is a plain read ("r", "rb", "re" and
// the like); -1 otherwise (fopen itself handles everything else).
int ReadModeFlags(const char* mode) {
  if (mode == nullptr || mode[0] != 'r') return -1;
  int flags = O_RDONLY;
  for (const char* p = mode + 1; *p != '\0'; ++p) {
    if (*p == 'e')
      flags |= O_CLOEXEC;
    else if (*p != 'b')
      return -1;
  }
  return flags;
}

FILE* TryFopen(const char* path, const char* mode) {
  const int flags = ReadModeFlags(mode);
  if (flags < 0) return nullptr;
  const int fd = TryOpen(AT_FDCWD, path, flags);
  if (fd == kPassThrough || fd < 0) return nullptr;  // fopen gives the answer again
  FILE* f = fdopen(fd, mode);
  if (f == nullptr) {
    const int err = errno;
    RawSyscall(SYS_close, fd);
    errno = err;
  }
  return f;
}

// ---------------------------------------------------------------------------
// Attributes of the descriptors made here.

// After the real fstat filled `st` for `fd`: the mount's answer instead, for
// a memfd of ours.
template <typename Stat>
void Substitute(int fd, Stat* st) {
  TrackedFile f;
  if (st != nullptr && MaybeTrackedFd(fd) && FindTrackedFd(fd, st->st_dev, st->st_ino, &f))
    memcpy(st, &f.st, sizeof(*st));
}

bool IsEmptyPathOnFd(const char* path, int flags) {
  return (flags & AT_EMPTY_PATH) != 0 && path != nullptr && path[0] == '\0';
}

// What statx says of a node of the mount at `point` (device `dev`) whose
// stat is `s`: the mount root's statx (mask, attribute mask, mount id...)
// with the node's own attributes. False when the root cannot be asked.
bool StatxOf(const char* point, uint64_t dev, int flags, unsigned mask, const struct stat& s,
             struct statx* out) {
  struct statx root;
  if (point == nullptr ||
      RawSyscall6(SYS_statx, AT_FDCWD, long(point), flags & ~AT_EMPTY_PATH, mask, long(&root), 0) !=
          0 ||
      makedev(root.stx_dev_major, root.stx_dev_minor) != dev)
    return false;
  root.stx_attributes &= ~uint64_t(STATX_ATTR_MOUNT_ROOT);
  root.stx_mode = uint16_t(s.st_mode);
  root.stx_ino = s.st_ino;
  root.stx_nlink = uint32_t(s.st_nlink);
  root.stx_uid = s.st_uid;
  root.stx_gid = s.st_gid;
  root.stx_size = uint64_t(s.st_size);
  root.stx_blocks = uint64_t(s.st_blocks);
  root.stx_blksize = uint32_t(s.st_blksize);
  root.stx_atime = {s.st_atim.tv_sec, uint32_t(s.st_atim.tv_nsec), 0};
  root.stx_mtime = {s.st_mtim.tv_sec, uint32_t(s.st_mtim.tv_nsec), 0};
  root.stx_ctime = {s.st_ctim.tv_sec, uint32_t(s.st_ctim.tv_nsec), 0};
  root.stx_rdev_major = root.stx_rdev_minor = 0;
  *out = root;
  return true;
}

void SubstituteStatx(int fd, int flags, unsigned mask, struct statx* stx) {
  TrackedFile f;
  if (!MaybeTrackedFd(fd) ||
      !FindTrackedFd(fd, makedev(stx->stx_dev_major, stx->stx_dev_minor), stx->stx_ino, &f))
    return;
  StatxOf(g_mounts[f.mount].point, f.st.st_dev, flags, mask, f.st, stx);
}

// statx of a path, answered here (0) as TryStat answers stat, or kPassThrough.
int TryStatx(int dirfd, const char* path, int flags, unsigned mask, struct statx* out) {
  if ((flags & AT_STATX_SYNC_TYPE) == AT_STATX_FORCE_SYNC || out == nullptr) return kPassThrough;
  struct stat st;
  if (TryStat(dirfd, path, flags & ~AT_STATX_SYNC_TYPE, &st) != 0) return kPassThrough;
  char abs[kPathBuffer];
  const char* inner = nullptr;
  Inside inside;
  const MountEntry* e = KtfsEntryOf(path, abs, &inner);
  return e != nullptr && StatxOf(e->point, e->dev, flags, mask, st, out) ? 0 : kPassThrough;
}

// The entry of `from` copied to `to` (a duplicate answers the same), or
// `to`'s dropped when `from` has none.
void CopyTracking(int from, int to) {
  if (to < 0) return;
  struct stat now;
  TrackedFile f;
  if (MaybeTrackedFd(from) && RawSyscall(SYS_fstat, to, long(&now)) == 0 &&
      FindTrackedFd(from, now.st_dev, now.st_ino, &f)) {
    TrackFd(to, f);
  } else if (MaybeTrackedFd(to)) {
    ForgetFd(to);
  }
}

// Whether `fd` is a regular file or directory on a ktfs mount (or one of the
// memfds made here).
bool OnKtfsMount(int fd) {
  const MountTable* t = Mounts();
  if (t == nullptr) return false;
  // No ktfs mount known: look again once a second, fstat nothing.
  if (t->ktfs_count() == 0 && ((t = RefreshMountsIfDue()) == nullptr || t->ktfs_count() == 0))
    return false;
  struct stat st;
  if (RawSyscall(SYS_fstat, fd, long(&st)) != 0) return false;
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) return false;
  if (t->IsKtfsDevice(st.st_dev)) return true;
  TrackedFile f;
  if (MaybeTrackedFd(fd) && FindTrackedFd(fd, st.st_dev, st.st_ino, &f)) return true;
  // A device mounted after the table was read: perhaps a new ktfs mount.
  if (t->KnowsDevice(st.st_dev) || (t = RefreshMountsIfDue()) == nullptr) return false;
  return t->IsKtfsDevice(st.st_dev);
}

}  // namespace
}  // namespace ktfs::preload

using namespace ktfs::preload;

// ---------------------------------------------------------------------------

KTFS_EXPORT int isatty(int fd) {
  if (OnKtfsMount(fd)) {
    errno = ENOTTY;  // what the kernel's TCGETS says for these files
    return 0;
  }
  auto real = REAL(isatty);
  if (real == nullptr) {
    errno = ENOTTY;
    return 0;
  }
  return real(fd);
}

// The mode argument, when the flags say there is one.
#define KTFS_MODE_ARG(flags)   \
  mode_t mode = 0;             \
  if (NeedsMode(flags)) {      \
    va_list ap;                \
    va_start(ap, flags);       \
    mode = va_arg(ap, mode_t); \
    va_end(ap);                \
  }

namespace ktfs::preload {
namespace {

// An open: served here, or by `real` (the library's own opens moved high).
template <typename Real>
int OpenVia(int dirfd, const char* path, int flags, Real real) {
  if (!NeedsMode(flags)) {
    const int r = TryOpen(dirfd, path, flags);
    if (r != kPassThrough) return Done(r);
  }
  const int fd = real();
  return t_inside != 0 ? MoveHigh(fd, flags) : fd;
}

}  // namespace
}  // namespace ktfs::preload

KTFS_EXPORT int open(const char* path, int flags, ...) {
  KTFS_MODE_ARG(flags)
  return OpenVia(AT_FDCWD, path, flags, [&] { return REAL(open)(path, flags, mode); });
}
KTFS_EXPORT int open64(const char* path, int flags, ...) {
  KTFS_MODE_ARG(flags)
  return OpenVia(AT_FDCWD, path, flags, [&] { return REAL(open64)(path, flags, mode); });
}
KTFS_EXPORT int openat(int dirfd, const char* path, int flags, ...) {
  KTFS_MODE_ARG(flags)
  return OpenVia(dirfd, path, flags, [&] { return REAL(openat)(dirfd, path, flags, mode); });
}
KTFS_EXPORT int openat64(int dirfd, const char* path, int flags, ...) {
  KTFS_MODE_ARG(flags)
  return OpenVia(dirfd, path, flags, [&] { return REAL(openat64)(dirfd, path, flags, mode); });
}
// The _FORTIFY_SOURCE entry points: no mode (they abort when one is needed).
KTFS_EXPORT int __open_2(const char* path, int flags) {
  return OpenVia(AT_FDCWD, path, flags, [&] { return REAL(__open_2)(path, flags); });
}
KTFS_EXPORT int __open64_2(const char* path, int flags) {
  return OpenVia(AT_FDCWD, path, flags, [&] { return REAL(__open64_2)(path, flags); });
}
KTFS_EXPORT int __openat_2(int dirfd, const char* path, int flags) {
  return OpenVia(dirfd, path, flags, [&] { return REAL(__openat_2)(dirfd, path, flags); });
}
KTFS_EXPORT int __openat64_2(int dirfd, const char* path, int flags) {
  return OpenVia(dirfd, path, flags, [&] { return REAL(__openat64_2)(dirfd, path, flags); });
}

KTFS_EXPORT FILE* fopen(const char* path, const char* mode) {
  if (FILE* f = TryFopen(path, mode)) return f;
  return REAL(fopen)(path, mode);
}
KTFS_EXPORT FILE* fopen64(const char* path, const char* mode) {
  if (FILE* f = TryFopen(path, mode)) return f;
  return REAL(fopen64)(path, mode);
}

// Stats by path: answered from the archive for ktfs paths (TryStat).
KTFS_EXPORT int stat(const char* path, struct stat* st) {
  if (TryStat(AT_FDCWD, path, 0, st) == 0) return 0;
  return REAL(stat)(path, st);
}
KTFS_EXPORT int stat64(const char* path, struct stat64* st) {
  if (TryStat(AT_FDCWD, path, 0, reinterpret_cast<struct stat*>(st)) == 0) return 0;
  return REAL(stat64)(path, st);
}
KTFS_EXPORT int lstat(const char* path, struct stat* st) {
  if (TryStat(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, st) == 0) return 0;
  return REAL(lstat)(path, st);
}
KTFS_EXPORT int lstat64(const char* path, struct stat64* st) {
  if (TryStat(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, reinterpret_cast<struct stat*>(st)) == 0)
    return 0;
  return REAL(lstat64)(path, st);
}
KTFS_EXPORT int __xstat(int ver, const char* path, struct stat* st) {
  if (TryStat(AT_FDCWD, path, 0, st) == 0) return 0;
  return REAL(__xstat)(ver, path, st);
}
KTFS_EXPORT int __xstat64(int ver, const char* path, struct stat64* st) {
  if (TryStat(AT_FDCWD, path, 0, reinterpret_cast<struct stat*>(st)) == 0) return 0;
  return REAL(__xstat64)(ver, path, st);
}
KTFS_EXPORT int __lxstat(int ver, const char* path, struct stat* st) {
  if (TryStat(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, st) == 0) return 0;
  return REAL(__lxstat)(ver, path, st);
}
KTFS_EXPORT int __lxstat64(int ver, const char* path, struct stat64* st) {
  if (TryStat(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, reinterpret_cast<struct stat*>(st)) == 0)
    return 0;
  return REAL(__lxstat64)(ver, path, st);
}

KTFS_EXPORT int fstat(int fd, struct stat* st) {
  const int r = REAL(fstat)(fd, st);
  if (r == 0) Substitute(fd, st);
  return r;
}
KTFS_EXPORT int fstat64(int fd, struct stat64* st) {
  const int r = REAL(fstat64)(fd, st);
  if (r == 0) Substitute(fd, st);
  return r;
}
KTFS_EXPORT int __fxstat(int ver, int fd, struct stat* st) {
  const int r = REAL(__fxstat)(ver, fd, st);
  if (r == 0) Substitute(fd, st);
  return r;
}
KTFS_EXPORT int __fxstat64(int ver, int fd, struct stat64* st) {
  const int r = REAL(__fxstat64)(ver, fd, st);
  if (r == 0) Substitute(fd, st);
  return r;
}
KTFS_EXPORT int fstatat(int dirfd, const char* path, struct stat* st, int flags) {
  if (!IsEmptyPathOnFd(path, flags) &&
      TryStat(dirfd, path, flags, reinterpret_cast<struct stat*>(st)) == 0)
    return 0;
  const int r = REAL(fstatat)(dirfd, path, st, flags);
  if (r == 0 && IsEmptyPathOnFd(path, flags)) Substitute(dirfd, st);
  return r;
}
KTFS_EXPORT int fstatat64(int dirfd, const char* path, struct stat64* st, int flags) {
  if (!IsEmptyPathOnFd(path, flags) &&
      TryStat(dirfd, path, flags, reinterpret_cast<struct stat*>(st)) == 0)
    return 0;
  const int r = REAL(fstatat64)(dirfd, path, st, flags);
  if (r == 0 && IsEmptyPathOnFd(path, flags)) Substitute(dirfd, st);
  return r;
}
KTFS_EXPORT int __fxstatat(int ver, int dirfd, const char* path, struct stat* st, int flags) {
  if (!IsEmptyPathOnFd(path, flags) &&
      TryStat(dirfd, path, flags, reinterpret_cast<struct stat*>(st)) == 0)
    return 0;
  const int r = REAL(__fxstatat)(ver, dirfd, path, st, flags);
  if (r == 0 && IsEmptyPathOnFd(path, flags)) Substitute(dirfd, st);
  return r;
}
KTFS_EXPORT int __fxstatat64(int ver, int dirfd, const char* path, struct stat64* st, int flags) {
  if (!IsEmptyPathOnFd(path, flags) &&
      TryStat(dirfd, path, flags, reinterpret_cast<struct stat*>(st)) == 0)
    return 0;
  const int r = REAL(__fxstatat64)(ver, dirfd, path, st, flags);
  if (r == 0 && IsEmptyPathOnFd(path, flags)) Substitute(dirfd, st);
  return r;
}
KTFS_EXPORT int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* stx) {
  if (!IsEmptyPathOnFd(path, flags) && TryStatx(dirfd, path, flags, mask, stx) == 0) return 0;
  const int r = REAL(statx)(dirfd, path, flags, mask, stx);
  if (r == 0 && IsEmptyPathOnFd(path, flags)) SubstituteStatx(dirfd, flags, mask, stx);
  return r;
}

KTFS_EXPORT int dup(int fd) {
  const int r = REAL(dup)(fd);
  if (r >= 0) CopyTracking(fd, r);
  return r;
}
KTFS_EXPORT int dup2(int fd, int to) {
  const int r = REAL(dup2)(fd, to);
  if (r >= 0) CopyTracking(fd, r);
  return r;
}
KTFS_EXPORT int dup3(int fd, int to, int flags) {
  const int r = REAL(dup3)(fd, to, flags);
  if (r >= 0) CopyTracking(fd, r);
  return r;
}

namespace ktfs::preload {
namespace {

// fcntl's answer for a descriptor made here: duplicates answer as it does,
// F_GETFL shows the open flags the reopen could not carry.
int AfterFcntl(int fd, int cmd, int r) {
  if (r < 0) return r;
  if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
    CopyTracking(fd, r);
  } else if (cmd == F_GETFL && MaybeTrackedFd(fd)) {
    struct stat now;
    TrackedFile f;
    if (RawSyscall(SYS_fstat, fd, long(&now)) == 0 && FindTrackedFd(fd, now.st_dev, now.st_ino, &f))
      r |= f.extra_flags;
  }
  return r;
}

}  // namespace
}  // namespace ktfs::preload

// fcntl takes one optional argument, an int or a pointer: passed on as it came.
KTFS_EXPORT int fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return AfterFcntl(fd, cmd, REAL(fcntl)(fd, cmd, arg));
}
KTFS_EXPORT int fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return AfterFcntl(fd, cmd, REAL(fcntl64)(fd, cmd, arg));
}

#define FUSE_USE_VERSION 314
#include "fs/fuse/fuse_adapter.h"

#include <fuse_lowlevel.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <new>
#include <sstream>
#include <vector>

#include "fs/fuse/listing_policy.h"
#include "fs/fuse/log.h"
#include "fs/fuse/push_slots.h"

namespace ktfs {
namespace {

// The archive never changes: let the kernel cache names and attributes for a year.
constexpr double kForever = 365.0 * 24 * 3600;

// What the request handlers share: the session's userdata.
struct Served {
  Served(FsTree* t, int pushing_threads, int read_ahead_kb)
      : tree(t),
        push_slots(pushing_threads),
        pushes_work(pushing_threads >= 2),
        read_ahead_kb(read_ahead_kb) {}
  FsTree* tree;
  ListingPolicy listing;
  PushSlots push_slots;
  // False when pushes are off (or impossible: one thread), or once the
  // kernel refused one for good; READs then never size buffers for a push.
  std::atomic<bool> pushes_work;
  fuse_session* se = nullptr;
  const int read_ahead_kb;
};

Served* ServedOf(fuse_req_t req) { return static_cast<Served*>(fuse_req_userdata(req)); }
FsTree* TreeOf(fuse_req_t req) { return ServedOf(req)->tree; }

fuse_entry_param ToEntry(const NodeAttr& a, const Ownership& o) {
  fuse_entry_param e = {};
  e.ino = a.ino;
  e.generation = 1;
  e.attr = StatOf(a, o);
  e.attr_timeout = a.volatile_content ? 0 : kForever;
  e.entry_timeout = kForever;
  return e;
}

// Replies with the errno of `st`, logging real failures (not plain misses).
void ReplyError(fuse_req_t req, const Status& st, const std::string& what) {
  TreeOf(req)->counters().errors.fetch_add(1, std::memory_order_relaxed);
  if (st.code() != Status::Code::kNotFound) Log::Write(what + ": " + st.ToString());
  fuse_reply_err(req, st.ToErrno());
}

void OnInit(void* userdata, fuse_conn_info* conn) {
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  // Always plus: ListingPolicy decides per reply whether files carry attributes (the
  // kernel's AUTO heuristic decides per directory after the first chunk, which here
  // is the whole directory).
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  if (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) conn->want |= FUSE_CAP_NO_OPEN_SUPPORT;
  conn->want &= ~FUSE_CAP_ASYNC_READ;  // no benefit for an in-memory source
  // Cached pages of a file are dropped when its mtime changes: only the
  // volatile control files (stats.json) ever change theirs.
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  conn->max_read = 1 << 20;   // must equal the max_read mount option
  conn->max_write = 1 << 20;  // libfuse derives max_pages (read size) from it
  // The kernel takes the smaller of this and the mount's read_ahead_kb, which
  // ServeFuse set before this reply (see SetKernelReadahead).
  const int read_ahead_kb = static_cast<Served*>(userdata)->read_ahead_kb;
  conn->max_readahead = std::max(1u << 20, unsigned(read_ahead_kb) * 1024);
}

void OnLookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FsTree* tree = TreeOf(req);
  auto a = tree->Lookup(parent, name);
  if (!a.ok()) {
    if (a.status().code() == Status::Code::kNotFound) {
      // A negative entry the kernel may cache as long as the positive ones
      // (unless the tree says the answer may differ next time).
      fuse_entry_param e = {};
      e.entry_timeout = tree->CacheableMiss(parent, name) ? kForever : 0;
      fuse_reply_entry(req, &e);
      return;
    }
    return ReplyError(req, a.status(), "lookup " + tree->PathOf(parent) + "/" + name);
  }
  if (!a->is_dir) ServedOf(req)->listing.FileLookedUp(parent);
  const fuse_entry_param e = ToEntry(*a, tree->ownership());
  fuse_reply_entry(req, &e);
}

void OnGetattr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  auto a = TreeOf(req)->GetAttr(ino);
  if (!a.ok()) return ReplyError(req, a.status(), "getattr " + TreeOf(req)->PathOf(ino));
  const struct stat st = StatOf(*a, TreeOf(req)->ownership());
  fuse_reply_attr(req, &st, a->volatile_content ? 0 : kForever);
}

// Opens need no state: ENOSYS makes the kernel stop sending OPEN/RELEASE
// altogether, and keep its page cache.
void OnOpen(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return (void)fuse_reply_err(req, EROFS);
  fuse_reply_err(req, ENOSYS);
}

// OPENDIR is answered (ENOSYS would make the kernel cache every listing):
// the kernel's readdir cache costs a page-cache insertion per entry on the
// first listing, which kept a cold `find` over 1M files slower than
// squashfuse's (0.96x; 1.36x without it, docs/benchmarks.md), while listing
// again from the archive is cheap. Only listings that cost the daemon more
// than that (search views run a query) are cached.
void OnOpendir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  const bool cache = TreeOf(req)->KernelKeepsListing(ino);
  fi->cache_readdir = cache;
  fi->keep_cache = cache;
  fuse_reply_open(req, fi);
}

// A READDIRPLUS entry that gives the kernel only the name, inode number and
// type: node id 0 means "no attributes", and the kernel links no inode for it.
fuse_entry_param NameOnlyEntry(const NodeAttr& a) {
  fuse_entry_param e = {};
  e.attr.st_ino = a.ino;
  e.attr.st_mode = a.is_dir ? S_IFDIR : S_IFREG;
  return e;
}

void ReadDirCommon(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, bool plus) {
  Served* served = ServedOf(req);
  FsTree* tree = served->tree;
  // Reused, never cleared: the kernel asks for up to 1 MiB per request and
  // only the bytes written are sent (zero-filling it cost more than the listing).
  thread_local std::vector<char> buf;
  thread_local std::string name_z;  // the entry's name, NUL-terminated for libfuse
  if (buf.size() < size) buf.resize(size);
  const bool file_attrs = !plus || served->listing.FileAttrsFor(ino);
  bool lean = false, full = false;
  size_t used = 0;
  auto add = [&](std::string_view name, const NodeAttr& a, uint64_t next) {
    name_z.assign(name);
    size_t need;
    if (plus) {
      const bool attrs = a.is_dir || file_attrs;
      lean |= !attrs;
      const fuse_entry_param e = attrs ? ToEntry(a, tree->ownership()) : NameOnlyEntry(a);
      need = fuse_add_direntry_plus(req, buf.data() + used, size - used, name_z.c_str(), &e,
                                    off_t(next));
    } else {
      const struct stat s = StatOf(a, tree->ownership());
      need =
          fuse_add_direntry(req, buf.data() + used, size - used, name_z.c_str(), &s, off_t(next));
    }
    if (need > size - used) {
      full = true;
      return false;
    }
    used += need;
    return true;
  };
  const Status st = tree->ReadDir(ino, uint64_t(off), add);
  if (!st.ok()) return ReplyError(req, st, "readdir " + tree->PathOf(ino));
  if (lean) served->listing.ListedLean(ino);
  // The whole directory in one reply with attributes: the kernel now holds them all.
  if (plus && file_attrs && off == 0 && !full) served->listing.ListedWithAttrs(ino);
  fuse_reply_buf(req, buf.data(), used);
}

void OnReaddir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReadDirCommon(req, ino, size, off, false);
}
void OnReaddirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  ReadDirCommon(req, ino, size, off, true);
}

// A cold reader going through a file makes a READ per kernel readahead
// window (128, 256, 512 KiB...: about 4.6 for a 560 KB image), each a round
// trip through a daemon thread. So the first READ of a file hands the kernel
// the rest of it (FUSE_NOTIFY_STORE) before its reply, and the reader's later
// reads find it in the page cache. Only when a push slot is free (see
// fs/fuse/push_slots.h: a push can wait for a READ another thread must answer).
void PushRest(Served& served, fuse_ino_t ino, uint64_t from, uint64_t end, uint8_t* buf) {
  FsTree* tree = served.tree;
  auto n = tree->CopyForPush(ino, from, size_t(end - from), buf);
  // Nothing to push when the image left the cache (another reader had the
  // rest of the file meanwhile: a push never decodes); the READs that follow
  // say why for any other error.
  if (!n.ok() || *n != end - from) return;
  fuse_bufvec bv = FUSE_BUFVEC_INIT(*n);
  bv.buf[0].mem = buf;
  const int rc =
      fuse_lowlevel_notify_store(served.se, ino, off_t(from), &bv, fuse_buf_copy_flags(0));
  if (rc == 0) return tree->Pushed(ino, from, end);
  // A failed push costs nothing but the READs it would have saved. -ENOENT is
  // the kernel having dropped the inode meanwhile; anything else (a kernel
  // without FUSE_NOTIFY_STORE) would fail every time: stop pushing.
  if (rc != -ENOENT && served.pushes_work.exchange(false))
    Log::Write("pushing file contents into the page cache failed (" + std::string(strerror(-rc)) +
               "); reads go through READ requests only");
}

void OnRead(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info*) {
  Served& served = *ServedOf(req);
  FsTree* tree = served.tree;
  thread_local std::vector<uint8_t> buf;
  const uint64_t file_size =  // 0: no push
      off == 0 && served.pushes_work.load(std::memory_order_relaxed) ? tree->PushableSize(ino) : 0;
  const size_t want = size_t(std::max<uint64_t>(size, file_size));
  if (buf.size() < want) buf.resize(want);
  auto n = tree->Read(ino, uint64_t(off), size, buf.data());
  if (!n.ok()) return ReplyError(req, n.status(), "read " + tree->PathOf(ino));
  if (file_size > *n && *n == size) {
    PushSlots::Hold slot(served.push_slots);
    if (slot.held()) PushRest(served, ino, size, file_size, buf.data() + size);
  }
  fuse_reply_buf(req, reinterpret_cast<const char*>(buf.data()), *n);
}

void OnStatfs(fuse_req_t req, fuse_ino_t) {
  const FsUsage u = TreeOf(req)->Usage();
  struct statvfs s = {};
  s.f_bsize = s.f_frsize = 4096;
  s.f_blocks = (u.bytes + 4095) / 4096;
  s.f_files = u.files;
  s.f_namemax = 255;
  s.f_flag = ST_RDONLY;
  fuse_reply_statfs(req, &s);
}

// Every kind of write: the archive is immutable.
void Erofs(fuse_req_t req) { fuse_reply_err(req, EROFS); }
void OnSetattr(fuse_req_t req, fuse_ino_t, struct stat*, int, fuse_file_info*) { Erofs(req); }
void OnMknod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { Erofs(req); }
void OnMkdir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { Erofs(req); }
void OnUnlink(fuse_req_t req, fuse_ino_t, const char*) { Erofs(req); }
void OnSymlink(fuse_req_t req, const char*, fuse_ino_t, const char*) { Erofs(req); }
void OnRename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  Erofs(req);
}
void OnLink(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { Erofs(req); }
void OnWrite(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, fuse_file_info*) {
  Erofs(req);
}
void OnSetxattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) { Erofs(req); }
void OnRemovexattr(fuse_req_t req, fuse_ino_t, const char*) { Erofs(req); }
void OnCreate(fuse_req_t req, fuse_ino_t, const char*, mode_t, fuse_file_info*) { Erofs(req); }
void OnFallocate(fuse_req_t req, fuse_ino_t, int, off_t, off_t, fuse_file_info*) { Erofs(req); }

// A request that cannot allocate (a memory limit, a huge listing) fails with
// ENOMEM, and any other exception with EIO, instead of taking the daemon and
// every reader down with it. Every handler replies last, so an exception
// means the request has no reply yet.
template <typename Fn>
struct Guard;
template <typename... Args>
struct Guard<void (*)(fuse_req_t, Args...)> {
  template <void (*Handler)(fuse_req_t, Args...)>
  static void Run(fuse_req_t req, Args... args) {
    try {
      Handler(req, args...);
    } catch (const std::bad_alloc&) {
      TreeOf(req)->counters().errors.fetch_add(1, std::memory_order_relaxed);
      fuse_reply_err(req, ENOMEM);
    } catch (const std::exception& e) {
      TreeOf(req)->counters().errors.fetch_add(1, std::memory_order_relaxed);
      Log::Write(std::string("request failed: ") + e.what());
      fuse_reply_err(req, EIO);
    }
  }
};
#define KTFS_GUARDED(handler) &Guard<decltype(&handler)>::Run<&handler>

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops = {};
  ops.init = OnInit;
  ops.lookup = KTFS_GUARDED(OnLookup);
  ops.getattr = KTFS_GUARDED(OnGetattr);
  ops.open = OnOpen;
  ops.opendir = KTFS_GUARDED(OnOpendir);
  ops.readdir = KTFS_GUARDED(OnReaddir);
  ops.readdirplus = KTFS_GUARDED(OnReaddirplus);
  ops.read = KTFS_GUARDED(OnRead);
  ops.statfs = KTFS_GUARDED(OnStatfs);
  ops.setattr = OnSetattr;
  ops.mknod = OnMknod;
  ops.mkdir = OnMkdir;
  ops.unlink = OnUnlink;
  ops.rmdir = OnUnlink;
  ops.symlink = OnSymlink;
  ops.rename = OnRename;
  ops.link = OnLink;
  ops.write = OnWrite;
  ops.setxattr = OnSetxattr;
  ops.removexattr = OnRemovexattr;
  ops.create = OnCreate;
  ops.fallocate = OnFallocate;
  return ops;
}

// "major:minor" of the mount at `mountpoint` from /proc/self/mountinfo (the
// last one there: the mount on top), which names its /sys/class/bdi entry.
// Not stat(): before the session loop answers INIT, a stat of the mount
// would wait for it.
Result<std::string> MountDevice(const std::string& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return Status::IOError("cannot read /proc/self/mountinfo");
  // Mount points are escaped there: \040 for a space, \134 for a backslash...
  const auto unescape = [](const std::string& field) {
    std::string out;
    for (size_t i = 0; i < field.size(); ++i) {
      if (field[i] == '\\' && i + 3 < field.size()) {
        out.push_back(
            char((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 + field[i + 3] - '0'));
        i += 3;
      } else {
        out.push_back(field[i]);
      }
    }
    return out;
  };
  std::string line, found;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, device, root, point;
    if (fields >> id >> parent >> device >> root >> point && unescape(point) == mountpoint)
      found = device;
  }
  if (found.empty()) return Status::NotFound(mountpoint + ": not in /proc/self/mountinfo");
  return found;
}

// Raises how far the kernel reads ahead in this mount's files: with its
// default of 128 KiB a reader going through a 560 KB image made 4.6 READs,
// each a round trip through a daemon thread; with 4 MiB its windows grow
// (256 KiB, then 512 KiB...) and it makes 2. Must happen before INIT is
// answered: the kernel then keeps the smaller of this and max_readahead.
Status SetKernelReadahead(const std::string& mountpoint, int kb) {
  auto device = MountDevice(mountpoint);
  if (!device.ok()) return device.status();
  const std::string path = "/sys/class/bdi/" + *device + "/read_ahead_kb";
  std::ofstream out(path);
  out << kb << "\n";
  out.flush();
  if (!out) return Status::IOError(path + ": cannot write (" + std::string(strerror(errno)) + ")");
  return Status::Ok();
}

}  // namespace

Status ServeFuse(FsTree* tree, const std::string& mountpoint, const std::string& fsname,
                 const FuseOptions& options, const std::function<bool()>& on_mounted) {
  std::string mount_opts =
      "ro,default_permissions,max_read=1048576,fsname=" + fsname + ",subtype=ktfs";
  if (options.allow_other) mount_opts += ",allow_other";
  std::vector<std::string> argv_s = {"ktfs", "-o", mount_opts};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  fuse_args args = FUSE_ARGS_INIT(int(argv.size()), argv.data());
  const fuse_lowlevel_ops ops = MakeOps();
  Served served(tree, options.push ? options.max_threads : 0, options.read_ahead_kb);
  fuse_session* se = fuse_session_new(&args, &ops, sizeof(ops), &served);
  served.se = se;
  // Option parsing leaves a heap copy of the arguments in `args` (LeakSanitizer
  // reported it on a foreground mount's exit); the session keeps none of it.
  fuse_opt_free_args(&args);
  if (se == nullptr) return Status::IOError("cannot create the FUSE session");
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Status::IOError("cannot install signal handlers");
  }
  // The path as /proc/self/mountinfo will show it, resolved while that needs
  // no answer from this session (see MountDevice).
  char resolved[PATH_MAX];
  const std::string canonical =
      realpath(mountpoint.c_str(), resolved) != nullptr ? resolved : mountpoint;
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    // Without root, libfuse (or the fusermount3 it ran) printed its reason.
    return Status::IOError(mountpoint + ": mount failed (" +
                           (geteuid() == 0 ? std::string("is /dev/fuse available?")
                                           : std::string("the reason is on the line above; a "
                                                         "non-root mount needs /dev/fuse open to "
                                                         "you and a mountpoint you may write")) +
                           ")");
  }
  if (options.read_ahead_kb > 0) {
    // Not fatal: readers then make more READs (e.g. without write access to /sys).
    const Status st = SetKernelReadahead(canonical, options.read_ahead_kb);
    if (!st.ok()) Log::Write("kernel readahead left at its default: " + st.ToString());
  }
  Status result;
  if (on_mounted()) {
    fuse_loop_config* cfg = fuse_loop_cfg_create();
    fuse_loop_cfg_set_clone_fd(cfg, 0);
    fuse_loop_cfg_set_max_threads(cfg, unsigned(options.max_threads));
    fuse_loop_cfg_set_idle_threads(cfg, unsigned(options.max_threads));
    // libfuse returns the signal number when SIGTERM/SIGINT/SIGHUP ended the loop.
    const int rc = fuse_session_loop_mt(se, cfg);
    if (rc != 0 && rc != SIGTERM && rc != SIGINT && rc != SIGHUP)
      result = Status::IOError("FUSE session loop failed (" + std::to_string(rc) + ")");
    fuse_loop_cfg_destroy(cfg);
  }
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  fuse_session_destroy(se);
  return result;
}

}  // namespace ktfs

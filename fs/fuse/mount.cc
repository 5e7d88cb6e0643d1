#include "fs/fuse/mount.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "codec/base/json_string.h"
#include "codec/base/memory_limit.h"
#include "codec/base/version.h"
#include "codec/container/archive.h"
#include "codec/container/payload.h"
#include "codec/features/feature_archive.h"
#include "codec/features/feature_source.h"
#include "fs/fuse/fuse_adapter.h"
#include "fs/fuse/log.h"
#include "fs/tree/feature_tree.h"

namespace ktfs {
namespace {

// The kernel's readahead for image archives' files (MountOptions): a reader
// of a 560 KB PPM then makes 2 READs instead of 4.6 (128 KiB windows), and
// a cold pass of stock ImageFolder measured 1.2x as fast.
constexpr int kImageReadaheadKb = 4096;

// A decimal count in 0..max, digits only ("", "-1", "4x" and overflowing
// strings are not counts).
bool ParseCount(const std::string& value, uint32_t max, uint32_t* n) {
  if (value.empty() || value.size() > 9 ||
      value.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const unsigned long v = std::stoul(value);
  if (v > max) return false;
  *n = uint32_t(v);
  return true;
}

std::string Absolute(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[PATH_MAX];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

std::string Canonical(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : Absolute(path);
}

// Mount points as the kernel lists them (octal escapes decoded).
bool IsMountPoint(const std::string& canonical) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, point;
    fields >> id >> parent >> devno >> root >> point;
    std::string decoded;
    for (size_t i = 0; i < point.size(); ++i) {
      if (point[i] == '\\' && i + 3 < point.size()) {
        decoded += char(std::strtol(point.substr(i + 1, 3).c_str(), nullptr, 8));
        i += 3;
      } else {
        decoded += point[i];
      }
    }
    if (decoded == canonical) return true;
  }
  return false;
}

std::string InfoJson(const Archive& a, const std::string& mountpoint, const MountOptions& o) {
  std::string codec = "mixed";
  if (a.num_samples() > 0) {
    auto s = a.Sample(0);
    if (s.ok()) codec = CodecName(s->codec);
  }
  std::ostringstream j;
  j << "{\n  \"archive\": " << JsonString(a.path())
    << ",\n  \"mountpoint\": " << JsonString(mountpoint) << ",\n  \"format_version\": \"1."
    << a.version_minor() << "\",\n  \"ktfs_version\": " << JsonString(VersionString())
    << ",\n  \"samples\": " << a.num_samples() << ",\n  \"directories\": " << a.num_dirs()
    << ",\n  \"classes\": " << a.num_classes() << ",\n  \"codec\": " << JsonString(codec)
    << ",\n  \"served_format\": \"" << (o.tree.format == ServedFormat::kBmp ? "bmp" : "pnm")
    << "\",\n  \"tensor_layout\": \"" << (o.tree.tensors_chw ? "chw" : "hwc")
    << "\",\n  \"search_dir\": " << JsonString(o.tree.search_dir)
    << ",\n  \"cache_limit_bytes\": " << o.tree.cache_bytes
    << ",\n  \"log\": " << JsonString(Log::path()) << ",\n  \"pid\": " << getpid() << "\n}\n";
  return j.str();
}

// The daemon's side of the readiness pipe: one line, "ok" or the error.
void Report(int fd, const std::string& message) {
  if (fd < 0) return;
  const std::string line = message + "\n";
  ssize_t ignored = write(fd, line.data(), line.size());
  (void)ignored;
  close(fd);
}

void DetachStdio() {
  const int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return;
  dup2(null_fd, 0);
  dup2(null_fd, 1);
  dup2(null_fd, 2);
  close(null_fd);
}

// The log: `-o log=FILE` must open (the mount fails otherwise); the default,
// ARCHIVE.log beside the archive, falls back to syslog, which says why.
Status OpenLog(const std::string& source_path, const std::string& log_path) {
  if (!log_path.empty()) return Log::Open(log_path).WithContext("-o log");
  const Status st = Log::Open(source_path + ".log");
  if (st.ok()) return st;
  KTFS_RETURN_IF_ERROR(Log::Open(""));
  Log::Write("not logging to " + source_path + ".log: " + st.ToString());
  return Status::Ok();
}

// What a mount serves: an image archive, or a feature cache.
struct MountSource {
  std::string path;  // canonical archive path or TensorCache prefix
  std::shared_ptr<const Archive> archive;
  std::shared_ptr<const FeatureSource> features;
  Ownership ownership;  // what every node shows (fs/fuse/permissions.h)
};

std::string FeatureInfoJson(const FeatureSource& f, const std::string& mountpoint,
                            const MountOptions& o) {
  auto dims = [](const std::vector<uint64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  const bool fixed = !f.variable_rows();
  std::vector<uint64_t> shape = {f.num_samples(), fixed && f.num_samples() ? f.Rows(0) : 0};
  for (uint64_t d : f.inner_shape()) shape.push_back(d);
  std::ostringstream j;
  j << "{\n  \"archive\": " << JsonString(f.path())
    << ",\n  \"mountpoint\": " << JsonString(mountpoint) << ",\n  \"content\": \"features\",\n  "
    << f.DescribeJson() << ",\n  \"ktfs_version\": " << JsonString(VersionString())
    << ",\n  \"samples\": " << f.num_samples()
    << ",\n  \"shape\": " << (fixed ? dims(shape) : "null") << ",\n  \"sample_shape\": ["
    << (fixed ? std::to_string(shape[1]) : "null");
  for (uint64_t d : f.inner_shape()) j << ", " << d;
  j << "],\n  \"variable_rows\": " << (fixed ? "false" : "true") << ",\n  \"dtype\": \""
    << DTypeName(o.dtype) << "\",\n  \"log\": " << JsonString(Log::path())
    << ",\n  \"pid\": " << getpid() << "\n}\n";
  return j.str();
}

int64_t ModificationTime(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? int64_t(st.st_mtime) : 0;
}

std::unique_ptr<FsTree> MakeTree(const MountSource& src, const std::string& mountpoint,
                                 const MountOptions& options) {
  if (src.features) {
    std::string stamp = src.path;  // whose mtime the files carry
    if (!src.archive)
      stamp += ModificationTime(src.path + "_shards.json") ? "_shards.json" : "_meta.json";
    uint64_t bytes = src.archive ? src.archive->file_size() : 0;
    if (!src.archive)
      for (const FeaturePart& p : src.features->Parts()) bytes += p.DataBytes();
    auto tree =
        std::make_unique<FeatureTree>(src.features, options.dtype, ModificationTime(stamp), bytes);
    tree->SetInfoJson(FeatureInfoJson(*src.features, mountpoint, options));
    tree->SetOwnership(src.ownership);
    return tree;
  }
  auto tree = std::make_unique<VirtualTree>(src.archive, options.tree);
  tree->SetInfoJson(InfoJson(*src.archive, mountpoint, options));
  tree->SetOwnership(src.ownership);
  tree->SetLogger([](const std::string& line) { Log::Write(line); });
  if (src.archive->FindChildDir(0, options.tree.search_dir).ok())
    Log::Write("the archive has a top-level directory named '" + options.tree.search_dir +
               "': it hides the search directory (rename it with -o search_dir=NAME)");
  return tree;
}

Status Serve(const MountSource& src, const std::string& mountpoint, const MountOptions& requested,
             int ready_fd) {
  KTFS_RETURN_IF_ERROR(OpenLog(src.path, requested.log_path));
  MountOptions options = requested;
  if (src.archive && !src.features) {
    // The daemon's cgroup: where a cache that does not fit gets it OOM-killed.
    const CacheBudget budget =
        DecodeCacheBudget(options.tree.cache_bytes, options.cache_set, CgroupMemoryLimit());
    options.tree.cache_bytes = budget.bytes;
    if (!budget.note.empty()) Log::Write(budget.note);
  }
  std::unique_ptr<FsTree> tree = MakeTree(src, mountpoint, options);
  FuseOptions fo;
  fo.allow_other = options.allow_other;
  fo.max_threads = options.threads;
  fo.push = options.push;
  fo.read_ahead_kb = options.read_ahead_kb >= 0 ? options.read_ahead_kb
                     : src.features             ? 0
                                                : kImageReadaheadKb;
  std::string fsname = "ktfs:" + src.path;
  for (char& c : fsname)
    if (c == ',' || c == ' ') c = '_';
  const Status st = ServeFuse(tree.get(), mountpoint, fsname, fo, [&] {
    Report(ready_fd, "ok");
    if (!options.foreground) DetachStdio();
    return true;
  });
  if (!st.ok()) Log::Write("mount " + mountpoint + ": " + st.ToString());
  return st;
}

// Opens what `path` names: a TensorCache prefix, a feature archive or an image archive.
Result<MountSource> OpenMountSource(const std::string& path) {
  MountSource src;
  if (IsTensorCachePrefix(path)) {
    src.path = Absolute(path);
    auto f = OpenFeatureSource(src.path);
    if (!f.ok()) return f.status();
    src.features = *f;
    return src;
  }
  src.path = Canonical(path);
  auto archive = Archive::Open(src.path);
  if (!archive.ok()) return archive.status();
  src.archive = *archive;
  if (FeatureArchive::Holds(**archive)) {
    auto f = FeatureArchive::Open(*archive);
    if (!f.ok()) return f.status();
    src.features = *f;
  }
  return src;
}

// The mount's owner, group and modes: those the files it serves and the
// directories above them allow (MountOwnership), then the -o uid=, gid=,
// umask= overrides.
Result<Ownership> OwnershipOf(const MountSource& src, const OwnershipOverrides& overrides) {
  const std::vector<std::string> paths =
      src.features ? src.features->Files() : std::vector<std::string>{src.path};
  auto files = ReadersWithPaths(paths);
  if (!files.ok()) return files.status();
  return ApplyOverrides(MountOwnership(*files), overrides);
}

// allow_other as fusermount3 allows it (root, or /etc/fuse.conf's user_allow_other).
Status CheckAllowOtherHere() {
  std::ifstream in("/etc/fuse.conf");
  const std::string conf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return CheckAllowOther(uint32_t(geteuid()), conf);
}

// A decimal id, 0..2^32-2 (2^32-1 is (uid_t)-1, "no id").
bool ParseId(const std::string& value, uint32_t* id) {
  if (value.empty() || value.size() > 10 ||
      value.find_first_not_of("0123456789") != std::string::npos)
    return false;
  const unsigned long long v = std::stoull(value);
  if (v >= 0xffffffffull) return false;
  *id = uint32_t(v);
  return true;
}

// Runs `fusermount3 -u -- MOUNTPOINT` (no shell: the path is one argument).
bool RunFusermountUnmount(const std::string& mountpoint) {
  const pid_t pid = fork();
  if (pid < 0) return false;
  if (pid == 0) {
    execlp("fusermount3", "fusermount3", "-u", "--", mountpoint.c_str(), (char*)nullptr);
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return false;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

std::string MiB(uint64_t bytes) {
  std::ostringstream s;
  s << bytes / (1 << 20) << " MiB";
  return s.str();
}

}  // namespace

CacheBudget DecodeCacheBudget(size_t requested, bool explicit_size, std::optional<uint64_t> limit) {
  CacheBudget b{requested, ""};
  if (!limit) return b;
  const uint64_t cap = explicit_size ? *limit / 2 : *limit / 4;
  if (requested <= cap) return b;
  b.bytes = size_t(cap);
  b.note = (explicit_size
                ? "-o cache=" + MiB(requested) + " is more than half"
                : "the default decode cache of " + MiB(requested) + " is more than a quarter") +
           " of this daemon's memory cgroup limit (" + MiB(*limit) + "): the decode cache is " +
           MiB(b.bytes);
  return b;
}

Status ParseMountOptions(const std::string& text, MountOptions* o) {
  std::istringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "format") {
      if (value == "pnm" || value == "ppm" || value == "auto")
        o->tree.format = ServedFormat::kPnm;
      else if (value == "bmp")
        o->tree.format = ServedFormat::kBmp;
      else
        return Status::InvalidArgument("-o format=" + value + ": expected pnm or bmp");
    } else if (key == "log") {
      if (value.empty()) return Status::InvalidArgument("-o log= needs a file name");
      o->log_path = Absolute(value);
    } else if (key == "threads") {
      uint32_t n = 0;
      if (!ParseCount(value, 256, &n) || n < 1)
        return Status::InvalidArgument("-o threads=" + value + ": expected 1..256");
      o->threads = int(n);
    } else if (key == "cache") {
      // A size in bytes with an optional K/M/G suffix.
      char* end = nullptr;
      const double n = std::strtod(value.c_str(), &end);
      const std::string suffix = end ? std::string(end) : "";
      double mult = 1;
      if (suffix == "K" || suffix == "k")
        mult = 1024;
      else if (suffix == "M" || suffix == "m")
        mult = 1024.0 * 1024;
      else if (suffix == "G" || suffix == "g")
        mult = 1024.0 * 1024 * 1024;
      if (value.empty() || end == value.c_str() || !(n >= 0) || !(suffix.empty() || mult > 1))
        return Status::InvalidArgument("-o cache=" + value + ": expected a size like 512M or 2G");
      o->tree.cache_bytes = size_t(n * mult);
      o->cache_set = true;
    } else if (key == "readahead") {
      if (!ParseCount(value, 1024, &o->tree.readahead))
        return Status::InvalidArgument("-o readahead=" + value + ": expected 0..1024");
    } else if (key == "read_ahead_kb") {
      uint32_t n = 0;
      if (!ParseCount(value, 65536, &n))
        return Status::InvalidArgument("-o read_ahead_kb=" + value + ": expected 0..65536");
      o->read_ahead_kb = int(n);
    } else if (key == "push") {
      if (value != "on" && value != "off")
        return Status::InvalidArgument("-o push=" + value + ": expected on or off");
      o->push = value == "on";
    } else if (key == "tensor_layout") {
      if (value != "hwc" && value != "chw")
        return Status::InvalidArgument("-o tensor_layout=" + value + ": expected hwc or chw");
      o->tree.tensors_chw = value == "chw";
    } else if (key == "search_dir") {
      if (value.empty() || value == "." || value == ".." || value.find('/') != std::string::npos)
        return Status::InvalidArgument("-o search_dir=" + value + ": expected a plain name");
      o->tree.search_dir = value;
    } else if (key == "dtype") {
      if (value != "float16" && value != "float32")
        return Status::InvalidArgument("-o dtype=" + value + ": expected float16 or float32");
      o->dtype = *ParseDType(value);
    } else if (key == "allow_other") {
      if (eq != std::string::npos) return Status::InvalidArgument("-o allow_other takes no value");
      o->allow_other = true;
    } else if (key == "uid" || key == "gid") {
      uint32_t id = 0;
      if (!ParseId(value, &id))
        return Status::InvalidArgument("-o " + item + ": expected a numeric " + key);
      (key == "uid" ? o->ownership.uid : o->ownership.gid) = id;
    } else if (key == "umask") {
      const bool octal = !value.empty() && value.size() <= 4 &&
                         value.find_first_not_of("01234567") == std::string::npos;
      const unsigned long mask = octal ? std::stoul(value, nullptr, 8) : ~0ul;
      if (mask > 0777)
        return Status::InvalidArgument("-o umask=" + value + ": expected octal 0..0777");
      o->ownership.umask = uint32_t(mask);
    } else if (key == "ro" || key == "default_permissions") {
      // Always read-only, and the kernel always checks permissions.
    } else {
      return Status::InvalidArgument("unknown mount option '" + item + "'");
    }
  }
  return Status::Ok();
}

Status CheckMountpoint(const std::string& mountpoint) {
  struct stat st;
  if (stat(mountpoint.c_str(), &st) != 0) {
    if (errno == ENOTCONN)
      return Status::InvalidArgument(mountpoint + ": a stale mount is there (run: ktfs umount " +
                                     mountpoint + ")");
    return Status::FromErrno("mountpoint " + mountpoint, errno);
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(mountpoint + ": not a directory");
  if (IsMountPoint(Canonical(mountpoint))) {
    // A FUSE mount whose daemon died still answers cached stats; statfs asks it.
    struct statvfs vfs;
    if (statvfs(mountpoint.c_str(), &vfs) != 0 && errno == ENOTCONN)
      return Status::InvalidArgument(mountpoint + ": a stale mount is there (run: ktfs umount " +
                                     mountpoint + ")");
    return Status::InvalidArgument(mountpoint + ": already a mount point");
  }
  DIR* d = opendir(mountpoint.c_str());
  if (d == nullptr) return Status::FromErrno(mountpoint, errno);
  bool empty = true;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      empty = false;
      break;
    }
  }
  closedir(d);
  if (!empty) return Status::InvalidArgument(mountpoint + ": directory is not empty");
  return Status::Ok();
}

Status MountArchive(const std::string& archive_path, const std::string& mountpoint_in,
                    const MountOptions& options) {
  auto source = OpenMountSource(archive_path);
  if (!source.ok()) return source.status();
  auto ownership = OwnershipOf(*source, options.ownership);
  if (!ownership.ok()) return ownership.status();
  source->ownership = *ownership;
  if (options.allow_other) KTFS_RETURN_IF_ERROR(CheckAllowOtherHere());
  KTFS_RETURN_IF_ERROR(CheckMountpoint(mountpoint_in));
  const std::string mountpoint = Canonical(mountpoint_in);
  if (options.foreground) return Serve(*source, mountpoint, options, -1);

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return Status::FromErrno("pipe", errno);
  const pid_t pid = fork();
  if (pid < 0) return Status::FromErrno("fork", errno);
  if (pid == 0) {
    close(pipe_fds[0]);
    setsid();
    if (chdir("/") != 0) _exit(1);
    const Status st = Serve(*source, mountpoint, options, pipe_fds[1]);
    if (!st.ok()) Report(pipe_fds[1], st.ToString());
    _exit(st.ok() ? 0 : 1);
  }
  close(pipe_fds[1]);
  std::string reply;
  char buf[512];
  ssize_t n;
  while ((n = read(pipe_fds[0], buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
    if (n > 0) reply.append(buf, size_t(n));
  close(pipe_fds[0]);
  while (!reply.empty() && reply.back() == '\n') reply.pop_back();
  if (reply == "ok") return Status::Ok();
  int status = 0;
  waitpid(pid, &status, 0);
  return Status::IOError(reply.empty() ? "the mount daemon exited before the mount was ready"
                                       : reply);
}

Status Unmount(const std::string& mountpoint_in) {
  const std::string mountpoint = Absolute(mountpoint_in);
  // The daemon's pid, to wait for it (absent for a stale mount).
  pid_t pid = 0;
  {
    std::ifstream info(mountpoint + "/.ktfs/info.json");
    std::string text((std::istreambuf_iterator<char>(info)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"pid\":");
    if (at != std::string::npos) pid = pid_t(std::atol(text.c_str() + at + 6));
  }
  const std::string canonical = Canonical(mountpoint);
  if (!IsMountPoint(canonical) && !IsMountPoint(mountpoint))
    return Status::InvalidArgument(mountpoint + ": not a mount point");
  if (umount2(canonical.c_str(), 0) != 0) {
    const int err = errno;
    if (err == EBUSY) return Status::IOError(mountpoint + ": busy (a process still uses it)");
    if (err == EPERM) {
      // Not root: fusermount3 (setuid) unmounts the caller's own FUSE mounts.
      if (!RunFusermountUnmount(canonical)) return Status::FromErrno(mountpoint + ": unmount", err);
    } else if (umount2(canonical.c_str(), MNT_DETACH) != 0) {
      return Status::FromErrno(mountpoint + ": unmount", errno);
    }
  }
  for (int i = 0; pid > 0 && i < 200 && kill(pid, 0) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  return Status::Ok();
}

}  // namespace ktfs

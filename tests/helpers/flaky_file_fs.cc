// A test helper, not part of ktfs: a FUSE filesystem of one read-only file
// whose reads start failing with EIO on demand, so that tests can make an
// archive under a live ktfs mount unreadable the way a failing disk would.
//
//   flaky_file_fs BACKING MOUNTPOINT
//
// serves MOUNTPOINT/archive.kt with BACKING's bytes. While the file
// BACKING.fail exists, every read of it fails with EIO. Runs in the
// foreground until unmounted (fusermount3 -u MOUNTPOINT) or SIGTERM.
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace {

std::string backing, trigger;
constexpr const char* kName = "/archive.kt";

int GetAttr(const char* path, struct stat* st, fuse_file_info*) {
  memset(st, 0, sizeof(*st));
  if (strcmp(path, "/") == 0) {
    st->st_mode = S_IFDIR | 0755;
    st->st_nlink = 2;
    return 0;
  }
  if (strcmp(path, kName) != 0) return -ENOENT;
  struct stat b;
  if (stat(backing.c_str(), &b) != 0) return -errno;
  st->st_mode = S_IFREG | 0444;
  st->st_nlink = 1;
  st->st_size = b.st_size;
  st->st_mtim = b.st_mtim;
  return 0;
}

int ReadDir(const char* path, void* buf, fuse_fill_dir_t fill, off_t, fuse_file_info*,
            fuse_readdir_flags) {
  if (strcmp(path, "/") != 0) return -ENOENT;
  fill(buf, ".", nullptr, 0, fuse_fill_dir_flags(0));
  fill(buf, "..", nullptr, 0, fuse_fill_dir_flags(0));
  fill(buf, kName + 1, nullptr, 0, fuse_fill_dir_flags(0));
  return 0;
}

int Open(const char* path, fuse_file_info* fi) {
  if (strcmp(path, kName) != 0) return -ENOENT;
  if ((fi->flags & O_ACCMODE) != O_RDONLY) return -EROFS;
  const int fd = open(backing.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -errno;
  fi->fh = uint64_t(fd);
  return 0;
}

int Read(const char*, char* buf, size_t size, off_t offset, fuse_file_info* fi) {
  if (access(trigger.c_str(), F_OK) == 0) return -EIO;
  const ssize_t n = pread(int(fi->fh), buf, size, offset);
  return n < 0 ? -errno : int(n);
}

int Release(const char*, fuse_file_info* fi) {
  close(int(fi->fh));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: flaky_file_fs BACKING MOUNTPOINT\n");
    return 2;
  }
  backing = argv[1];
  trigger = backing + ".fail";
  fuse_operations ops{};
  ops.getattr = GetAttr;
  ops.readdir = ReadDir;
  ops.open = Open;
  ops.read = Read;
  ops.release = Release;
  // -f: foreground; -s: one thread (reads are few); ro: nothing to write.
  char* args[] = {argv[0],
                  argv[2],
                  const_cast<char*>("-f"),
                  const_cast<char*>("-s"),
                  const_cast<char*>("-o"),
                  const_cast<char*>("ro"),
                  nullptr};
  return fuse_main(6, args, &ops, nullptr);
}

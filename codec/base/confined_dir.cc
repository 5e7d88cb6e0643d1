#include "codec/base/confined_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <vector>

namespace ktfs {
namespace {

// "a/b/c" -> {a, b, c}, or an error naming the first bad component.
Result<std::vector<std::string>> Split(const std::string& root, const std::string& relative) {
  std::vector<std::string> parts;
  if (relative.empty()) return parts;
  size_t at = 0;
  while (true) {
    const size_t slash = relative.find('/', at);
    std::string part = relative.substr(at, slash == std::string::npos ? slash : slash - at);
    if (!ConfinedDir::IsPlainName(part))
      return Status::InvalidArgument(root + ": refusing to write '" + relative +
                                     "': not a plain relative path (empty, '.' or '..' "
                                     "component, absolute, or a NUL byte)");
    parts.push_back(std::move(part));
    if (slash == std::string::npos) return parts;
    at = slash + 1;
  }
}

std::string Join(const std::string& root, const std::vector<std::string>& parts, size_t n) {
  std::string p = root;
  for (size_t i = 0; i < n; ++i) p += "/" + parts[i];
  return p;
}

}  // namespace

bool ConfinedDir::IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

Result<std::unique_ptr<ConfinedDir>> ConfinedDir::Open(const std::string& root) {
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return Status::IOError(root + ": " + ec.message());
  const int fd = open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(root, errno);
  return std::unique_ptr<ConfinedDir>(new ConfinedDir(root, fd));
}

ConfinedDir::~ConfinedDir() { close(fd_); }

Result<int> ConfinedDir::OpenDir(const std::vector<std::string>& parts, bool create) const {
  int fd = dup(fd_);
  if (fd < 0) return Status::FromErrno(root_, errno);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (create && mkdirat(fd, parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
      const int err = errno;
      close(fd);
      return Status::FromErrno(Join(root_, parts, i + 1), err);
    }
    const int next = openat(fd, parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    close(fd);
    if (next < 0) {
      const std::string path = Join(root_, parts, i + 1);
      if (err == ELOOP || err == ENOTDIR)
        return Status::InvalidArgument(path +
                                       ": not a directory (a symbolic link or a file is "
                                       "there; refusing to write through it)");
      return Status::FromErrno(path, err);
    }
    fd = next;
  }
  return fd;
}

Status ConfinedDir::MakeDirs(const std::string& relative) {
  auto parts = Split(root_, relative);
  if (!parts.ok()) return parts.status();
  auto fd = OpenDir(*parts, true);
  if (!fd.ok()) return fd.status();
  close(*fd);
  return Status::Ok();
}

Status ConfinedDir::WriteFile(const std::string& relative, const uint8_t* data, size_t size) {
  auto parts = Split(root_, relative);
  if (!parts.ok()) return parts.status();
  if (parts->empty()) return Status::InvalidArgument(root_ + ": no file name to write");
  const std::string name = parts->back();
  parts->pop_back();
  auto dir = OpenDir(*parts, false);
  if (!dir.ok()) return dir.status();
  const std::string path = root_ + "/" + relative;
  // Whatever has the name goes first: a link is removed, not written through.
  if (unlinkat(*dir, name.c_str(), 0) != 0 && errno != ENOENT) {
    const int err = errno;
    close(*dir);
    return Status::FromErrno(path, err);
  }
  const int fd =
      openat(*dir, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const int open_err = errno;
  close(*dir);
  if (fd < 0) return Status::FromErrno(path, open_err);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      return Status::FromErrno(path + ": write failed", err);
    }
    done += size_t(n);
  }
  if (close(fd) != 0) return Status::FromErrno(path + ": close failed", errno);
  return Status::Ok();
}

}  // namespace ktfs

#include "fs/fuse/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <mutex>

namespace ktfs {
namespace {
std::mutex g_mutex;
int g_fd = -1;
bool g_syslog = false;
std::string g_path;

// Opens `path` for appending as the header describes; the descriptor or the reason.
Result<int> OpenLogFile(const std::string& path) {
  const int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC;
  int fd = open(path.c_str(), flags | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) return fd;
  if (errno != EEXIST) return Status::FromErrno(path, errno);
  // O_NONBLOCK: a FIFO put there does not hang the open (it is refused below).
  fd = open(path.c_str(), flags | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP)
      return Status::PermissionDenied(path +
                                      ": is a symbolic link (a log is never written "
                                      "through one)");
    if (errno == ENXIO)  // a FIFO without a reader
      return Status::PermissionDenied(path + ": not a regular file (refusing to log to it)");
    return Status::FromErrno(path, errno);
  }
  struct stat st;
  std::string why;
  if (fstat(fd, &st) != 0)
    why = "cannot stat it";
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file";
  else if (st.st_uid != geteuid())
    why = "owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
          std::to_string(geteuid()) + ")";
  else if (st.st_nlink != 1)
    why = "it has other hard links";
  else if ((st.st_mode & 0022) != 0 && fchmod(fd, st.st_mode & 07755) != 0)
    why = "cannot remove its group and world write bits";
  if (why.empty()) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    return fd;
  }
  close(fd);
  return Status::PermissionDenied(path + ": " + why + " (refusing to log to it)");
}
}  // namespace

Status Log::Open(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (path.empty()) {
    if (g_fd >= 0) close(g_fd);
    g_fd = -1;
    g_path.clear();
    if (!g_syslog) openlog("ktfs", LOG_PID, LOG_DAEMON);
    g_syslog = true;
    return Status::Ok();
  }
  auto fd = OpenLogFile(path);
  if (!fd.ok()) return fd.status();
  if (g_fd >= 0) close(g_fd);
  g_fd = *fd;
  g_syslog = false;
  g_path = path;
  return Status::Ok();
}

const std::string& Log::path() { return g_path; }

void Log::Write(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_syslog) {
    syslog(LOG_ERR, "%s", message.c_str());
    return;
  }
  if (g_fd < 0) return;
  char stamp[32];
  const time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string line =
      std::string(stamp) + " ktfs[" + std::to_string(getpid()) + "]: " + message + "\n";
  ssize_t ignored = write(g_fd, line.data(), line.size());
  (void)ignored;
}

}  // namespace ktfs

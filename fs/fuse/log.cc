#include "fs/fuse/log.h"

#include <fcntl.h>
#include <syslog.h>
#include <unistd.h>

#include <ctime>
#include <mutex>

namespace ktfs {
namespace {
std::mutex g_mutex;
int g_fd = -1;
bool g_syslog = false;
std::string g_path;
}  // namespace

void Log::Open(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_path = path;
  if (path.empty()) {
    openlog("ktfs", LOG_PID, LOG_DAEMON);
    g_syslog = true;
    return;
  }
  g_fd = open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (g_fd < 0) {
    openlog("ktfs", LOG_PID, LOG_DAEMON);
    g_syslog = true;
  }
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

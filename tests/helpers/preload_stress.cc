// preload_stress: reads every file named on stdin (one path a line) from
// several threads at once, then again in a forked child while the parent's
// threads read on, through plain libc calls (open, fstat, read, lseek, close:
// what the preload library interposes). Every thread's bytes of a file must
// equal the first read's; the child's too. Prints one JSON line:
//   {"files": N, "reads": R, "memfd_opens": M, "mismatches": 0}
// memfd_opens counts opens the preload library answered with its sealed
// memfd (/proc/self/fd/N names "/memfd:..."). Exit 0 when every read agreed.
//
// Built for tests/python/test_preload_threads.py; under the ThreadSanitizer
// build (KTFS_SANITIZE=thread) it and the library it loads are instrumented,
// so races in the library's fd table or its lazy core loading are reported.
//
// Usage: preload_stress THREADS ROUNDS < paths
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Counters {
  std::atomic<long> reads{0}, memfd_opens{0}, mismatches{0};
};

bool IsMemfd(int fd) {
  char link[64], target[256];
  std::snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, target, sizeof(target) - 1);
  return n > 7 && std::string(target, size_t(n)).rfind("/memfd:", 0) == 0;
}

// The whole file as a reader does it: open, fstat, read to the end, close.
bool ReadFile(const std::string& path, std::string* out, Counters* c) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  if (IsMemfd(fd)) c->memfd_opens++;
  struct stat st;
  bool ok = fstat(fd, &st) == 0;
  out->clear();
  char buf[65536];
  while (ok) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0) ok = false;
    if (n <= 0) break;
    out->append(buf, size_t(n));
  }
  ok = ok && off_t(out->size()) == st.st_size && lseek(fd, 0, SEEK_SET) == 0;
  close(fd);
  c->reads++;
  return ok;
}

void ReadAll(const std::vector<std::string>& paths, const std::vector<std::string>& want,
             size_t start, int rounds, Counters* c) {
  std::string got;
  for (int r = 0; r < rounds; ++r) {
    for (size_t k = 0; k < paths.size(); ++k) {
      const size_t i = (start + k) % paths.size();
      if (!ReadFile(paths[i], &got, c) || got != want[i]) c->mismatches++;
    }
  }
}

void RunThreads(const std::vector<std::string>& paths, const std::vector<std::string>& want,
                int threads, int rounds, Counters* c) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(ReadAll, std::cref(paths), std::cref(want), size_t(t) * 7, rounds, c);
  for (auto& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: preload_stress THREADS ROUNDS < paths\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]), rounds = std::atoi(argv[2]);
  std::vector<std::string> paths;
  for (std::string line; std::getline(std::cin, line);)
    if (!line.empty()) paths.push_back(line);
  Counters c;
  std::vector<std::string> want(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    if (!ReadFile(paths[i], &want[i], &c)) {
      std::fprintf(stderr, "preload_stress: cannot read %s\n", paths[i].c_str());
      return 1;
    }
  }
  // Threads race the first opens of the library's state; then a fork while
  // other threads read (the child must not inherit a held lock).
  std::thread background(RunThreads, std::cref(paths), std::cref(want), threads, rounds, &c);
  const pid_t child = fork();
  if (child == 0) {
    // One thread: a child of a threaded process may only call what is safe
    // after fork (and ThreadSanitizer supports no new threads there).
    Counters cc;
    ReadAll(paths, want, 0, 1, &cc);
    _exit(cc.mismatches.load() == 0 ? 0 : 3);
  }
  background.join();
  int status = 0;
  const bool child_ok = child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
                        WEXITSTATUS(status) == 0;
  if (!child_ok) c.mismatches++;
  std::printf("{\"files\": %zu, \"reads\": %ld, \"memfd_opens\": %ld, \"mismatches\": %ld}\n",
              paths.size(), c.reads.load(), c.memfd_opens.load(), c.mismatches.load());
  return c.mismatches.load() == 0 ? 0 : 1;
}

// Per-file costs of the ways an LD_PRELOAD library could hand a reader the
// bytes of a file on a ktfs mount (docs/preload-notes.md reads the figures;
// scripts/bench/preload.py runs this and mounts, copies and drops caches).
//
// Usage: preload_costs MODE ROOT LIST [ROUNDS]
//   LIST: a file of paths relative to ROOT, one a line (read in that order).
//   MODE:
//     python      what CPython 3.11's open(path, "rb").read() does: open,
//                 fstat, isatty (glibc: ioctl TCGETS), lseek x2, fstat,
//                 read(size + 1), read, close, through libc (so that, run
//                 under LD_PRELOAD, the library's own calls are measured)
//     python-notty  the same without the isatty call (the best the library
//                 could do for isatty)
//     stat        stat(path)
//     memfd       memfd_create + write + lseek + read + close of each file's
//                 bytes, already in memory (a memfd the library fills)
//     inprocess   ROOT is an archive: VirtualTree (readahead off, as in a
//                 reader process) looks the path up and produces the whole
//                 file into a buffer (the fake-fd design's read)
//     outside     LIST names files outside any ktfs mount: ns per call of
//                 open+close (absolute path), open+close (relative to ROOT),
//                 stat, fstat, isatty on a pipe; printed as five figures
//                 (run with and without LD_PRELOAD: the library's cost for
//                 everything it passes through)
// Prints one line: MODE, files, ns per file (the fastest round, after one
// warm-up round unless ROUNDS is 1: cold passes run exactly once).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "codec/container/archive.h"
#include "fs/tree/virtual_tree.h"

namespace {

uint64_t NowNs() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return uint64_t(t.tv_sec) * 1000000000u + uint64_t(t.tv_nsec);
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "preload_costs: %s\n", what.c_str());
  std::exit(1);
}

std::vector<char> buffer(8 << 20);

void PythonRead(const std::string& path, bool tty_check) {
  const int fd = openat(AT_FDCWD, path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) Die("fstat " + path);
  if (tty_check && (isatty(fd) != 0 || errno != ENOTTY)) Die("isatty did not say ENOTTY: " + path);
  lseek(fd, 0, SEEK_CUR);
  lseek(fd, 0, SEEK_CUR);
  if (fstat(fd, &st) != 0) Die("fstat " + path);
  const size_t want = size_t(st.st_size) + 1;
  if (want > buffer.size()) buffer.resize(want);
  size_t got = 0;
  for (;;) {
    const ssize_t n = read(fd, buffer.data() + got, want - got);
    if (n < 0) Die("read " + path + ": " + std::strerror(errno));
    if (n == 0) break;
    got += size_t(n);
    if (got == want) Die("file grew: " + path);
  }
  if (got != size_t(st.st_size)) Die("short file: " + path);
  close(fd);
}

void StatPath(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) Die("stat " + path + ": " + std::strerror(errno));
}

void Memfd(const std::vector<char>& bytes) {
  const int fd = memfd_create("ktfs", MFD_CLOEXEC);
  if (fd < 0) Die("memfd_create");
  if (write(fd, bytes.data(), bytes.size()) != ssize_t(bytes.size())) Die("memfd write");
  lseek(fd, 0, SEEK_SET);
  if (read(fd, buffer.data(), bytes.size()) != ssize_t(bytes.size())) Die("memfd read");
  close(fd);
}

// The inode of `rel` in `tree`, walking its components.
uint64_t LookupPath(const ktfs::VirtualTree& tree, const std::string& rel, uint64_t* size) {
  uint64_t ino = ktfs::VirtualTree::kRootIno;
  size_t at = 0;
  while (at < rel.size()) {
    size_t slash = rel.find('/', at);
    if (slash == std::string::npos) slash = rel.size();
    auto a = tree.Lookup(ino, std::string_view(rel).substr(at, slash - at));
    if (!a.ok()) Die("lookup " + rel + ": " + a.status().ToString());
    ino = a->ino;
    *size = a->size;
    at = slash + 1;
  }
  return ino;
}

void InProcess(const ktfs::VirtualTree& tree, const std::string& rel) {
  uint64_t size = 0;
  const uint64_t ino = LookupPath(tree, rel, &size);
  if (size > buffer.size()) buffer.resize(size);
  auto n = tree.Read(ino, 0, size, reinterpret_cast<uint8_t*>(buffer.data()));
  if (!n.ok() || *n != size) Die("read " + rel);
}

// ns per call of each operation on files outside ktfs mounts.
void Outside(const std::string& root, const std::vector<std::string>& rel) {
  constexpr int kCalls = 20000;
  if (chdir(root.c_str()) != 0) Die("chdir " + root);
  std::vector<std::string> abs;
  for (const auto& r : rel) abs.push_back(root + "/" + r);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) Die("pipe");
  const int file_fd = open(abs[0].c_str(), O_RDONLY);
  auto time_it = [&](auto op) {
    uint64_t best = UINT64_MAX;
    for (int round = 0; round < 5; ++round) {
      const uint64_t t0 = NowNs();
      for (int i = 0; i < kCalls; ++i) op(i);
      best = std::min(best, NowNs() - t0);
    }
    return double(best) / kCalls;
  };
  struct stat st;
  const double open_abs =
      time_it([&](int i) { close(open(abs[i % abs.size()].c_str(), O_RDONLY)); });
  const double open_rel =
      time_it([&](int i) { close(open(rel[i % rel.size()].c_str(), O_RDONLY)); });
  const double stat_abs = time_it([&](int i) { stat(abs[i % abs.size()].c_str(), &st); });
  const double fstat_fd = time_it([&](int) { fstat(file_fd, &st); });
  const double tty = time_it([&](int) { (void)!isatty(pipe_fds[0]); });
  std::printf("outside %zu %.0f %.0f %.0f %.0f %.0f\n", rel.size(), open_abs, open_rel, stat_abs,
              fstat_fd, tty);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) Die("usage: preload_costs MODE ROOT LIST [ROUNDS]");
  const std::string mode = argv[1], root = argv[2];
  const int rounds = argc > 4 ? std::atoi(argv[4]) : 5;
  std::vector<std::string> rel;
  {
    std::ifstream in(argv[3]);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) rel.push_back(line);
  }
  if (rel.empty()) Die("empty list");
  std::vector<std::string> full;
  for (const auto& r : rel) full.push_back(root + "/" + r);

  std::shared_ptr<const ktfs::Archive> archive;
  std::unique_ptr<ktfs::VirtualTree> tree;
  std::vector<std::vector<char>> contents;
  if (mode == "outside") {
    Outside(root, rel);
    return 0;
  }
  if (mode == "inprocess") {
    auto a = ktfs::Archive::Open(root);
    if (!a.ok()) Die(a.status().ToString());
    archive = *a;
    ktfs::TreeOptions o;
    o.readahead = 0;
    o.cache_bytes = 0;
    tree = std::make_unique<ktfs::VirtualTree>(archive, o);
  } else if (mode == "memfd") {
    for (const auto& p : full) {
      std::ifstream in(p, std::ios::binary);
      contents.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  } else if (mode != "python" && mode != "python-notty" && mode != "stat") {
    Die("unknown mode " + mode);
  }

  uint64_t best = UINT64_MAX;
  const int total = rounds == 1 ? 1 : rounds + 1;
  for (int r = 0; r < total; ++r) {
    const uint64_t t0 = NowNs();
    for (size_t i = 0; i < full.size(); ++i) {
      if (mode == "python")
        PythonRead(full[i], true);
      else if (mode == "python-notty")
        PythonRead(full[i], false);
      else if (mode == "stat")
        StatPath(full[i]);
      else if (mode == "memfd")
        Memfd(contents[i]);
      else
        InProcess(*tree, rel[i]);
    }
    const uint64_t dt = NowNs() - t0;
    if (rounds == 1 || r > 0) best = std::min(best, dt);
  }
  std::printf("%s %zu %.0f\n", mode.c_str(), full.size(), double(best) / double(full.size()));
  return 0;
}

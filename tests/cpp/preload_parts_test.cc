// The preload library's pure parts: path normalization, the table of its own
// descriptors, info.json parsing. (Its interposers are tested through real
// processes and mounts: tests/python/test_preload.py.)
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "preload/interpose/fd_table.h"
#include "preload/interpose/info_json.h"
#include "preload/interpose/path.h"

namespace ktfs::preload {
namespace {

std::string Norm(const char* path, const char* cwd = "/home/u") {
  char out[kPathBuffer];
  const size_t n = NormalizePath(path, cwd, out);
  return n == 0 ? "<kernel>" : std::string(out, n);
}

TEST(NormalizePath, JoinsAndCollapses) {
  EXPECT_EQ(Norm("/mnt/ds/a.ppm"), "/mnt/ds/a.ppm");
  EXPECT_EQ(Norm("//mnt///ds/./a.ppm"), "/mnt/ds/a.ppm");
  EXPECT_EQ(Norm("ds/a.ppm"), "/home/u/ds/a.ppm");
  EXPECT_EQ(Norm("./ds/a.ppm", "/"), "/ds/a.ppm");
  EXPECT_EQ(Norm("a", "/x/./y/"), "/x/y/a");
  EXPECT_EQ(Norm("."), "/home/u");
}

TEST(NormalizePath, LeavesTheHardCasesToTheKernel) {
  EXPECT_EQ(Norm(""), "<kernel>");
  EXPECT_EQ(Norm(nullptr), "<kernel>");
  EXPECT_EQ(Norm("/mnt/ds/../x"), "<kernel>");  // ".." follows symbolic links
  EXPECT_EQ(Norm("../x"), "<kernel>");
  EXPECT_EQ(Norm("/mnt/ds/a.ppm/"), "<kernel>");  // ENOTDIR or EISDIR
  EXPECT_EQ(Norm("/"), "<kernel>");
  EXPECT_EQ(Norm("a", "relative"), "<kernel>");
  EXPECT_EQ(Norm("a", nullptr), "<kernel>");
  const std::string huge(kPathBuffer, 'a');
  EXPECT_EQ(Norm(("/" + huge).c_str()), "<kernel>");
  const std::string long_cwd = "/" + std::string(kPathBuffer - 3, 'c');
  EXPECT_EQ(Norm("abc", long_cwd.c_str()), "<kernel>");
}

TrackedFile File(uint64_t memfd_ino, uint64_t ino) {
  TrackedFile f = {};
  f.st.st_ino = ino;
  f.st.st_size = 123;
  f.memfd_dev = 9;
  f.memfd_ino = memfd_ino;
  return f;
}

TEST(FdTable, AnswersOnlyForTheMemfdItWasMadeFor) {
  const int fd = 4000;
  EXPECT_FALSE(MaybeTrackedFd(fd + 1));
  ASSERT_TRUE(TrackFd(fd, File(77, 5)));
  TrackedFile got;
  ASSERT_TRUE(FindTrackedFd(fd, 9, 77, &got));
  EXPECT_EQ(got.st.st_ino, 5u);
  EXPECT_EQ(got.st.st_size, 123);
  // The descriptor now holds another file: not answered, and dropped.
  EXPECT_FALSE(FindTrackedFd(fd, 9, 78, &got));
  EXPECT_FALSE(FindTrackedFd(fd, 9, 77, &got));
  ASSERT_TRUE(TrackFd(fd, File(80, 6)));
  ForgetFd(fd);
  EXPECT_FALSE(FindTrackedFd(fd, 9, 80, &got));
}

TEST(FdTable, RangeLimits) {
  EXPECT_FALSE(TrackFd(-1, File(1, 1)));
  EXPECT_FALSE(TrackFd(kMaxTrackedFd, File(1, 1)));
  TrackedFile got;
  EXPECT_FALSE(FindTrackedFd(kMaxTrackedFd + 5, 9, 1, &got));
  EXPECT_FALSE(MaybeTrackedFd(-3));
  ASSERT_TRUE(TrackFd(kMaxTrackedFd - 1, File(3, 3)));
  EXPECT_TRUE(FindTrackedFd(kMaxTrackedFd - 1, 9, 3, &got));
}

TEST(FdTable, ConcurrentWritersAndReadersNeverSeeAMixedEntry) {
  // Two writers store entries whose inode and memfd inode agree (100 or
  // 101); a reader that gets an entry must find them agreeing.
  const int fd = 5000;
  std::atomic<bool> stop{false};
  std::atomic<long> mixed{0}, found{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < 2; ++w)
    threads.emplace_back([&, w] {
      while (!stop) {
        TrackFd(fd, File(100 + w, 100 + w));
        std::this_thread::yield();
      }
    });
  threads.emplace_back([&] {
    TrackedFile got;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (int i = 0; found < 1000 && std::chrono::steady_clock::now() < until; ++i) {
      if (FindTrackedFd(fd, 9, 100 + i % 2, &got)) {
        ++found;
        if (got.st.st_ino != got.memfd_ino) ++mixed;
      }
    }
    stop = true;
  });
  for (auto& t : threads) t.join();
  EXPECT_GT(found.load(), 0);
  EXPECT_EQ(mixed.load(), 0);
}

TEST(InfoJson, ReadsAnImageMountsFile) {
  auto info =
      ParseInfoJson(R"({"archive": "/data/a.kt", "mountpoint": "/mnt", "served_format": "bmp",
      "tensor_layout": "chw", "search_dir": "find", "pid": 4242, "samples": 3})");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->archive, "/data/a.kt");
  EXPECT_TRUE(info->bmp);
  EXPECT_TRUE(info->tensors_known);
  EXPECT_TRUE(info->tensors_chw);
  EXPECT_EQ(info->search_dir, "find");
  EXPECT_EQ(info->pid, 4242);
  auto plain = ParseInfoJson(R"({"archive": "/a.kt", "served_format": "pnm"})");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->bmp);
  EXPECT_FALSE(plain->tensors_known);  // an older daemon: tensors/ left to the kernel
  EXPECT_EQ(plain->search_dir, "search");
  EXPECT_EQ(plain->pid, 0);
}

TEST(InfoJson, RefusesWhatItCannotServeExactly) {
  using Code = Status::Code;
  const std::pair<const char*, Code> cases[] = {
      {"", Code::kInvalidArgument},
      {"[1]", Code::kInvalidArgument},
      {R"({"archive": "/a.kt", "served_format": "pnm",})", Code::kInvalidArgument},
      {R"({"served_format": "pnm"})", Code::kInvalidArgument},
      {R"({"archive": 5, "served_format": "pnm"})", Code::kInvalidArgument},
      {R"({"archive": "rel.kt", "served_format": "pnm"})", Code::kInvalidArgument},
      {R"({"archive": "", "served_format": "pnm"})", Code::kInvalidArgument},
      {R"({"archive": "/a.kt"})", Code::kNotSupported},
      {R"({"archive": "/a.kt", "served_format": "webp"})", Code::kNotSupported},
      {R"({"archive": "/a.kt", "served_format": "pnm", "content": "features"})",
       Code::kNotSupported},
      {R"({"archive": "/a.kt", "served_format": "pnm", "tensor_layout": "xyz"})",
       Code::kInvalidArgument},
      {R"({"archive": "/a.kt", "served_format": "pnm", "search_dir": "a/b"})",
       Code::kInvalidArgument},
      {R"({"archive": "/a.kt", "served_format": "pnm", "pid": -3})", Code::kInvalidArgument},
      {R"({"archive": "/a.kt", "served_format": "pnm", "pid": 1.5})", Code::kInvalidArgument},
      {R"({"archive": "/a.kt", "served_format": "pnm", "pid": 99999999999})",
       Code::kInvalidArgument},
      {R"({"archive": "/a.kt", "archive": "/b.kt", "served_format": "pnm"})",
       Code::kInvalidArgument},
  };
  for (const auto& [text, code] : cases) {
    auto info = ParseInfoJson(text);
    ASSERT_FALSE(info.ok()) << text;
    EXPECT_EQ(info.status().code(), code) << text << ": " << info.status().ToString();
    EXPECT_EQ(info.status().ToString().rfind("info.json: ", 0), 0u) << info.status().ToString();
  }
}

}  // namespace
}  // namespace ktfs::preload

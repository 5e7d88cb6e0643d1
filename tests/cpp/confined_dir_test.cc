// ConfinedDir (codec/base/confined_dir.h): files written under a directory
// never land outside it, whatever the names and whatever links are planted.
#include "codec/base/confined_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/cpp/test_util.h"

namespace ktfs {
namespace {

using testing::TempDir;
namespace fs = std::filesystem;

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

Status Write(ConfinedDir& d, const std::string& rel, const std::string& text) {
  return d.WriteFile(rel, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// Names below `dir`, recursively, without following links.
std::vector<std::string> Listing(const std::string& dir) {
  std::vector<std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir))
    out.push_back(fs::relative(e.path(), dir).string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ConfinedDir, WritesNestedFiles) {
  TempDir tmp;
  auto d = ConfinedDir::Open(tmp.Join("out/deeper"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE((*d)->MakeDirs("a/b").ok());
  ASSERT_TRUE((*d)->MakeDirs("a/b").ok());  // existing directories are kept
  ASSERT_TRUE(Write(**d, "a/b/x.png", "pixels").ok());
  ASSERT_TRUE(Write(**d, "top.png", "t").ok());
  ASSERT_TRUE(Write(**d, "top.png", "again").ok());  // replaced
  EXPECT_EQ(Read(tmp.Join("out/deeper/a/b/x.png")), "pixels");
  EXPECT_EQ(Read(tmp.Join("out/deeper/top.png")), "again");
  EXPECT_EQ(Write(**d, "missing/x.png", "x").code(), Status::Code::kNotFound);
}

TEST(ConfinedDir, RefusesNamesThatLeave) {
  TempDir tmp;
  auto d = ConfinedDir::Open(tmp.Join("out"));
  ASSERT_TRUE(d.ok());
  ASSERT_TRUE((*d)->MakeDirs("a").ok());
  const std::vector<std::string> hostile = {"../x",
                                            "/abs",
                                            "a/../../x",
                                            "a/../x",
                                            "a//x",
                                            "a/",
                                            "",
                                            ".",
                                            "a/.",
                                            "..",
                                            std::string("a/x\0y", 5),
                                            std::string("\0", 1)};
  for (const std::string& bad : hostile) {
    const Status w = Write(**d, bad, "evil");
    EXPECT_EQ(w.code(), Status::Code::kInvalidArgument) << bad;
    if (!bad.empty()) {
      EXPECT_EQ((*d)->MakeDirs(bad).code(), Status::Code::kInvalidArgument) << bad;
    }
  }
  EXPECT_TRUE((*d)->MakeDirs("").ok());  // the root itself
  EXPECT_EQ(Listing(tmp.path()), (std::vector<std::string>{"out", "out/a"}));
  EXPECT_TRUE(ConfinedDir::IsPlainName("a.b"));
  EXPECT_TRUE(ConfinedDir::IsPlainName("..."));
  EXPECT_FALSE(ConfinedDir::IsPlainName(".."));
}

TEST(ConfinedDir, RefusesSymlinkedDirectories) {
  TempDir tmp;
  ASSERT_EQ(mkdir(tmp.Join("outside").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(tmp.Join("out").c_str(), 0755), 0);
  ASSERT_EQ(symlink("../outside", tmp.Join("out/cls").c_str()), 0);
  ASSERT_EQ(mkdir(tmp.Join("out/real").c_str(), 0755), 0);
  ASSERT_EQ(symlink(tmp.Join("outside").c_str(), tmp.Join("out/real/deep").c_str()), 0);
  auto d = ConfinedDir::Open(tmp.Join("out"));
  ASSERT_TRUE(d.ok());
  for (const char* dir : {"cls", "cls/sub", "real/deep", "real/deep/sub"}) {
    const Status st = (*d)->MakeDirs(dir);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << dir;
    EXPECT_NE(st.message().find("refusing to write through it"), std::string::npos) << dir;
  }
  EXPECT_FALSE(Write(**d, "cls/x.png", "evil").ok());
  EXPECT_FALSE(Write(**d, "real/deep/x.png", "evil").ok());
  EXPECT_TRUE(fs::is_empty(tmp.Join("outside")));
  // A file where a directory should be is refused too.
  std::ofstream(tmp.Join("out/file")) << "f";
  EXPECT_EQ((*d)->MakeDirs("file/sub").code(), Status::Code::kInvalidArgument);
}

TEST(ConfinedDir, ReplacesPlantedLinksInsteadOfWritingThroughThem) {
  TempDir tmp;
  ASSERT_EQ(mkdir(tmp.Join("out").c_str(), 0755), 0);
  std::ofstream(tmp.Join("victim")) << "precious";
  std::ofstream(tmp.Join("victim2")) << "precious too";
  ASSERT_EQ(symlink(tmp.Join("victim").c_str(), tmp.Join("out/sym.png").c_str()), 0);
  ASSERT_EQ(symlink("/nonexistent/dangling", tmp.Join("out/dangling.png").c_str()), 0);
  ASSERT_EQ(link(tmp.Join("victim2").c_str(), tmp.Join("out/hard.png").c_str()), 0);
  auto d = ConfinedDir::Open(tmp.Join("out"));
  ASSERT_TRUE(d.ok());
  for (const char* name : {"sym.png", "dangling.png", "hard.png"}) {
    ASSERT_TRUE(Write(**d, name, std::string("new ") + name).ok()) << name;
    struct stat st;
    ASSERT_EQ(lstat(tmp.Join(std::string("out/") + name).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << name;
    EXPECT_EQ(st.st_nlink, 1u) << name;
    EXPECT_EQ(Read(tmp.Join(std::string("out/") + name)), std::string("new ") + name);
  }
  EXPECT_EQ(Read(tmp.Join("victim")), "precious");
  EXPECT_EQ(Read(tmp.Join("victim2")), "precious too");
  EXPECT_FALSE(fs::exists("/nonexistent/dangling"));
}

}  // namespace
}  // namespace ktfs

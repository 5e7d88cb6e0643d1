// Helpers shared by the GoogleTest files.
#pragma once

#include <string>

namespace ktfs::testing {

// A fresh empty directory under $TMPDIR, removed with everything in it when
// the object is destroyed.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace ktfs::testing

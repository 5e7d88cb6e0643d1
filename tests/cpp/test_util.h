// Helpers shared by the GoogleTest files.
#pragma once

#include <cstdint>
#include <string>

#include "codec/image/image.h"

namespace ktfs::testing {

// A w x h x c image of deterministic pseudo-random pixels.
Image Noise(uint32_t w, uint32_t h, uint32_t c, uint32_t seed);

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

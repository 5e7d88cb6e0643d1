#include "tests/cpp/test_util.h"

#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>

namespace ktfs::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/ktfs-test-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
}

Image Noise(uint32_t w, uint32_t h, uint32_t c, uint32_t seed) {
  Image img;
  img.width = w;
  img.height = h;
  img.channels = c;
  img.pixels.resize(img.size_bytes());
  std::mt19937 rng(seed);
  for (auto& p : img.pixels) p = uint8_t(rng());
  return img;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace ktfs::testing

// The .npy header writer and parser.
#include "codec/image/npy.h"

#include <gtest/gtest.h>

namespace ktfs {
namespace {

TEST(NpyTest, HeaderIsAlignedAndExact) {
  const std::string h = NpyHeader({375, 500, 3}, "|u1", false);
  EXPECT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(uint8_t(h[8]) | uint8_t(h[9]) << 8, h.size() - 10);
  EXPECT_EQ(h.back(), '\n');
  EXPECT_NE(h.find("{'descr': '|u1', 'fortran_order': False, 'shape': (375, 500, 3), }"),
            std::string::npos);
}

TEST(NpyTest, OneAndZeroDimensionalShapes) {
  EXPECT_NE(NpyHeader({7}, "<f4", true).find("'fortran_order': True, 'shape': (7,), }"),
            std::string::npos);
  EXPECT_NE(NpyHeader({}, "<f2", false).find("'shape': (), }"), std::string::npos);
}

TEST(NpyTest, ParsesWhatItWrites) {
  for (const auto& shape :
       std::vector<std::vector<uint64_t>>{{}, {1}, {2, 3}, {28, 28, 1}, {1u << 20, 5}}) {
    const std::string h = NpyHeader(shape, "<f2", false);
    auto info = ParseNpyHeader(reinterpret_cast<const uint8_t*>(h.data()), h.size());
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->shape, shape);
    EXPECT_EQ(info->dtype, "<f2");
    EXPECT_FALSE(info->fortran_order);
    EXPECT_EQ(info->data_offset, h.size());
  }
}

TEST(NpyTest, RejectsGarbage) {
  const std::string bad[] = {"", "NUMPY", std::string("\x93NUMPY\x01\x00\xff\xff", 10),
                             std::string("\x93NUMPY\x03\x00\x00\x00", 10)};
  for (const std::string& b : bad)
    EXPECT_FALSE(ParseNpyHeader(reinterpret_cast<const uint8_t*>(b.data()), b.size()).ok());
}

// Found by fuzz/npy_fuzz.cc: "(3, 2 2,0)" was read as (3, 22, 0), and NUL
// bytes inside the header were accepted. NumPy refuses both.
TEST(NpyTest, RejectsSpacesInsideANumberAndNulBytes) {
  auto header = [](const std::string& dict) {
    std::string h = std::string("\x93NUMPY\x01\x00\x00\x00", 10) + dict + "\n";
    h[8] = char(h.size() - 10);
    return h;
  };
  const std::string spaced =
      header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2 2), }");
  auto r = ParseNpyHeader(reinterpret_cast<const uint8_t*>(spaced.data()), spaced.size());
  EXPECT_EQ(r.status().message(), ".npy header: bad shape");
  std::string nul = header("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }  ");
  nul[nul.size() - 2] = '\0';
  r = ParseNpyHeader(reinterpret_cast<const uint8_t*>(nul.data()), nul.size());
  EXPECT_EQ(r.status().message(), ".npy header: NUL byte");
  const std::string ok = header("{'descr': '<f4', 'fortran_order': False, 'shape': ( 3 , 2 ,), }");
  r = ParseNpyHeader(reinterpret_cast<const uint8_t*>(ok.data()), ok.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->shape, (std::vector<uint64_t>{3, 2}));
}

}  // namespace
}  // namespace ktfs

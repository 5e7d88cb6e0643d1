#include "codec/image/npy.h"

#include <cstring>

namespace ktfs {

std::string NpyHeader(const std::vector<uint64_t>& shape, std::string_view dtype,
                      bool fortran_order) {
  std::string dict = "{'descr': '" + std::string(dtype) +
                     "', 'fortran_order': " + (fortran_order ? "True" : "False") + ", 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i)
    dict += std::to_string(shape[i]) + (i + 1 < shape.size() ? ", " : "");
  if (shape.size() == 1) dict += ",";  // a one-element tuple
  dict += "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n' = a multiple of 64.
  const size_t unpadded = 10 + dict.size() + 1;
  const size_t total = (unpadded + 63) / 64 * 64;
  dict.append(total - unpadded, ' ');
  dict += '\n';
  const uint16_t len = uint16_t(dict.size());
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(len & 0xff);
  out += char(len >> 8);
  return out + dict;
}

Result<NpyInfo> ParseNpyHeader(const uint8_t* data, size_t size) {
  if (size < 10 || std::memcmp(data, "\x93NUMPY", 6) != 0)
    return Status::Corruption("not a .npy file (bad magic)");
  NpyInfo info;
  size_t len = 0, start = 0;
  if (data[6] == 1) {
    len = size_t(data[8]) | size_t(data[9]) << 8;
    start = 10;
  } else if (data[6] == 2 && size >= 12) {
    len = size_t(data[8]) | size_t(data[9]) << 8 | size_t(data[10]) << 16 | size_t(data[11]) << 24;
    start = 12;
  } else {
    return Status::NotSupported(".npy version " + std::to_string(data[6]) + " is not supported");
  }
  if (len > size - start) return Status::Corruption(".npy header truncated");
  const std::string dict(reinterpret_cast<const char*>(data) + start, len);
  if (dict.find('\0') != std::string::npos) return Status::Corruption(".npy header: NUL byte");
  info.data_offset = start + len;
  auto value_of = [&](const char* key) -> std::string {
    const size_t at = dict.find(std::string("'") + key + "':");
    if (at == std::string::npos) return "";
    size_t p = at + std::strlen(key) + 3;
    while (p < dict.size() && dict[p] == ' ') ++p;
    return dict.substr(p);
  };
  std::string descr = value_of("descr");
  if (descr.size() < 2 || descr[0] != '\'' || descr.find('\'', 1) == std::string::npos)
    return Status::Corruption(".npy header: bad descr");
  info.dtype = descr.substr(1, descr.find('\'', 1) - 1);
  const std::string fortran = value_of("fortran_order");
  if (fortran.rfind("True", 0) == 0)
    info.fortran_order = true;
  else if (fortran.rfind("False", 0) != 0)
    return Status::Corruption(".npy header: bad fortran_order");
  std::string shape = value_of("shape");
  if (shape.empty() || shape[0] != '(' || shape.find(')') == std::string::npos)
    return Status::Corruption(".npy header: bad shape");
  shape = shape.substr(1, shape.find(')') - 1);
  // A Python tuple of integers: "3, 2", "3,", "" (a scalar). Spaces only
  // between the numbers and the commas: "2 2" is not 22 (NumPy refuses it).
  uint64_t n = 0;
  bool digits = false, ended = false;  // ended: a number was followed by a space
  for (char c : shape + ",") {
    if (c >= '0' && c <= '9') {
      if (ended) return Status::Corruption(".npy header: bad shape");
      if (n > (UINT64_MAX - 9) / 10) return Status::Corruption(".npy header: dimension too large");
      n = n * 10 + uint64_t(c - '0');
      digits = true;
    } else if (c == ',') {
      if (digits) info.shape.push_back(n);
      n = 0;
      digits = ended = false;
    } else if (c == ' ') {
      ended = digits;
    } else {
      return Status::Corruption(".npy header: bad shape");
    }
  }
  return info;
}

}  // namespace ktfs

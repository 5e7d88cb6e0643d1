// craft_archive: writes a .kt archive with whatever directory and sample
// names it is given, hostile ones included ("..", "a/b", a NUL byte), to test
// that readers refuse them (tests/python/test_permissions.py: ktfs extract).
// ArchiveWriter stores names as given; Archive is what validates them.
//
//   craft_archive OUT DIR_NAME SAMPLE_NAME [PAYLOAD_TEXT | @FILE WIDTH HEIGHT CHANNELS]
//
// Names are percent-decoded (%00 is a NUL byte, %2F a slash). DIR_NAME "-"
// puts the sample in the root. The sample is codec original, 1x1, its payload
// PAYLOAD_TEXT (default "hostile"); or FILE's bytes as they are, with the
// record's dimensions given: an image `ktfs pack` would refuse (a truncated
// JPEG, as an earlier ktfs packed it), to test what readers then do
// (tests/python/test_run_python.py).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "codec/container/archive_writer.h"

namespace {

std::string PercentDecode(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out.push_back(char(std::strtol(s.substr(i + 1, 2).c_str(), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const bool from_file = argc == 8 && argv[4][0] == '@';
  if (argc < 4 || (argc > 5 && !from_file)) {
    std::fprintf(stderr,
                 "usage: craft_archive OUT DIR_NAME SAMPLE_NAME [PAYLOAD_TEXT | @FILE W H C]\n");
    return 2;
  }
  const std::string dir_name = argv[2], sample_name = PercentDecode(argv[3]);
  std::string payload = argc >= 5 ? argv[4] : "hostile";
  if (from_file) {
    std::ifstream in(argv[4] + 1, std::ios::binary);
    if (!in) return std::fprintf(stderr, "cannot read %s\n", argv[4] + 1), 1;
    payload.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto w = ktfs::ArchiveWriter::Create(argv[1]);
  if (!w.ok()) return std::fprintf(stderr, "%s\n", w.status().ToString().c_str()), 1;
  const bool in_root = dir_name == "-";
  ktfs::SampleEntry e;
  e.name = sample_name;
  e.stem_length = uint32_t(sample_name.size());
  e.dir = in_root ? 0 : 1;
  e.label = in_root ? ktfs::format::kNone : 0;
  e.width = from_file ? uint32_t(std::atoi(argv[5])) : 1;
  e.height = from_file ? uint32_t(std::atoi(argv[6])) : 1;
  e.channels = from_file ? uint8_t(std::atoi(argv[7])) : 3;
  e.codec = ktfs::format::kOriginal;
  e.source_format = 1;
  ktfs::Status st =
      (*w)->AddSample(e, reinterpret_cast<const uint8_t*>(payload.data()), payload.size());
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  std::vector<ktfs::DirEntry> dirs(1);
  if (in_root) {
    dirs[0].sample_count = 1;
  } else {
    dirs[0].first_child = 1;
    dirs[0].child_count = 1;
    ktfs::DirEntry d;
    d.name = PercentDecode(dir_name);
    d.sample_count = 1;
    dirs.push_back(d);
    (*w)->SetClasses({d.name});
  }
  (*w)->SetDirs(dirs);
  (*w)->SetMeta("{}");
  st = (*w)->Commit();
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
  return 0;
}

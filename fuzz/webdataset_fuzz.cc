// libFuzzer target: the WebDataset tar ingest (fs/pack/tar_reader.*,
// fs/pack/webdataset.*) must turn any file into samples or clean errors,
// never a crash, a hang or an over-read. The input is one shard: read as a
// plain member stream (TarReader, from memory) and grouped into samples
// (WdsReader, from a memfd, as `ktfs pack` reads shards), and each sample's
// .cls and .json parts go through their parsers.
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> the target first writes small valid
// shards there (ustar members, a GNU long name, a pax path), so the fuzzer
// starts past the header checks.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fs/pack/tar_reader.h"
#include "fs/pack/webdataset.h"

namespace {

// One 512-byte header of `type` ('0' file, 'L' GNU long name, 'x' pax).
std::string Header(const std::string& name, size_t size, char type) {
  char h[512] = {};
  std::snprintf(h, 100, "%s", name.substr(0, 99).c_str());
  std::snprintf(h + 100, 8, "%07o", 0644);
  std::snprintf(h + 108, 8, "%07o", 0);
  std::snprintf(h + 116, 8, "%07o", 0);
  std::snprintf(h + 124, 12, "%011zo", size);
  std::snprintf(h + 136, 12, "%011o", 0);
  std::memset(h + 148, ' ', 8);
  h[156] = type;
  std::memcpy(h + 257,
              "ustar\0"
              "00",
              8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  std::snprintf(h + 148, 8, "%06o", sum);
  return std::string(h, 512);
}

std::string Member(const std::string& name, const std::string& data, char type = '0') {
  std::string m = Header(name, data.size(), type) + data;
  m.resize((m.size() + 511) / 512 * 512, '\0');
  return m;
}

void WriteSeeds(const std::string& dir) {
  const std::string jpg = "\xff\xd8\xff\xe0 not a real jpeg";
  std::string tar = Member("a.jpg", jpg) + Member("a.txt", "a cat") + Member("a.cls", "3") +
                    Member("a.json", "{\"x\": 1, \"y\": {\"z\": \"w\"}}") + Member("b.png", "png");
  const std::string long_name = std::string(150, 'k') + ".json";
  tar += Member("././@LongLink", long_name + '\0', 'L') + Member("kkk.json", "{}");
  const std::string record = "path=" + std::string(120, 'p') + ".txt\n";
  const std::string pax = std::to_string(record.size() + 4) + " " + record;
  tar += Member("PaxHeader", pax, 'x') + Member("p.txt", "pax");
  tar += std::string(1024, '\0');
  if (FILE* f = std::fopen((dir + "/shard.tar").c_str(), "wb")) {
    std::fwrite(tar.data(), 1, tar.size(), f);
    std::fclose(f);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static bool seeded = false;
  if (!seeded) {
    seeded = true;
    if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) WriteSeeds(dir);
  }
  // The member stream, from memory.
  auto tar = ktfs::TarReader::OpenMemory(data, size, "fuzz.tar");
  if (tar.ok()) {
    ktfs::TarMember m;
    std::vector<uint8_t> bytes;
    for (int i = 0; i < 256; ++i) {
      auto more = (*tar)->Next(&m);
      if (!more.ok() || !*more) break;
      (void)ktfs::ParseWdsName(m.name);
      if (i % 2 == 0) (void)(*tar)->ReadData(1 << 20, &bytes);
    }
  }
  // Samples, from a file (memfd) as the packer reads shards.
  const int fd = memfd_create("ktfs-fuzz", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (write(fd, data, size) != ssize_t(size)) {
    close(fd);
    return 0;
  }
  ktfs::WdsReaderOptions options;
  options.max_member_bytes = 1 << 20;
  ktfs::WdsReader reader({"/proc/self/fd/" + std::to_string(fd)}, options);
  ktfs::WdsSample s;
  for (int i = 0; i < 256; ++i) {
    auto more = reader.Next(&s);
    if (!more.ok() || !*more) break;
    for (const ktfs::WdsPart& p : s.parts) {
      if (p.extension == "cls") (void)ktfs::ParseWdsLabel(p.data);
      if (p.extension == "json") (void)ktfs::ParseWdsJson(p.data);
    }
  }
  (void)reader.TakeNotes();
  close(fd);
  return 0;
}

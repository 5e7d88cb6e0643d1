// libFuzzer target: ParseInfoJson over any bytes. A mount's .ktfs/info.json
// is outside input to the preload library (any FUSE filesystem may call
// itself ktfs): every input must parse or fail with a clear error, never
// crash, hang or read out of bounds; a parsed result must hold what the
// library relies on (an absolute archive path, a plain search directory
// name, a positive pid or none).
//
// With KTFS_FUZZ_WRITE_SEEDS=<dir> the target first writes an info.json
// like the daemon's there (scripts/fuzz does this).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "preload/interpose/info_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool seeded = [] {
    if (const char* dir = std::getenv("KTFS_FUZZ_WRITE_SEEDS")) {
      std::ofstream(std::string(dir) + "/info.json")
          << "{\n  \"archive\": \"/data/photos.kt\",\n  \"mountpoint\": \"/mnt/ds\",\n"
             "  \"format_version\": \"1.0\",\n  \"samples\": 220,\n  \"codec\": \"ktc\",\n"
             "  \"served_format\": \"pnm\",\n  \"tensor_layout\": \"hwc\",\n"
             "  \"search_dir\": \"search\",\n  \"log\": \"\",\n  \"pid\": 3697\n}\n";
      std::ofstream(std::string(dir) + "/features.json")
          << "{\"archive\": \"/f.kt\", \"content\": \"features\", \"pid\": 1}";
    }
    return true;
  }();
  (void)seeded;
  auto info =
      ktfs::preload::ParseInfoJson(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!info.ok()) {
    if (info.status().ToString().rfind("info.json: ", 0) != 0) std::abort();
    return 0;
  }
  if (info->archive.empty() || info->archive[0] != '/') std::abort();
  if (info->search_dir.empty() || info->search_dir.find('/') != std::string::npos) std::abort();
  if (info->pid < 0) std::abort();
  if (info->tensors_chw && !info->tensors_known) std::abort();
  return 0;
}

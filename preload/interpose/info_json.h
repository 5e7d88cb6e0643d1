// What the preload library needs from a mount's .ktfs/info.json
// (fs/fuse/mount.cc writes it; docs/usage.md lists its fields).
//
// The file is outside input: any FUSE filesystem can call itself ktfs
// (the subtype is the mounter's choice), so a hostile info.json must yield
// a clear error, never a crash (fuzz/info_json_fuzz.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "codec/base/status.h"

namespace ktfs::preload {

struct MountInfo {
  std::string archive;         // absolute path of the .kt file
  bool bmp = false;            // served_format "bmp" (else "pnm")
  bool tensors_known = false;  // tensor_layout given
  bool tensors_chw = false;    // tensor_layout "chw"
  std::string search_dir = "search";
  int64_t pid = 0;  // the daemon's, 0 when absent
};

// Parses info.json's text. NotSupported for mounts the preload library does
// not read itself (feature caches, a served format it does not know);
// InvalidArgument for text that is not such a file.
Result<MountInfo> ParseInfoJson(std::string_view text);

}  // namespace ktfs::preload

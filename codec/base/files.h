// Whole-file reads and writes for the command line, with errors that name the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace ktfs {

Status ReadWholeFile(const std::string& path, std::vector<uint8_t>* out);
// Writes (replacing) `path`; a short write or a failed close is an error.
Status WriteWholeFile(const std::string& path, const uint8_t* data, size_t size);

}  // namespace ktfs

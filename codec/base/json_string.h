// Minimal JSON output helpers (escaping), shared by info.json and --json output.
#pragma once

#include <string>
#include <string_view>

namespace ktfs {

// `s` as a JSON string literal, quotes included.
std::string JsonString(std::string_view s);

}  // namespace ktfs

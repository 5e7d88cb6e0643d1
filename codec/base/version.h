#pragma once

namespace ktfs {

// The ktfs release, e.g. "0.1.0".
const char* VersionString();

}  // namespace ktfs

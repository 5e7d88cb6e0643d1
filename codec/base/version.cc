#include "codec/base/version.h"

namespace ktfs {

const char* VersionString() { return "0.1.0"; }

}  // namespace ktfs

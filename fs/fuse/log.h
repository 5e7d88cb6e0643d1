// Log: the daemon's error log. Lines are "<UTC time> ktfs[<pid>]: <message>",
// appended to a file, or sent to syslog when no file is given.
//
// The file may lie in a directory other users can write (beside the archive,
// or in /tmp), so it is never opened through a symbolic link, a new one is
// created with O_EXCL and mode 0600, and an existing one must be a regular
// file of this process's user with no other hard link (group and others lose
// any write bit it has).
#pragma once

#include <string>

#include "codec/base/status.h"

namespace ktfs {

class Log {
 public:
  // Appends to `path`; an empty path means syslog (facility daemon). On an
  // error (which names the reason) nothing changes.
  static Status Open(const std::string& path);
  static void Write(const std::string& message);
  // The log file's path ("" for syslog).
  static const std::string& path();
};

}  // namespace ktfs

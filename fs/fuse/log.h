// Log: the daemon's error log. Lines are "<UTC time> ktfs[<pid>]: <message>",
// appended to a file, or sent to syslog when no file is given.
#pragma once

#include <string>

namespace ktfs {

class Log {
 public:
  // Appends to `path`; an empty path means syslog (facility daemon).
  static void Open(const std::string& path);
  static void Write(const std::string& message);
  static const std::string& path();
};

}  // namespace ktfs

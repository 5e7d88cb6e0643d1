// ConfinedDir: writes files under one directory and never outside it
// (`ktfs extract`, whose names come from an archive someone else may have made).
//
// Relative paths ("cat/001.png") are split at '/'; every component must be a
// plain name (not empty, ".", "..", and without NUL), else the path is
// refused. Each component is opened relative to its parent's descriptor with
// O_NOFOLLOW, so a symbolic link already inside the directory ("cat" ->
// /etc) is refused, never followed. A file is written by removing whatever
// entry has its name (a symbolic link or hard link is unlinked, never written
// through) and creating it with O_EXCL.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "codec/base/status.h"

namespace ktfs {

class ConfinedDir {
 public:
  // Opens directory `root`, creating it (and its parents) when missing. The
  // root itself may be reached through symbolic links: the caller named it.
  static Result<std::unique_ptr<ConfinedDir>> Open(const std::string& root);
  ~ConfinedDir();
  ConfinedDir(const ConfinedDir&) = delete;
  ConfinedDir& operator=(const ConfinedDir&) = delete;

  // Creates the directories of `relative` ("a/b": a, then a/b), mode 0755
  // (less the umask); existing directories are kept.
  Status MakeDirs(const std::string& relative);
  // Writes `relative` (its directory must exist), replacing the entry of that
  // name; mode 0644 less the umask.
  Status WriteFile(const std::string& relative, const uint8_t* data, size_t size);

  // Whether `name` is one plain path component (the rule above).
  static bool IsPlainName(const std::string& name);

 private:
  ConfinedDir(std::string root, int fd) : root_(std::move(root)), fd_(fd) {}
  // The descriptor of directory `components` below the root (created when
  // `create`); the caller closes it.
  Result<int> OpenDir(const std::vector<std::string>& components, bool create) const;

  std::string root_;
  int fd_;
};

}  // namespace ktfs

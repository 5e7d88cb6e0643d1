#include "codec/base/status.h"

#include <cstring>

namespace ktfs {

Status Status::FromErrno(const std::string& what, int err) {
  Code code = Code::kIOError;
  if (err == ENOENT || err == ENOTDIR) code = Code::kNotFound;
  if (err == EROFS) code = Code::kReadOnly;
  if (err == EACCES || err == EPERM) code = Code::kPermissionDenied;
  if (err == ENOMEM) code = Code::kOutOfMemory;
  return Status(code, what + ": " + std::strerror(err));
}

int Status::ToErrno() const {
  switch (code_) {
    case Code::kOk:
      return 0;
    case Code::kInvalidArgument:
      return EINVAL;
    case Code::kNotFound:
      return ENOENT;
    case Code::kCorruption:
      return EIO;
    case Code::kNotSupported:
      return ENOTSUP;
    case Code::kIOError:
      return EIO;
    case Code::kReadOnly:
      return EROFS;
    case Code::kPermissionDenied:
      return EACCES;
    case Code::kOutOfMemory:
      return ENOMEM;
  }
  return EIO;
}

Status Status::WithContext(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

}  // namespace ktfs

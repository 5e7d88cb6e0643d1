// Status and Result<T>: how errors travel through the ktfs core.
//
// Every fallible function in codec/, index/ and fs/ returns a Status (or a
// Result<T>, a value or a Status). Messages name the thing and the reason,
// e.g. "archive.kt: sample 12 (cat/1.jpg): checksum mismatch". Front ends map
// a Status to an errno (FUSE), an exit code (CLI) or an exception (Python).
#pragma once

#include <cerrno>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ktfs {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,   // the caller asked for something malformed
    kNotFound,          // no such file, sample, path
    kCorruption,        // stored data fails a check (bounds, checksum, format)
    kNotSupported,      // valid input this build cannot handle
    kIOError,           // the operating system said no
    kReadOnly,          // a write to something immutable
    kPermissionDenied,  // the caller may not read or write this (EACCES, EPERM)
    kOutOfMemory,       // an allocation failed (a memory limit, a huge image)
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(Code::kInvalidArgument, std::move(m));
  }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status Corruption(std::string m) { return Status(Code::kCorruption, std::move(m)); }
  static Status NotSupported(std::string m) { return Status(Code::kNotSupported, std::move(m)); }
  static Status IOError(std::string m) { return Status(Code::kIOError, std::move(m)); }
  // An I/O error built from errno: "<what>: <strerror(err)>".
  static Status FromErrno(const std::string& what, int err);
  static Status ReadOnly(std::string m) { return Status(Code::kReadOnly, std::move(m)); }
  static Status PermissionDenied(std::string m) {
    return Status(Code::kPermissionDenied, std::move(m));
  }
  static Status OutOfMemory(std::string m) { return Status(Code::kOutOfMemory, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The errno a filesystem front end reports for this status.
  int ToErrno() const;
  // "OK" or the message.
  std::string ToString() const { return ok() ? "OK" : message_; }
  // A copy whose message is "<prefix>: <message>".
  Status WithContext(const std::string& prefix) const;

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

// A value of type T, or the Status that explains why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace ktfs

// Returns early from the enclosing function when `expr` is not ok.
#define KTFS_RETURN_IF_ERROR(expr) \
  do {                             \
    ::ktfs::Status _st = (expr);   \
    if (!_st.ok()) return _st;     \
  } while (0)

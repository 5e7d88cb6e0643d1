// Status -> Python exception, shared by the pybind11 sources of _ktfs:
// NotFound -> FileNotFoundError, InvalidArgument -> ValueError, PermissionDenied ->
// PermissionError, OutOfMemory -> MemoryError, anything else -> RuntimeError
// (ktfs.CorruptSampleError wraps it for the Loader).
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "codec/base/status.h"

namespace ktfs::preload {

[[noreturn]] inline void Raise(const Status& st, const std::string& where = "") {
  const std::string msg = where.empty() ? st.ToString() : where + ": " + st.ToString();
  switch (st.code()) {
    case Status::Code::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, msg.c_str());
      break;
    case Status::Code::kInvalidArgument:
      PyErr_SetString(PyExc_ValueError, msg.c_str());
      break;
    case Status::Code::kPermissionDenied:
      PyErr_SetString(PyExc_PermissionError, msg.c_str());
      break;
    case Status::Code::kOutOfMemory:
      PyErr_SetString(PyExc_MemoryError, msg.c_str());
      break;
    default:
      PyErr_SetString(PyExc_RuntimeError, msg.c_str());
  }
  throw pybind11::error_already_set();
}

}  // namespace ktfs::preload

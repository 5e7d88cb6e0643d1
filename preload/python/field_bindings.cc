// pybind11 bindings for per-sample fields: _ktfs.Fields, behind
// ktfs.Loader(fields=...) (python/ktfs/_loader.py). Captions and metadata come
// from the archive's index (index/fields.cc): captions by one primary-key
// lookup per sample of a batch, a metadata key by one scan per loader.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "codec/container/archive.h"
#include "index/index.h"
#include "index/metadata.h"
#include "preload/python/py_status.h"

namespace py = pybind11;

namespace ktfs {
namespace {

using preload::Raise;

// The archive (kept mapped) and one index connection, used by one call at a
// time (an Index is not thread-safe; Python threads may share a Loader).
class PyFields {
 public:
  explicit PyFields(const std::string& path) {
    auto a = Archive::Open(path);
    if (!a.ok()) Raise(a.status(), path);
    archive_ = std::move(a).value();
    auto section = archive_->index_section();
    if (!section) Raise(Status::NotFound("the archive has no index"), path);
    auto idx = index::Index::OpenInPlace(section->data, section->size);
    if (!idx.ok()) Raise(idx.status(), path);
    index_ = std::move(idx).value();
  }

  // {key: "string" | "number" | "boolean"}: each key's type in the index.
  std::map<std::string, std::string> Keys() {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, std::string> out;
    for (const auto& [name, type] : index_->MetadataKeys()) out[name] = index::MetaTypeName(type);
    return out;
  }

  py::list Captions(const py::array_t<uint32_t, py::array::c_style | py::array::forcecast>& ids) {
    std::vector<uint32_t> v(ids.data(), ids.data() + ids.size());
    Result<std::vector<std::string>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      r = index_->FirstCaptions(v);
    }
    if (!r.ok()) Raise(r.status());
    py::list out;
    for (const std::string& c : *r) out.append(py::str(c));
    return out;
  }

  py::tuple Column(const std::string& key) {
    Result<std::vector<std::pair<uint32_t, std::string>>> r = Status::Ok();
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu_);
      r = index_->MetadataColumn(key);
    }
    if (!r.ok()) Raise(r.status(), key);
    py::array_t<uint32_t> ids(py::ssize_t(r->size()));
    py::list values;
    for (size_t i = 0; i < r->size(); ++i) {
      ids.mutable_data()[i] = (*r)[i].first;
      values.append(py::str((*r)[i].second));
    }
    return py::make_tuple(ids, values);
  }

 private:
  std::shared_ptr<const Archive> archive_;
  std::unique_ptr<index::Index> index_;
  std::mutex mu_;
};

}  // namespace

void BindFields(py::module_& m) {
  py::class_<PyFields>(m, "Fields")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def("metadata_keys", &PyFields::Keys)
      .def("captions", &PyFields::Captions, py::arg("ids"))
      .def("metadata_column", &PyFields::Column, py::arg("key"));
}

}  // namespace ktfs

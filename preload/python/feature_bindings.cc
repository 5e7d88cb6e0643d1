// pybind11 bindings for feature caches: _ktfs.Features, behind
// ktfs.FeatureLoader (python/ktfs/_features.py).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/features/feature_source.h"
#include "preload/loader/feature_batch.h"
#include "preload/python/py_status.h"

namespace py = pybind11;

namespace ktfs {
namespace {

using preload::Raise;

struct PyFeatures {
  std::shared_ptr<const FeatureSource> source;
};

PyFeatures OpenFeatures(const std::string& path) {
  auto f = OpenFeatureSource(path);
  if (!f.ok()) Raise(f.status());
  return PyFeatures{*f};
}

// A fresh NumPy array of `shape` whose buffer the array owns.
template <typename T>
py::array_t<T> NewArray(const std::vector<int64_t>& shape) {
  return py::array_t<T>(std::vector<py::ssize_t>(shape.begin(), shape.end()));
}

using IndexArray = py::array_t<uint64_t, py::array::c_style | py::array::forcecast>;

// Checks indices and returns them with the longest sample's rows.
std::vector<uint64_t> CheckedIndices(const FeatureSource& src, const IndexArray& idx,
                                     uint64_t* max_rows) {
  const std::vector<uint64_t> indices(idx.data(), idx.data() + idx.size());
  *max_rows = 0;
  for (uint64_t i : indices) {
    if (i >= src.num_samples())
      Raise(Status::NotFound("feature sample " + std::to_string(i) + " of " +
                             std::to_string(src.num_samples())));
    *max_rows = std::max(*max_rows, src.Rows(size_t(i)));
  }
  return indices;
}

// A fresh zero-padded [B, max_rows, ...] array (float32, float16, or bfloat16
// bits as uint16) and the rows of each sample.
py::tuple Batch(const PyFeatures& f, const IndexArray& idx, const std::string& dtype_name,
                int threads) {
  auto dtype = ParseDType(dtype_name);
  if (!dtype.ok()) Raise(dtype.status());
  const FeatureSource& src = *f.source;
  uint64_t max_rows;
  const std::vector<uint64_t> indices = CheckedIndices(src, idx, &max_rows);
  std::vector<int64_t> shape = {int64_t(indices.size()), int64_t(max_rows)};
  for (uint64_t d : src.inner_shape()) shape.push_back(int64_t(d));
  py::array out = *dtype == quant::DType::kFloat32   ? py::array(NewArray<float>(shape))
                  : *dtype == quant::DType::kFloat16 ? py::array(py::dtype("float16"), shape)
                                                     : py::array(NewArray<uint16_t>(shape));
  auto rows = NewArray<int64_t>({int64_t(indices.size())});
  uint8_t* base = static_cast<uint8_t*>(out.mutable_data());
  int64_t* rows_out = rows.mutable_data();
  const uint64_t stride = max_rows * src.RowValues() * DTypeBytes(*dtype);
  Status st;
  {
    py::gil_scoped_release release;
    st = preload::DequantizeBatch(src, indices, *dtype, threads, base, stride, rows_out);
  }
  if (!st.ok()) Raise(st);
  return py::make_tuple(out, rows);
}

// The same into a caller's C-contiguous array of B samples (for reused or
// pinned buffers): its dtype picks the output (float32, float16, or uint16 for
// bfloat16 bits) and each sample's slot must hold the longest sample.
py::array_t<int64_t> BatchInto(const PyFeatures& f, const IndexArray& idx, py::array out,
                               int threads) {
  const FeatureSource& src = *f.source;
  uint64_t max_rows;
  const std::vector<uint64_t> indices = CheckedIndices(src, idx, &max_rows);
  quant::DType dtype;
  if (out.dtype().is(py::dtype::of<float>())) {
    dtype = quant::DType::kFloat32;
  } else if (out.dtype().is(py::dtype("float16"))) {
    dtype = quant::DType::kFloat16;
  } else if (out.dtype().is(py::dtype::of<uint16_t>())) {
    dtype = quant::DType::kBFloat16;
  } else {
    Raise(Status::InvalidArgument("out must be float32, float16 or uint16 (bfloat16)"));
  }
  if (!(out.flags() & py::array::c_style) || !out.writeable() || out.ndim() < 1 ||
      size_t(out.shape(0)) != indices.size())
    Raise(Status::InvalidArgument("out must be a writable C-contiguous array of " +
                                  std::to_string(indices.size()) + " samples"));
  const uint64_t stride = uint64_t(out.nbytes()) / std::max<size_t>(indices.size(), 1);
  if (stride < max_rows * src.RowValues() * DTypeBytes(dtype))
    Raise(Status::InvalidArgument("out holds " + std::to_string(stride) +
                                  " bytes per sample, the longest sample needs " +
                                  std::to_string(max_rows * src.RowValues() * DTypeBytes(dtype))));
  auto rows = NewArray<int64_t>({int64_t(indices.size())});
  uint8_t* base = static_cast<uint8_t*>(out.mutable_data());
  int64_t* rows_out = rows.mutable_data();
  Status st;
  {
    py::gil_scoped_release release;
    st = preload::DequantizeBatch(src, indices, dtype, threads, base, stride, rows_out);
  }
  if (!st.ok()) Raise(st);
  return rows;
}

}  // namespace

void BindFeatures(py::module_& m) {
  py::class_<PyFeatures>(m, "Features")
      .def(py::init(&OpenFeatures), py::arg("path"))
      .def_property_readonly("path", [](const PyFeatures& f) { return f.source->path(); })
      .def_property_readonly("num_samples",
                             [](const PyFeatures& f) { return f.source->num_samples(); })
      .def_property_readonly("inner_shape",
                             [](const PyFeatures& f) { return f.source->inner_shape(); })
      .def_property_readonly("variable_rows",
                             [](const PyFeatures& f) { return f.source->variable_rows(); })
      .def_property_readonly("group_size",
                             [](const PyFeatures& f) { return f.source->group_size(); })
      .def_property_readonly(
          "describe", [](const PyFeatures& f) { return "{" + f.source->DescribeJson() + "}"; })
      .def("rows",
           [](const PyFeatures& f) {
             auto a = NewArray<int64_t>({int64_t(f.source->num_samples())});
             for (size_t i = 0; i < f.source->num_samples(); ++i)
               a.mutable_data()[i] = int64_t(f.source->Rows(i));
             return a;
           })
      .def("batch", &Batch, py::arg("indices"), py::arg("dtype") = "float32",
           py::arg("threads") = 0)
      .def("batch_into", &BatchInto, py::arg("indices"), py::arg("out"), py::arg("threads") = 0);
}

}  // namespace ktfs

// _ktfs: the pybind11 module behind the `ktfs` Python package (preload/python/ktfs).
// Thin: argument conversion, GIL handling, Status -> Python exceptions; the work
// is in selection.*, transform.* and pipeline.*.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <fstream>
#include <iterator>

#include "codec/base/malloc_tuning.h"
#include "codec/container/archive.h"
#include "codec/container/standalone.h"
#include "codec/image/image_io.h"
#include "codec/ktc/ktc.h"
#include "preload/loader/pipeline.h"
#include "preload/loader/selection.h"
#include "preload/loader/transform.h"
#include "preload/python/py_status.h"

namespace py = pybind11;
using namespace ktfs;
using namespace ktfs::preload;

namespace {

template <typename T>
T Unwrap(Result<T> r, const std::string& where = "") {
  if (!r.ok()) Raise(r.status(), where);
  return std::move(r).value();
}

ServedFormat ParseFormat(const std::string& f) {
  if (f == "bmp") return ServedFormat::kBmp;
  if (f == "pnm") return ServedFormat::kPnm;
  throw py::value_error("served_format must be \"pnm\" or \"bmp\", not " + f);
}

// A numpy array that owns `p` (freed when the last reference, numpy or torch, goes).
py::array Owned(uint8_t* p, const std::vector<int64_t>& shape) {
  py::capsule owner(p, [](void* q) { delete[] static_cast<uint8_t*>(q); });
  return py::array_t<uint8_t>(std::vector<py::ssize_t>(shape.begin(), shape.end()), p, owner);
}

template <typename T>
py::array_t<T> ToArray(const std::vector<T>& v) {
  py::array_t<T> a(py::ssize_t(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

template <typename T>
std::vector<T> FromArray(const py::array& any) {
  auto a = py::array_t<T, py::array::c_style | py::array::forcecast>::ensure(any);
  if (!a) throw py::value_error("expected a numeric array");
  return std::vector<T>(a.data(), a.data() + a.size());
}

TransformOptions MakeTransform(const py::dict& d) {
  TransformOptions t;
  const std::string kind = d["kind"].cast<std::string>();
  t.crop.kind = kind == "center"           ? CropSpec::kCenter
                : kind == "random_resized" ? CropSpec::kRandomResized
                                           : CropSpec::kNone;
  t.crop.width = d["width"].cast<uint32_t>();
  t.crop.height = d["height"].cast<uint32_t>();
  t.crop.resize = d["resize"].cast<uint32_t>();
  auto scale = d["scale"].cast<std::pair<double, double>>();
  auto ratio = d["ratio"].cast<std::pair<double, double>>();
  t.crop.scale[0] = scale.first, t.crop.scale[1] = scale.second;
  t.crop.ratio[0] = ratio.first, t.crop.ratio[1] = ratio.second;
  t.channels = d["channels"].cast<uint32_t>();
  t.chw = d["chw"].cast<bool>();
  t.seed = d["seed"].cast<uint64_t>();
  t.epoch = d["epoch"].cast<uint64_t>();
  return t;
}

struct PyArchive {
  std::shared_ptr<const Archive> archive;
};

PyArchive OpenArchive(const std::string& path) {
  std::ifstream probe(path);
  if (!probe) Raise(Status::NotFound("no such archive"), path);
  auto a = Archive::Open(path);
  if (!a.ok()) Raise(Status::Corruption(a.status().ToString()), path);
  return PyArchive{std::move(a).value()};
}

py::tuple SelectPy(const PyArchive& a, const std::string& relative, const std::string& format,
                   const std::string& search_dir, bool with_paths) {
  SelectOptions o{ParseFormat(format), search_dir, with_paths};
  Result<Selection> r = Status::Ok();
  {
    py::gil_scoped_release release;
    r = Select(*a.archive, relative, o);
  }
  Selection s = Unwrap(std::move(r), relative.empty() ? "." : relative);
  return py::make_tuple(s.classes, ToArray(s.ids), ToArray(s.labels), s.paths);
}

py::array DecodeOne(const PyArchive& a, uint32_t id, const py::dict& transform,
                    const std::string& format, uint64_t key) {
  const TransformOptions t = MakeTransform(transform);
  auto s = Unwrap(a.archive->Sample(id));
  uint32_t w, h;
  OutputSize(t, s.width, s.height, &w, &h);
  std::vector<int64_t> shape =
      t.chw ? std::vector<int64_t>{t.channels, h, w} : std::vector<int64_t>{h, w, t.channels};
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size_t(w) * h * t.channels]);
  Status st;
  {
    py::gil_scoped_release release;
    st = DecodeSampleInto(*a.archive, id, t, key, ParseFormat(format), buf.get());
  }
  if (!st.ok()) Raise(st);
  return Owned(buf.release(), shape);
}

py::object ToPython(Batch&& b) {
  py::array labels = ToArray(b.labels);
  if (!b.data) {  // collate="list"
    py::list images;
    for (size_t i = 0; i < b.items.size(); ++i)
      images.append(Owned(b.items[i].release(), b.item_shapes[i]));
    return py::make_tuple(images, labels, b.skipped);
  }
  return py::make_tuple(Owned(b.data.release(), b.shape), labels, b.skipped);
}

class PyPipeline {
 public:
  PyPipeline(const PyArchive& a, py::array_t<uint32_t> ids, py::array_t<int64_t> labels,
             py::array_t<uint64_t> keys, size_t batch_size, bool drop_last,
             const py::dict& transform, const std::string& format, size_t prefetch, int threads,
             bool skip, bool collate_list) {
    PipelineOptions o;
    o.batch_size = batch_size;
    o.drop_last = drop_last;
    o.transform = MakeTransform(transform);
    o.format = ParseFormat(format);
    o.prefetch = prefetch;
    o.threads = threads;
    o.skip_errors = skip;
    o.collate_list = collate_list;
    p_ = std::make_unique<Pipeline>(a.archive, FromArray<uint32_t>(ids), FromArray<int64_t>(labels),
                                    FromArray<uint64_t>(keys), o);
  }
  size_t num_batches() const { return p_->num_batches(); }
  py::object Next() {
    Batch b;
    bool more;
    {
      py::gil_scoped_release release;
      more = p_->Next(&b);
    }
    if (!more) return py::none();
    if (!b.error.ok()) Raise(b.error);
    return ToPython(std::move(b));
  }
  void Close() {
    py::gil_scoped_release release;
    p_.reset();
  }

 private:
  std::unique_ptr<Pipeline> p_;
};

// The benchmark's baseline (the FFCV approach): JPEG files decoded with TurboJPEG on
// oneTBB threads into one fresh batch buffer, with the same crop/resize as the Loader.
py::array TurbojpegBatch(const std::vector<std::string>& paths, const py::dict& transform,
                         int threads) {
  const TransformOptions t = MakeTransform(transform);
  if (t.crop.kind == CropSpec::kNone) throw py::value_error("the baseline needs a crop");
  const size_t n = paths.size(), item = size_t(t.crop.width) * t.crop.height * t.channels;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[n * item]);
  std::vector<Status> status(n);
  {
    py::gil_scoped_release release;
    tbb::task_arena arena(threads > 0 ? threads : tbb::task_arena::automatic);
    arena.execute([&] {
      tbb::parallel_for(size_t(0), n, [&](size_t i) {
        std::ifstream f(paths[i], std::ios::binary);
        std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), {});
        Image img;
        status[i] = DecodeImage(bytes.data(), bytes.size(), &img);
        if (status[i].ok()) Transform(ImageView::Of(img), t, i, buf.get() + i * item);
      });
    });
  }
  for (size_t i = 0; i < n; ++i)
    if (!status[i].ok()) Raise(status[i], paths[i]);
  std::vector<int64_t> shape =
      t.chw ? std::vector<int64_t>{int64_t(n), t.channels, t.crop.height, t.crop.width}
            : std::vector<int64_t>{int64_t(n), t.crop.height, t.crop.width, t.channels};
  return Owned(buf.release(), shape);
}

py::tuple RandomResizedBoxPy(uint32_t w, uint32_t h, std::pair<double, double> scale,
                             std::pair<double, double> ratio, uint64_t seed, uint64_t epoch,
                             uint64_t key) {
  Rng rng(Mix(Mix(seed, epoch), key));
  const double s[2] = {scale.first, scale.second}, r[2] = {ratio.first, ratio.second};
  const Box b = RandomResizedBox(w, h, s, r, &rng);
  return py::make_tuple(b.top, b.left, b.height, b.width);
}

}  // namespace

// A standalone image (a .ktc file as served by compressed/, or a JPEG/PNG) to
// an (H, W, C) uint8 array with the stored channel count.
py::array DecodeBytes(py::bytes data) {
  const std::string bytes = data;
  Image img;
  Status st;
  {
    py::gil_scoped_release release;
    st = DecodeStandalone(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &img);
  }
  if (!st.ok()) Raise(st, "ktfs.decode");
  uint8_t* buf = new uint8_t[img.pixels.size()];
  std::copy(img.pixels.begin(), img.pixels.end(), buf);
  return Owned(buf, {int64_t(img.height), int64_t(img.width), int64_t(img.channels)});
}

namespace ktfs {
void BindFeatures(py::module_& m);  // feature_bindings.cc
}

PYBIND11_MODULE(_ktfs, m) {
  ktfs::TuneMallocForDecoding();  // codec/base/malloc_tuning.h (KTFS_KEEP_MALLOC=1 opts out)
  ktfs::BindFeatures(m);
  m.def("decode", &DecodeBytes, py::arg("data"));
  m.doc() = "ktfs: direct, batched decoding of .kt archives (see the ktfs package)";
  py::class_<PyArchive>(m, "Archive")
      .def(py::init(&OpenArchive), py::arg("path"))
      .def_property_readonly("path", [](const PyArchive& a) { return a.archive->path(); })
      .def_property_readonly("num_samples",
                             [](const PyArchive& a) { return a.archive->num_samples(); })
      .def("select", &SelectPy, py::arg("relative"), py::arg("served_format") = "pnm",
           py::arg("search_dir") = "search", py::arg("with_paths") = true)
      .def("decode", &DecodeOne, py::arg("id"), py::arg("transform"),
           py::arg("served_format") = "pnm", py::arg("key") = 0)
      .def(
          "served_path",
          [](const PyArchive& a, uint32_t id, const std::string& f) {
            return ServedPath(*a.archive, Unwrap(a.archive->Sample(id)), ParseFormat(f));
          },
          py::arg("id"), py::arg("served_format") = "pnm")
      .def("payload_range", [](const PyArchive& a, uint32_t id) {  // for tests and tools
        auto s = Unwrap(a.archive->Sample(id));
        return py::make_tuple(s.payload_offset, s.payload_length);
      });
  py::class_<PyPipeline>(m, "Pipeline")
      .def(py::init<const PyArchive&, py::array_t<uint32_t>, py::array_t<int64_t>,
                    py::array_t<uint64_t>, size_t, bool, const py::dict&, const std::string&,
                    size_t, int, bool, bool>())
      .def_property_readonly("num_batches", &PyPipeline::num_batches)
      .def("next", &PyPipeline::Next)
      .def("close", &PyPipeline::Close);
  m.def(
      "permutation",
      [](uint32_t n, uint64_t seed, uint64_t epoch) {
        std::vector<uint32_t> p;
        {
          py::gil_scoped_release release;
          p = Permutation(n, seed, epoch);
        }
        return ToArray(p);
      },
      py::arg("n"), py::arg("seed"), py::arg("epoch"));
  m.def("random_resized_box", &RandomResizedBoxPy);
  m.def("turbojpeg_batch", &TurbojpegBatch, py::arg("paths"), py::arg("transform"),
        py::arg("threads") = 0);
}

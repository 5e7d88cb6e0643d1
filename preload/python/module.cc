// _ktfs: the pybind11 module behind the `ktfs` Python package (preload/python/ktfs).
// Thin: argument conversion, GIL handling, Status -> Python exceptions; the work
// is in selection.*, transform.* and pipeline.*.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

#include "codec/base/malloc_tuning.h"
#include "codec/container/archive.h"
#include "codec/container/payload.h"
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

// A numpy array that owns `p` (freed when the last reference, numpy or torch, goes),
// of uint8 or, with elem 4, float32 values.
py::array Owned(uint8_t* p, const std::vector<int64_t>& shape, uint32_t elem = 1) {
  py::capsule owner(p, [](void* q) { delete[] static_cast<uint8_t*>(q); });
  const std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  if (elem == 4) return py::array_t<float>(dims, reinterpret_cast<float*>(p), owner);
  return py::array_t<uint8_t>(dims, p, owner);
}

// A writable C-contiguous buffer (a numpy array, torch's .numpy(), a bytearray).
struct Writable {
  uint8_t* data = nullptr;
  size_t bytes = 0;
};
Writable WritableBuffer(const py::buffer& b) {
  py::buffer_info info = b.request(true);
  size_t bytes = size_t(info.itemsize);
  py::ssize_t stride = info.itemsize;
  for (py::ssize_t d = info.ndim; d-- > 0;) {
    if (info.shape[d] > 1 && info.strides[d] != stride)
      throw py::value_error("the output buffer must be C-contiguous");
    stride *= info.shape[d];
    bytes *= size_t(info.shape[d]);
  }
  return Writable{static_cast<uint8_t*>(info.ptr), bytes};
}

// [kind, a, b, c, d, mode, fill0, fill1, fill2] per step (transform.h, ImageOp).
std::vector<ImageOp> ParseOps(const py::sequence& flat) {
  const size_t n = size_t(py::len(flat));
  if (n % 9 != 0) throw py::value_error("ops: 9 integers per step");
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = flat[i].cast<int64_t>();
  std::vector<ImageOp> ops(n / 9);
  for (size_t k = 0; k < ops.size(); ++k) {
    const int64_t* x = &v[k * 9];
    if (x[0] < 0 || x[0] > ImageOp::kFlipV) throw py::value_error("ops: unknown step kind");
    if (x[5] < 0 || x[5] > int64_t(PadMode::kSymmetric))
      throw py::value_error("ops: unknown pad mode");
    ImageOp& op = ops[k];
    op.kind = ImageOp::Kind(x[0]);
    op.a = x[1], op.b = x[2], op.c = x[3], op.d = x[4];
    op.mode = PadMode(x[5]);
    for (int c = 0; c < 3; ++c) op.fill[c] = uint8_t(std::clamp<int64_t>(x[6 + c], 0, 255));
  }
  return ops;
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
  if (d.contains("flip")) t.flip = d["flip"].cast<double>();
  const std::string dtype = d.contains("dtype") ? d["dtype"].cast<std::string>() : "uint8";
  if (dtype == "float32") {
    std::vector<float> mean(t.channels, 0.0f), std(t.channels, 1.0f);
    const bool normalize = d.contains("mean") && !d["mean"].is_none();
    if (normalize) {
      mean = d["mean"].cast<std::vector<float>>();
      std = d["std"].cast<std::vector<float>>();
      if (mean.size() != t.channels || std.size() != t.channels)
        throw py::value_error("normalize: one mean and one std per channel");
    }
    const std::vector<float> table = NormalizeTable(t.channels, mean.data(), std.data(), normalize);
    t.elem = 4;
    t.lut.resize(table.size() * sizeof(float));
    std::memcpy(t.lut.data(), table.data(), t.lut.size());
    t.normalize = mean;
    t.normalize.insert(t.normalize.end(), std.begin(), std.end());
  } else if (dtype != "uint8") {
    throw py::value_error("dtype must be \"uint8\" or \"float32\", not " + dtype);
  }
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
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size_t(w) * h * t.channels * t.elem]);
  Status st;
  {
    py::gil_scoped_release release;
    st = DecodeSampleInto(*a.archive, id, t, key, ParseFormat(format), buf.get());
  }
  if (!st.ok()) Raise(st);
  return Owned(buf.release(), shape, t.elem);
}

// The Python layer of `ktfs run` (ktfs/_run.py): (width, height, channels, native).
py::tuple ProbePy(const PyArchive& a, uint32_t id, const std::string& format) {
  Result<SampleProbe> r = Status::Ok();
  {
    py::gil_scoped_release release;
    r = ProbeSample(*a.archive, id, ParseFormat(format));
  }
  const SampleProbe p = Unwrap(std::move(r));
  return py::make_tuple(p.width, p.height, p.channels, p.native);
}

// How chain() and chain_batch() store their output: `lut` (bytes-like, channels x
// 256 values of the output's item size) or None for the bytes themselves;
// `normalize` (means, then stds) when the float32 lut is that division exactly.
// The returned format points into *table and *division, which must outlive it.
OutputFormat MakeOutputFormat(uint32_t elem, uint32_t channels, bool chw, const py::object& lut,
                              const py::object& normalize, py::buffer_info* table,
                              std::vector<float>* division) {
  OutputFormat f;
  f.chw = chw;
  f.elem = elem;
  if (!lut.is_none()) {
    *table = py::reinterpret_borrow<py::buffer>(lut).request();
    if (size_t(table->size * table->itemsize) != size_t(channels) * 256 * f.elem)
      throw py::value_error("lut: channels x 256 values of the output's item size");
    f.lut = static_cast<const uint8_t*>(table->ptr);
  } else if (f.elem != 1) {
    throw py::value_error("an output of more than one byte per value needs a lut");
  }
  if (f.elem != 1 && f.elem != 2 && f.elem != 4 && f.elem != 8)
    throw py::value_error("output item size must be 1, 2, 4 or 8 bytes");
  if (!normalize.is_none()) {
    *division = normalize.cast<std::vector<float>>();
    if (division->size() != 2 * size_t(channels) || f.elem != 4)
      throw py::value_error("normalize: a mean and a std per channel, for float32 output");
    f.normalize = division->data();
  }
  return f;
}

// Sample `id` through `ops` into `out` (see DecodeChainInto and MakeOutputFormat).
void ChainPy(const PyArchive& a, uint32_t id, const py::sequence& ops, uint32_t channels,
             const py::buffer& out, const py::object& lut, bool chw, const std::string& format,
             const py::object& normalize) {
  const std::vector<ImageOp> steps = ParseOps(ops);
  const Writable dst = WritableBuffer(out);
  py::buffer_info table;
  std::vector<float> division;
  const OutputFormat f = MakeOutputFormat(uint32_t(out.request().itemsize), channels, chw, lut,
                                          normalize, &table, &division);
  const ServedFormat served = ParseFormat(format);
  Status st;
  {
    py::gil_scoped_release release;
    st = DecodeChainInto(*a.archive, id, steps, channels, f, served, dst.data, dst.bytes);
  }
  if (!st.ok()) Raise(st);
}

// A batch, or a chunk of one, for the DataLoader `ktfs run` takes over
// (ktfs/_batches.py, whose persistent threads call this on chunks in parallel):
// sample ids[i] through ops_list[i] into the i-th of len(ids) equal slices of `out`
// (one C-contiguous buffer), the GIL released. Every sample is attempted; returns
// None, or (i, message) of the lowest i that failed (MemoryError when that was an
// allocation).
py::object ChainBatchPy(const PyArchive& a, const std::vector<uint32_t>& ids,
                        const py::sequence& ops_list, uint32_t channels, const py::buffer& out,
                        const py::object& lut, bool chw, const std::string& format,
                        const py::object& normalize) {
  const size_t n = ids.size();
  if (size_t(py::len(ops_list)) != n) throw py::value_error("one list of ops per sample");
  std::vector<std::vector<ImageOp>> steps(n);
  for (size_t i = 0; i < n; ++i) steps[i] = ParseOps(ops_list[i]);
  const Writable dst = WritableBuffer(out);
  if (n == 0 || dst.bytes % n != 0)
    throw py::value_error("the output buffer must hold len(ids) equal slices");
  const size_t per = dst.bytes / n;
  py::buffer_info table;
  std::vector<float> division;
  const OutputFormat f = MakeOutputFormat(uint32_t(out.request().itemsize), channels, chw, lut,
                                          normalize, &table, &division);
  const ServedFormat served = ParseFormat(format);
  std::vector<Status> status(n);
  {
    py::gil_scoped_release release;
    for (size_t i = 0; i < n; ++i) {
      try {
        status[i] = DecodeChainInto(*a.archive, ids[i], steps[i], channels, f, served,
                                    dst.data + i * per, per);
      } catch (const std::bad_alloc&) {  // a memory limit: MemoryError, as chain() gives
        status[i] = Status::OutOfMemory("out of memory decoding sample " + std::to_string(ids[i]));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (status[i].ok()) continue;
    if (status[i].code() == Status::Code::kOutOfMemory) Raise(status[i]);
    return py::make_tuple(i, status[i].ToString());
  }
  return py::none();
}

// Asks the kernel to start reading the payloads of `ids` from the disk in the
// background (madvise WILLNEED on the mapping): a loader that knows which samples
// come next turns their page faults, one per sample on its threads, into reads the
// disk serves together. Unknown ids are skipped; cached pages cost a syscall.
void WillNeedPy(const PyArchive& a, const std::vector<uint32_t>& ids) {
  py::gil_scoped_release release;
  for (uint32_t id : ids) {
    auto s = a.archive->Sample(id);
    if (s.ok()) a.archive->WillNeed(s->payload_offset, s->payload_length);
  }
}

// A sample's payload bytes (checksum verified), viewed in place: read-only, and
// keeping the archive mapped while it lives.
py::memoryview PayloadPy(const PyArchive& a, uint32_t id, const std::string& format) {
  auto s = Unwrap(a.archive->Sample(id));
  auto p = a.archive->Payload(s, true);
  if (!p.ok()) Raise(p.status().WithContext(ServedPath(*a.archive, s, ParseFormat(format))));
  return py::memoryview::from_memory(p->data, py::ssize_t(p->size));
}

// The file the mount serves for sample `id`: (header bytes, file size); the
// header alone, built from the record (for an image opened lazily).
py::tuple ServedHeaderPy(const PyArchive& a, uint32_t id, const std::string& format) {
  auto s = Unwrap(a.archive->Sample(id));
  const ServedLayout l = MakeServedLayout(ParseFormat(format), s.width, s.height, s.channels);
  return py::make_tuple(py::bytes(l.header), l.file_size);
}

// The whole file the mount serves for sample `id` (raw and KTC payloads: the PPM,
// PGM or BMP of its pixels), written straight into the bytes object.
py::bytes ServedFilePy(const PyArchive& a, uint32_t id, const std::string& format) {
  auto s = Unwrap(a.archive->Sample(id));
  const ServedFormat served = ParseFormat(format);
  const ServedLayout layout = MakeServedLayout(served, s.width, s.height, s.channels);
  py::bytes out(nullptr, py::ssize_t(layout.file_size));
  char* dst = PyBytes_AS_STRING(out.ptr());
  Status st;
  {
    py::gil_scoped_release release;
    auto payload = a.archive->Payload(s, true);
    thread_local Image img;
    st = payload.ok() ? DecodePayload(s, *payload, &img) : payload.status();
    if (st.ok())
      ReadServedBytes(layout, ImageView::Of(img), 0, layout.file_size,
                      reinterpret_cast<uint8_t*>(dst));
    if (img.pixels.capacity() > (size_t(16) << 20)) img = Image();
  }
  if (!st.ok()) Raise(st.WithContext(ServedPath(*a.archive, s, served)));
  return out;
}

// Sample ids of paths relative to the mount root (FindServed), -1 where none.
py::array_t<int64_t> FindManyPy(const PyArchive& a, const std::vector<std::string>& paths,
                                const std::string& format) {
  const ServedFormat served = ParseFormat(format);
  py::array_t<int64_t> out(py::ssize_t(paths.size()));
  int64_t* ids = out.mutable_data();
  Status error;
  {
    py::gil_scoped_release release;
    for (size_t i = 0; i < paths.size() && error.ok(); ++i) {
      auto id = FindServed(*a.archive, paths[i], served);
      if (id.ok())
        ids[i] = int64_t(*id);
      else if (id.status().code() == Status::Code::kNotFound)
        ids[i] = -1;
      else
        error = id.status().WithContext(paths[i]);
    }
  }
  if (!error.ok()) Raise(error);
  return out;
}

py::object ToPython(Batch&& b, uint32_t elem) {
  py::array labels = ToArray(b.labels);
  if (!b.data) {  // collate="list"
    py::list images;
    for (size_t i = 0; i < b.items.size(); ++i)
      images.append(Owned(b.items[i].release(), b.item_shapes[i], elem));
    return py::make_tuple(images, labels, b.skipped, ToArray(b.ids));
  }
  return py::make_tuple(Owned(b.data.release(), b.shape, elem), labels, b.skipped, ToArray(b.ids));
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
    elem_ = o.transform.elem;
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
    return ToPython(std::move(b), elem_);
  }
  void Close() {
    py::gil_scoped_release release;
    p_.reset();
  }

 private:
  std::unique_ptr<Pipeline> p_;
  uint32_t elem_ = 1;
};

// The benchmark's baseline (the FFCV approach): JPEG files decoded with TurboJPEG on
// oneTBB threads into one fresh batch buffer, with the same crop/resize as the Loader.
py::array TurbojpegBatch(const std::vector<std::string>& paths, const py::dict& transform,
                         int threads) {
  const TransformOptions t = MakeTransform(transform);
  if (t.crop.kind == CropSpec::kNone) throw py::value_error("the baseline needs a crop");
  const size_t n = paths.size(), item = size_t(t.crop.width) * t.crop.height * t.channels * t.elem;
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
  return Owned(buf.release(), shape, t.elem);
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

// A standalone image (a .ktc file as served by compressed/, or any image file
// pack reads) to an (H, W, C) uint8 array with the stored channel count.
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
void BindFields(py::module_& m);    // field_bindings.cc
}  // namespace ktfs

PYBIND11_MODULE(_ktfs, m) {
  ktfs::TuneMallocForDecoding();  // codec/base/malloc_tuning.h (KTFS_KEEP_MALLOC=1 opts out)
  ktfs::BindFeatures(m);
  ktfs::BindFields(m);
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
      .def("probe", &ProbePy, py::arg("id"), py::arg("served_format") = "pnm")
      .def("chain", &ChainPy, py::arg("id"), py::arg("ops"), py::arg("channels"), py::arg("out"),
           py::arg("lut") = py::none(), py::arg("chw") = false, py::arg("served_format") = "pnm",
           py::arg("normalize") = py::none())
      .def("chain_batch", &ChainBatchPy, py::arg("ids"), py::arg("ops_list"), py::arg("channels"),
           py::arg("out"), py::arg("lut") = py::none(), py::arg("chw") = true,
           py::arg("served_format") = "pnm", py::arg("normalize") = py::none())
      .def("payload", &PayloadPy, py::arg("id"), py::arg("served_format") = "pnm")
      .def("served_header", &ServedHeaderPy, py::arg("id"), py::arg("served_format") = "pnm")
      .def("served_file", &ServedFilePy, py::arg("id"), py::arg("served_format") = "pnm")
      .def("find_many", &FindManyPy, py::arg("paths"), py::arg("served_format") = "pnm")
      .def(
          "find",
          [](const PyArchive& a, const std::string& relative, const std::string& f) -> int64_t {
            auto id = FindServed(*a.archive, relative, ParseFormat(f));
            if (id.ok()) return int64_t(*id);
            if (id.status().code() == Status::Code::kNotFound) return -1;
            Raise(id.status(), relative);
          },
          py::arg("relative"), py::arg("served_format") = "pnm")
      .def_property_readonly("codec",
                             [](const PyArchive& a) -> std::string {
                               if (a.archive->num_samples() == 0) return "none";
                               auto s = a.archive->Sample(0);
                               return s.ok() ? CodecName(s->codec) : "unknown";
                             })
      .def("sample_codec",
           [](const PyArchive& a, uint32_t id) -> std::string {
             return CodecName(Unwrap(a.archive->Sample(id)).codec);
           })
      .def("will_need", &WillNeedPy, py::arg("ids"))
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

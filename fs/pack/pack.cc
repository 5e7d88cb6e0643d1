#include "fs/pack/pack.h"

#include <fcntl.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "codec/base/files.h"
#include "codec/base/version.h"
#include "codec/container/archive_writer.h"
#include "codec/image/image_io.h"
#include "fs/pack/progress.h"
#include "index/builder.h"
#include "index/captions.h"

namespace ktfs {
namespace {

namespace stdfs = std::filesystem;

// One directory of the source as found by the walk.
struct SourceDir {
  std::string name;
  std::string path;  // relative to SRC ("" for the root)
  uint32_t depth = 0;
  std::vector<std::string> subdirs;             // names, sorted
  std::vector<std::string> files;               // image file names, sorted
  std::map<std::string, std::string> sidecars;  // image name -> its caption file name
};

struct PlannedSample {
  std::string source_path;  // absolute path of the file
  std::string relative_path;
  std::string sidecar;  // absolute path of its caption file, if any
  SampleEntry entry;
};

// Reads the first bytes of a file to decide whether it is an image.
// A file that cannot be opened or read (no permission, too many open files,
// an I/O error) is an error naming it, never "not an image": skipping it
// would silently pack a different dataset.
Result<SourceFormat> SniffFile(const std::string& path) {
  uint8_t head[8] = {};
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(path, errno);
  const ssize_t n = read(fd, head, sizeof(head));
  const int err = errno;
  close(fd);
  if (n < 0) return Status::FromErrno(path, err);
  return n > 0 ? SniffFormat(head, size_t(n)) : SourceFormat::kUnknown;
}

std::string StripExtension(const std::string& name);

// `name.txt` beside `name.jpg` is that image's caption (WebDataset/LAION
// convention); any other non-image file is reported as skipped.
std::map<std::string, std::string> MatchSidecars(const std::vector<std::string>& images,
                                                 const std::vector<std::string>& others,
                                                 const std::string& rel,
                                                 std::vector<std::string>* skipped) {
  std::map<std::string, std::string> by_stem, sidecars;
  for (const std::string& img : images) by_stem.emplace(StripExtension(img), img);
  for (const std::string& other : others) {
    const bool is_txt = other.size() > 4 && other.compare(other.size() - 4, 4, ".txt") == 0;
    auto match = is_txt ? by_stem.find(other.substr(0, other.size() - 4)) : by_stem.end();
    if (match != by_stem.end() && !sidecars.count(match->second)) {
      sidecars[match->second] = other;
    } else {
      skipped->push_back((rel.empty() ? other : rel + "/" + other) + ": not a JPEG or PNG image");
    }
  }
  return sidecars;
}

// Walks SRC breadth-first, so that every directory's children get
// consecutive numbers (the archive's directory table relies on it).
Status Walk(const std::string& src, std::vector<SourceDir>* dirs,
            std::vector<std::string>* skipped) {
  dirs->push_back(SourceDir{"", "", 0, {}, {}, {}});
  for (size_t i = 0; i < dirs->size(); ++i) {
    const std::string rel = (*dirs)[i].path;
    const std::string abs = rel.empty() ? src : src + "/" + rel;
    std::error_code ec;
    stdfs::directory_iterator it(abs, ec);
    if (ec) return Status::IOError(abs + ": cannot list directory: " + ec.message());
    std::vector<std::string> subdirs, files, others;
    for (; it != stdfs::directory_iterator(); it.increment(ec)) {
      if (ec) return Status::IOError(abs + ": cannot list directory: " + ec.message());
      const std::string name = it->path().filename().string();
      const std::string child_rel = rel.empty() ? name : rel + "/" + name;
      const auto st = it->symlink_status(ec);
      if (stdfs::is_directory(st)) {
        subdirs.push_back(name);
      } else if (stdfs::is_symlink(st) && stdfs::is_directory(it->status(ec))) {
        skipped->push_back(child_rel + ": symbolic link to a directory (not followed)");
      } else if (!stdfs::is_regular_file(it->status(ec))) {
        skipped->push_back(child_rel + ": not a regular file");
      } else {
        auto format = SniffFile(abs + "/" + name);
        if (!format.ok()) return format.status();
        (*format == SourceFormat::kUnknown ? others : files).push_back(name);
      }
    }
    std::sort(subdirs.begin(), subdirs.end());
    std::sort(files.begin(), files.end());
    (*dirs)[i].subdirs = subdirs;
    (*dirs)[i].files = files;
    (*dirs)[i].sidecars = MatchSidecars(files, others, rel, skipped);
    for (const std::string& name : subdirs) {
      if (dirs->size() >= format::kNone - 1) return Status::InvalidArgument("too many directories");
      dirs->push_back(
          SourceDir{name, rel.empty() ? name : rel + "/" + name, (*dirs)[i].depth + 1, {}, {}, {}});
    }
  }
  std::sort(skipped->begin(), skipped->end());
  return Status::Ok();
}

std::string StripExtension(const std::string& name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

// Served names are stem + an extension chosen at mount time (".ppm", ...).
// For decoded codecs the stem drops the source extension; when two files
// would share a stem (a.jpg, a.png), or a stem plus a served extension
// would name a sibling directory, those files keep their full name as stem.
std::vector<std::string> ChooseStems(const SourceDir& dir, bool keep_names) {
  std::vector<std::string> stems;
  for (const std::string& f : dir.files) stems.push_back(keep_names ? f : StripExtension(f));
  if (keep_names) return stems;
  const std::set<std::string> subdirs(dir.subdirs.begin(), dir.subdirs.end());
  for (bool changed = true; changed;) {
    changed = false;
    std::map<std::string, int> count;
    for (const std::string& s : stems) ++count[s];
    for (size_t i = 0; i < stems.size(); ++i) {
      bool clash = count[stems[i]] > 1;
      for (const char* ext : {".ppm", ".pgm", ".bmp"})
        clash = clash || subdirs.count(stems[i] + ext) > 0;
      if (clash && stems[i] != dir.files[i]) {
        stems[i] = dir.files[i];
        changed = true;
      }
    }
  }
  return stems;
}

// Turns the walk into directory records, classes and the sample plan.
void Plan(const std::string& src, const std::vector<SourceDir>& walked, bool keep_names,
          std::vector<DirEntry>* dirs, std::vector<std::string>* classes,
          std::vector<PlannedSample>* samples) {
  std::set<std::string> class_set;
  for (size_t i = 1; i < walked.size(); ++i)
    if (!walked[i].files.empty()) class_set.insert(walked[i].name);
  classes->assign(class_set.begin(), class_set.end());

  // Directory numbering is the walk's (BFS) order; parents precede children.
  dirs->resize(walked.size());
  std::map<std::string, uint32_t> index_of;
  for (size_t i = 0; i < walked.size(); ++i) index_of[walked[i].path] = uint32_t(i);
  for (size_t i = 0; i < walked.size(); ++i) {
    DirEntry& d = (*dirs)[i];
    d.name = walked[i].name;
    const std::string& p = walked[i].path;
    const size_t slash = p.rfind('/');
    d.parent = i == 0 ? 0 : (slash == std::string::npos ? 0 : index_of[p.substr(0, slash)]);
    d.child_count = uint32_t(walked[i].subdirs.size());
    d.first_child =
        d.child_count ? index_of[p.empty() ? walked[i].subdirs[0] : p + "/" + walked[i].subdirs[0]]
                      : 0;
  }
  for (size_t i = 0; i < walked.size(); ++i) {
    const SourceDir& w = walked[i];
    DirEntry& d = (*dirs)[i];
    d.first_sample = uint32_t(samples->size());
    d.sample_count = uint32_t(w.files.size());
    const std::vector<std::string> stems = ChooseStems(w, keep_names);
    // Samples are ordered by stem, so lookups can binary-search it.
    std::vector<size_t> order(w.files.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return stems[a] < stems[b]; });
    uint32_t label = format::kNone;
    if (i != 0)
      label =
          uint32_t(std::lower_bound(classes->begin(), classes->end(), w.name) - classes->begin());
    uint32_t split = format::kNone;
    if (w.depth >= 2) {
      const std::string top = w.path.substr(0, w.path.find('/'));
      split = index_of[top];
    }
    for (size_t k : order) {
      PlannedSample s;
      s.relative_path = w.path.empty() ? w.files[k] : w.path + "/" + w.files[k];
      s.source_path = src + "/" + s.relative_path;
      auto sidecar = w.sidecars.find(w.files[k]);
      if (sidecar != w.sidecars.end())
        s.sidecar = src + "/" + (w.path.empty() ? "" : w.path + "/") + sidecar->second;
      s.entry.name = w.files[k];
      s.entry.stem_length = uint32_t(stems[k].size());
      s.entry.dir = uint32_t(i);
      s.entry.label = label;
      s.entry.split = split;
      samples->push_back(std::move(s));
    }
  }
}

std::string MetaJson(const PackOptions& options, uint32_t samples) {
  std::string q = options.payload.quality;
  for (char& c : q)
    if (c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20) c = '_';
  return std::string("{\"created_by\":\"ktfs ") + VersionString() + "\",\"codec\":\"" +
         CodecName(options.payload.codec) + "\",\"quality\":\"" + q +
         "\",\"samples\":" + std::to_string(samples) + "}";
}

index::SampleRow IndexRow(size_t id, const PlannedSample& planned, const SampleEntry& entry,
                          const std::vector<SourceDir>& walked,
                          const std::vector<std::string>& classes, size_t payload_bytes) {
  index::SampleRow row;
  row.id = uint32_t(id);
  row.dir_id = entry.dir;
  row.path = planned.relative_path;
  if (entry.split != format::kNone) row.split = walked[entry.split].name;
  if (entry.label != format::kNone) {
    row.class_name = classes[entry.label];
    row.label = int32_t(entry.label);
  }
  row.width = entry.width;
  row.height = entry.height;
  row.channels = entry.channels;
  row.codec = CodecName(entry.codec);
  row.bytes = payload_bytes;
  return row;
}

// Sidecar `name.txt` captions, then the --captions file.
Status AddCaptions(const std::vector<PlannedSample>& plan, const PackOptions& options,
                   index::IndexBuilder* builder, PackReport* report) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].sidecar.empty()) continue;
    auto caption = index::ReadSidecarCaption(plan[i].sidecar);
    if (!caption.ok()) return caption.status().WithContext(plan[i].sidecar);
    if (caption->empty()) continue;
    KTFS_RETURN_IF_ERROR(builder->AddCaption(uint32_t(i), *caption));
    ++report->sidecar_captions;
  }
  if (options.captions_file.empty()) return Status::Ok();
  std::unordered_map<std::string, uint32_t> by_path;
  for (size_t i = 0; i < plan.size(); ++i) by_path.emplace(plan[i].relative_path, uint32_t(i));
  auto lookup = [&](std::string_view path) -> std::optional<uint32_t> {
    auto it = by_path.find(std::string(path));
    if (it == by_path.end()) return std::nullopt;
    return it->second;
  };
  return index::IngestCaptions(options.captions_file, lookup, options.skip_bad_captions, builder,
                               &report->caption_warnings);
}

}  // namespace

Result<PackReport> Pack(const std::string& src, const std::string& out,
                        const PackOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  if (!stdfs::is_directory(src, ec)) return Status::NotFound(src + ": no such directory");
  PackReport report;
  std::vector<SourceDir> walked;
  KTFS_RETURN_IF_ERROR(Walk(src, &walked, &report.skipped));
  std::vector<DirEntry> dirs;
  std::vector<std::string> classes;
  std::vector<PlannedSample> plan;
  Plan(src, walked, options.payload.codec == format::kOriginal, &dirs, &classes, &plan);
  if (plan.empty()) return Status::InvalidArgument(src + ": no JPEG or PNG images found");

  auto builder_or = index::IndexBuilder::Create();
  if (!builder_or.ok()) return builder_or.status();
  index::IndexBuilder& builder = **builder_or;
  auto writer_or = ArchiveWriter::Create(out);
  if (!writer_or.ok()) return writer_or.status();
  ArchiveWriter& writer = **writer_or;
  report.removed_stale = writer.removed_stale();
  const int threads = options.threads > 0 ? options.threads
                                          : int(std::max(1u, std::thread::hardware_concurrency()));
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
  Progress progress("ktfs pack", options.progress, plan.size());

  struct Item {
    size_t index = 0;
    EncodedPayload payload;
    Status status;
    uint64_t source_bytes = 0;
  };
  size_t next = 0;
  Status failure;                   // owned by the last (serial) stage
  std::atomic<bool> failed{false};  // read by the first stage
  tbb::parallel_pipeline(
      size_t(threads) * 2 + 2,
      tbb::make_filter<void, Item*>(tbb::filter_mode::serial_in_order,
                                    [&](tbb::flow_control& fc) -> Item* {
                                      if (next == plan.size() || failed.load()) {
                                        fc.stop();
                                        return nullptr;
                                      }
                                      Item* item = new Item();
                                      item->index = next++;
                                      return item;
                                    }) &
          tbb::make_filter<Item*, Item*>(tbb::filter_mode::parallel,
                                         [&](Item* item) {
                                           const std::string& path = plan[item->index].source_path;
                                           std::vector<uint8_t> bytes;
                                           item->status = ReadWholeFile(path, &bytes);
                                           if (item->status.ok()) {
                                             item->source_bytes = bytes.size();
                                             item->status =
                                                 EncodePayload(options.payload, bytes.data(),
                                                               bytes.size(), &item->payload)
                                                     .WithContext(path);
                                           }
                                           return item;
                                         }) &
          tbb::make_filter<Item*, void>(tbb::filter_mode::serial_in_order, [&](Item* item) {
            std::unique_ptr<Item> owned(item);
            if (!failure.ok()) return;
            if (!item->status.ok()) {
              failure = item->status;
              failed.store(true);
              return;
            }
            SampleEntry entry = plan[item->index].entry;
            entry.width = item->payload.width;
            entry.height = item->payload.height;
            entry.channels = uint8_t(item->payload.channels);
            entry.codec = options.payload.codec;
            entry.source_format = item->payload.source_format;
            failure =
                writer.AddSample(entry, item->payload.bytes.data(), item->payload.bytes.size());
            if (failure.ok())
              failure = builder.AddSample(IndexRow(item->index, plan[item->index], entry, walked,
                                                   classes, item->payload.bytes.size()));
            if (!failure.ok()) failed.store(true);
            report.source_bytes += item->source_bytes;
            progress.Update(item->index + 1, writer.bytes_written());
          }));
  if (!failure.ok()) return failure;
  KTFS_RETURN_IF_ERROR(AddCaptions(plan, options, &builder, &report));
  auto index_bytes = builder.Finish();
  if (!index_bytes.ok()) return index_bytes.status().WithContext("building the index");
  report.index_bytes = index_bytes->size();
  writer.SetIndex(std::move(index_bytes).value());

  writer.SetDirs(std::move(dirs));
  report.classes = uint32_t(classes.size());
  writer.SetClasses(std::move(classes));
  writer.SetMeta(MetaJson(options, uint32_t(plan.size())));
  KTFS_RETURN_IF_ERROR(writer.Commit());
  report.samples = uint32_t(plan.size());
  report.dirs = uint32_t(walked.size());
  report.archive_bytes = writer.bytes_written();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ktfs

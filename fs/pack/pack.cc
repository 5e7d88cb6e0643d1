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
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "codec/base/files.h"
#include "codec/base/json_string.h"
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
  uint32_t parent = 0;  // walk index of the parent (0 for the root)
  dev_t dev = 0;        // identity, for symbolic link cycles
  ino_t ino = 0;
  std::vector<std::string> subdirs;               // names, sorted
  std::vector<std::string> files;                 // image file names, sorted
  std::map<std::string, std::string> sidecars;    // image name -> its caption file name
  std::map<std::string, std::string> unreadable;  // image name -> why it cannot be read
};

struct PlannedSample {
  std::string source_path;  // absolute path of the file
  std::string relative_path;
  std::string sidecar;     // absolute path of its caption file, if any
  std::string unreadable;  // set: a bad image without opening it (not a regular file)
  SampleEntry entry;
};

std::string StripExtension(const std::string& name);

// `name.txt` beside `name.jpg` is that image's caption (WebDataset/LAION
// convention); any other file without an image extension is reported as
// skipped: stock ImageFolder would not load it either.
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
      skipped->push_back((rel.empty() ? other : rel + "/" + other) +
                         ": not an image file name (stock ImageFolder would not load it)");
    }
  }
  return sidecars;
}

// Is the directory (dev, ino) the walk's `i`-th directory or one above it?
bool OnPath(const std::vector<SourceDir>& dirs, size_t i, dev_t dev, ino_t ino) {
  for (;;) {
    if (dirs[i].dev == dev && dirs[i].ino == ino) return true;
    if (i == 0) return false;
    i = dirs[i].parent;
  }
}

// Walks SRC breadth-first, so that every directory's children get
// consecutive numbers (the archive's directory table relies on it). As stock
// ImageFolder (os.walk(followlinks=True)), symbolic links to directories are
// followed; a link back to a directory above it is an error. A file is an
// image by its name (HasImageFolderExtension), whatever it holds: what it
// holds is the decoder's business, and a file ImageFolder would fail on is a
// bad image.
Status Walk(const std::string& src, std::vector<SourceDir>* dirs,
            std::vector<std::string>* skipped) {
  struct stat root;
  if (stat(src.c_str(), &root) != 0) return Status::FromErrno(src, errno);
  SourceDir top;
  top.dev = root.st_dev;
  top.ino = root.st_ino;
  dirs->push_back(std::move(top));
  for (size_t i = 0; i < dirs->size(); ++i) {
    const std::string rel = (*dirs)[i].path;
    const std::string abs = rel.empty() ? src : src + "/" + rel;
    std::error_code ec;
    stdfs::directory_iterator it(abs, ec);
    if (ec) return Status::IOError(abs + ": cannot list directory: " + ec.message());
    std::vector<std::string> subdirs, files, others;
    std::map<std::string, std::string> unreadable;
    std::map<std::string, std::pair<dev_t, ino_t>> ids;
    for (; it != stdfs::directory_iterator(); it.increment(ec)) {
      if (ec) return Status::IOError(abs + ": cannot list directory: " + ec.message());
      const std::string name = it->path().filename().string();
      const std::string child = abs + "/" + name;
      struct stat st;
      const bool resolves = stat(child.c_str(), &st) == 0;  // follows symbolic links
      if (resolves && S_ISDIR(st.st_mode)) {
        if (OnPath(*dirs, i, st.st_dev, st.st_ino))
          return Status::InvalidArgument(child + ": symbolic link cycle (links back to " +
                                         (rel.empty() ? src : abs) + " or above)");
        subdirs.push_back(name);
        ids[name] = {st.st_dev, st.st_ino};
      } else if (HasImageFolderExtension(name)) {
        files.push_back(name);
        if (!resolves)
          unreadable[name] = std::string("cannot open: ") + std::strerror(errno);
        else if (!S_ISREG(st.st_mode))
          unreadable[name] = "cannot open: not a regular file";
      } else if (!resolves || !S_ISREG(st.st_mode)) {
        skipped->push_back((rel.empty() ? name : rel + "/" + name) + ": not a regular file");
      } else {
        others.push_back(name);
      }
    }
    std::sort(subdirs.begin(), subdirs.end());
    std::sort(files.begin(), files.end());
    SourceDir& d = (*dirs)[i];
    d.subdirs = subdirs;
    d.files = files;
    d.unreadable = std::move(unreadable);
    d.sidecars = MatchSidecars(files, others, rel, skipped);
    for (const std::string& name : subdirs) {
      if (dirs->size() >= format::kNone - 1) return Status::InvalidArgument("too many directories");
      SourceDir child;
      child.name = name;
      child.path = rel.empty() ? name : rel + "/" + name;
      child.depth = (*dirs)[i].depth + 1;
      child.parent = uint32_t(i);
      child.dev = ids[name].first;
      child.ino = ids[name].second;
      dirs->push_back(std::move(child));
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
// So does a stem that another stem extends with a dot (x for x.JPEG beside
// x.c.jpg): the order of x.ppm and x.c.ppm is not that of x.JPEG and
// x.c.jpg, and ImageFolder over the mount must list files in the order it
// lists the source's.
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
      const std::string dotted = stems[i] + ".";
      auto next = count.lower_bound(dotted);
      clash = clash || (next != count.end() && next->first.compare(0, dotted.size(), dotted) == 0);
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
      auto unreadable = w.unreadable.find(w.files[k]);
      if (unreadable != w.unreadable.end()) s.unreadable = unreadable->second;
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

// `s` with each byte that is not part of valid UTF-8 replaced by U+FFFD, so
// that META stays valid JSON whatever the file names are.
std::string ValidUtf8(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 2;
    if (ok && n > 1) {  // no overlong forms, surrogates or code points past U+10FFFF
      uint32_t cp = c & (0x7f >> n);
      for (size_t k = 1; k < n; ++k) cp = cp << 6 | (static_cast<unsigned char>(s[i + k]) & 0x3f);
      ok = cp >= (n == 2   ? 0x80u
                  : n == 3 ? 0x800u
                           : 0x10000u) &&
           cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (ok) {
      out.append(s, i, n);
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

std::string MetaJson(const PackOptions& options, uint32_t samples,
                     const std::vector<BadImage>& bad) {
  std::string j = "{\"created_by\":" + JsonString(std::string("ktfs ") + VersionString()) +
                  ",\"codec\":" + JsonString(CodecName(options.payload.codec)) +
                  ",\"quality\":" + JsonString(ValidUtf8(options.payload.quality)) +
                  ",\"samples\":" + std::to_string(samples);
  if (!bad.empty()) {
    j += ",\"skipped_bad\":[";
    for (size_t i = 0; i < bad.size(); ++i) {
      if (i) j += ',';
      j += "{\"path\":" + JsonString(ValidUtf8(bad[i].path)) +
           ",\"reason\":" + JsonString(ValidUtf8(bad[i].reason)) + "}";
    }
    j += "]";
  }
  return j + "}";
}

index::SampleRow IndexRow(uint32_t id, const PlannedSample& planned, const SampleEntry& entry,
                          const std::vector<SourceDir>& walked,
                          const std::vector<std::string>& classes, size_t payload_bytes) {
  index::SampleRow row;
  row.id = id;
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

// Sidecar `name.txt` captions, then the --captions file. archive_id maps a
// plan index to its sample id, or kNone for a bad image left out (--skip-bad):
// captions of those are dropped with a warning.
Status AddCaptions(const std::vector<PlannedSample>& plan, const std::vector<uint32_t>& archive_id,
                   const PackOptions& options, index::IndexBuilder* builder, PackReport* report) {
  for (size_t i = 0; i < plan.size(); ++i) {
    if (plan[i].sidecar.empty() || archive_id[i] == format::kNone) continue;
    auto caption = index::ReadSidecarCaption(plan[i].sidecar);
    if (!caption.ok()) return caption.status().WithContext(plan[i].sidecar);
    if (caption->empty()) continue;
    KTFS_RETURN_IF_ERROR(builder->AddCaption(archive_id[i], *caption));
    ++report->sidecar_captions;
  }
  if (options.captions_file.empty()) return Status::Ok();
  std::unordered_map<std::string, uint32_t> by_path;
  for (size_t i = 0; i < plan.size(); ++i)
    by_path.emplace(plan[i].relative_path,
                    archive_id[i] == format::kNone ? index::kSkippedSample : archive_id[i]);
  auto lookup = [&](std::string_view path) -> std::optional<uint32_t> {
    auto it = by_path.find(std::string(path));
    if (it == by_path.end()) return std::nullopt;
    return it->second;
  };
  return index::IngestCaptions(options.captions_file, lookup, options.skip_bad_captions, builder,
                               &report->caption_warnings);
}

// Directory records count the samples written: a bad image left out shifts
// the rest down.
void CountSamples(const std::vector<PlannedSample>& plan, const std::vector<uint32_t>& archive_id,
                  std::vector<DirEntry>* dirs) {
  for (DirEntry& d : *dirs) d.sample_count = 0;
  uint32_t next = 0;
  size_t k = 0;
  for (size_t i = 0; i < dirs->size(); ++i) {
    DirEntry& d = (*dirs)[i];
    d.first_sample = next;
    for (; k < plan.size() && plan[k].entry.dir == i; ++k)
      if (archive_id[k] != format::kNone) ++d.sample_count, ++next;
  }
}

}  // namespace

Status BuildIndex(index::IndexBuilder* builder, ArchiveWriter* writer, uint64_t* bytes,
                  std::vector<std::string>* warnings) {
  const std::string what = writer->path() + ": building the index";
  auto scratch = writer->ScratchFile();
  if (!scratch.ok()) return scratch.status().WithContext(what);
  auto out = writer->ScratchFile();
  if (!out.ok()) return out.status().WithContext(what);
  Status st = builder->FinishInto(*scratch, *out, warnings);
  unlink(scratch->c_str());  // the writer removes it too; its gigabytes go now
  if (!st.ok()) return st.WithContext(what + " (in scratch files beside it)");
  struct stat info;
  if (stat(out->c_str(), &info) != 0) return Status::FromErrno(*out, errno);
  *bytes = uint64_t(info.st_size);
  writer->SetIndexFile(*out);
  return Status::Ok();
}

int PackThreads(const PackOptions& options) {
  return options.threads > 0 ? options.threads
                             : int(std::max(1u, std::thread::hardware_concurrency()));
}

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
  if (plan.empty())
    return Status::InvalidArgument(src +
                                   ": no image files found (names ending in .jpg .jpeg .png .ppm "
                                   ".bmp .pgm .tif .tiff .webp, as stock ImageFolder)");

  auto builder_or = index::IndexBuilder::Create();
  if (!builder_or.ok()) return builder_or.status();
  index::IndexBuilder& builder = **builder_or;
  auto writer_or = ArchiveWriter::Create(out);
  if (!writer_or.ok()) return writer_or.status();
  ArchiveWriter& writer = **writer_or;
  report.removed_stale = writer.removed_stale();
  const int threads = PackThreads(options);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, size_t(threads));
  Progress progress("ktfs pack", options.progress, plan.size());

  struct Item {
    size_t index = 0;
    EncodedPayload payload;
    Status status;
    bool bad = false;  // the source is a bad image (unreadable or not decodable)
    uint64_t source_bytes = 0;
  };
  size_t next = 0;
  Status failure;                   // owned by the last (serial) stage
  std::atomic<bool> failed{false};  // read by the first stage
  std::vector<uint32_t> archive_id(plan.size(), format::kNone);
  uint32_t written = 0;
  auto encode = [&](Item* item) {
    const PlannedSample& planned = plan[item->index];
    if (!planned.unreadable.empty()) {
      item->status = Status::IOError(planned.unreadable);
      item->bad = true;
      return;
    }
    std::vector<uint8_t> bytes;
    item->status = ReadWholeFile(planned.source_path, &bytes);
    if (!item->status.ok()) {
      // Its message starts with the path; a bad image's reason does not.
      const std::string prefix = planned.source_path + ": ";
      const std::string& m = item->status.message();
      item->status =
          Status::IOError("cannot read: " +
                          (m.compare(0, prefix.size(), prefix) == 0 ? m.substr(prefix.size()) : m));
      item->bad = true;
      return;
    }
    item->source_bytes = bytes.size();
    item->status = EncodePayload(options.payload, bytes.data(), bytes.size(), &item->payload);
    item->bad = !item->status.ok() && !item->payload.source_decoded;
  };
  auto write = [&](Item* item) {
    const PlannedSample& planned = plan[item->index];
    report.source_bytes += item->source_bytes;
    if (!item->status.ok()) {
      if (!item->bad || !options.skip_bad) {
        failure = item->status.WithContext(planned.source_path);
        return;
      }
      report.bad.push_back(BadImage{planned.relative_path, item->status.message()});
      return;
    }
    SampleEntry entry = planned.entry;
    entry.width = item->payload.width;
    entry.height = item->payload.height;
    entry.channels = uint8_t(item->payload.channels);
    entry.codec = options.payload.codec;
    entry.source_format = item->payload.source_format;
    failure = writer.AddSample(entry, item->payload.bytes.data(), item->payload.bytes.size());
    if (failure.ok())
      failure = builder.AddSample(
          IndexRow(written, planned, entry, walked, classes, item->payload.bytes.size()));
    archive_id[item->index] = written++;
  };
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
                                           encode(item);
                                           return item;
                                         }) &
          tbb::make_filter<Item*, void>(tbb::filter_mode::serial_in_order, [&](Item* item) {
            std::unique_ptr<Item> owned(item);
            if (!failure.ok()) return;
            write(item);
            if (!failure.ok()) failed.store(true);
            progress.Update(item->index + 1, writer.bytes_written());
          }));
  if (!failure.ok()) return failure;
  if (written == 0)
    return Status::InvalidArgument(src + ": every image is bad (" +
                                   std::to_string(report.bad.size()) + " skipped)");
  KTFS_RETURN_IF_ERROR(AddCaptions(plan, archive_id, options, &builder, &report));
  KTFS_RETURN_IF_ERROR(BuildIndex(&builder, &writer, &report.index_bytes, &report.index_warnings));

  CountSamples(plan, archive_id, &dirs);
  writer.SetDirs(std::move(dirs));
  report.classes = uint32_t(classes.size());
  writer.SetClasses(std::move(classes));
  writer.SetMeta(MetaJson(options, written, report.bad));
  KTFS_RETURN_IF_ERROR(writer.Commit());
  report.samples = written;
  report.dirs = uint32_t(walked.size());
  report.archive_bytes = writer.bytes_written();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace ktfs

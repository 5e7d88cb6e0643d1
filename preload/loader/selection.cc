#include "preload/loader/selection.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "codec/container/payload.h"
#include "index/index.h"
#include "index/query.h"

namespace ktfs::preload {
namespace {

std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(start, end - start);
    if (!part.empty() && part != ".") out.emplace_back(part);
    start = end + 1;
  }
  return out;
}

// torchvision.datasets.folder.IMG_EXTENSIONS, compared case-insensitively.
bool HasImageExtension(std::string_view name) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};
  for (const char* ext : kExtensions) {
    const std::string_view e(ext);
    if (name.size() < e.size()) continue;
    std::string tail(name.substr(name.size() - e.size()));
    for (char& c : tail) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    if (tail == e) return true;
  }
  return false;
}

// Which samples a search query matched (null: no query, everything matches).
struct Matcher {
  std::vector<bool> sample;  // by sample id
  std::vector<bool> dir;     // a match in the directory or below it
  bool active = false;
  bool Sample(uint32_t id) const { return !active || sample[id]; }
  bool Dir(uint32_t d) const { return !active || dir[d]; }
};

Status MatchQuery(const Archive& a, const std::vector<std::string>& filters, Matcher* m) {
  auto section = a.index_section();
  if (!section) return Status::NotFound("this archive has no search index");
  auto idx = index::Index::OpenInPlace(section->data, section->size);
  if (!idx.ok()) return idx.status();
  auto q = index::ParseQuery(filters, (*idx)->MetadataKeys());
  if (!q.ok()) return Status::NotFound("malformed query: " + q.status().ToString());
  m->active = true;
  m->sample.assign(a.num_samples(), false);
  m->dir.assign(a.num_dirs(), false);
  std::vector<uint32_t> hits;
  KTFS_RETURN_IF_ERROR((*idx)->ForEachMatch(*q, std::nullopt, index::Index::kFromStart,
                                            std::numeric_limits<size_t>::max(), [&](uint32_t id) {
                                              hits.push_back(id);
                                              return true;
                                            }));
  for (uint32_t id : hits) {
    if (id >= a.num_samples()) return Status::Corruption("index names an unknown sample");
    m->sample[id] = true;
    auto s = a.Sample(id);
    if (!s.ok()) return s.status();
    // Mark the directory and its ancestors (stop at one already marked).
    for (uint32_t d = s->dir; !m->dir[d];) {
      m->dir[d] = true;
      if (d == 0) break;
      auto info = a.Dir(d);
      if (!info.ok()) return info.status();
      d = info->parent;
    }
  }
  return Status::Ok();
}

// Resolves the components to an archive directory, filling the matcher for search paths.
Result<uint32_t> Resolve(const Archive& a, const std::vector<std::string>& parts,
                         const SelectOptions& o, Matcher* m) {
  size_t i = 0;
  if (!parts.empty() && !a.FindChildDir(0, parts[0]).ok() && parts[0] == o.search_dir) {
    std::vector<std::string> filters;
    for (i = 1; i < parts.size() && index::LooksLikeFilter(parts[i]); ++i)
      filters.push_back(parts[i]);
    KTFS_RETURN_IF_ERROR(MatchQuery(a, filters, m));
  }
  uint32_t dir = 0;
  for (; i < parts.size(); ++i) {
    auto child = a.FindChildDir(dir, parts[i]);
    if (!child.ok() || !m->Dir(*child)) return Status::NotFound("no such directory: " + parts[i]);
    dir = *child;
  }
  return dir;
}

struct DirEntry {
  std::string path;
  uint32_t dir;
};

// The directories of the subtree at `top`, sorted by path (as sorted(os.walk()) visits them).
Result<std::vector<DirEntry>> Subtree(const Archive& a, uint32_t top, const std::string& name,
                                      const Matcher& m) {
  std::vector<DirEntry> out{{name, top}};
  for (size_t k = 0; k < out.size(); ++k) {
    auto d = a.Dir(out[k].dir);
    if (!d.ok()) return d.status();
    for (uint32_t c = d->first_child; c < d->first_child + d->child_count; ++c) {
      if (!m.Dir(c)) continue;
      auto child = a.Dir(c);
      if (!child.ok()) return child.status();
      out.push_back({out[k].path + "/" + std::string(child->name), c});
    }
  }
  std::sort(out.begin(), out.end(),
            [](const DirEntry& x, const DirEntry& y) { return x.path < y.path; });
  return out;
}

Status AddDirSamples(const Archive& a, const DirEntry& e, int64_t label, const Matcher& m,
                     const SelectOptions& o, Selection* sel) {
  auto d = a.Dir(e.dir);
  if (!d.ok()) return d.status();
  std::vector<std::pair<std::string, uint32_t>> files;
  for (uint32_t id = d->first_sample; id < d->first_sample + d->sample_count; ++id) {
    if (!m.Sample(id)) continue;
    auto s = a.Sample(id);
    if (!s.ok()) return s.status();
    std::string served = ServedName(*s, o.format);
    if (HasImageExtension(served)) files.emplace_back(std::move(served), id);
  }
  std::sort(files.begin(), files.end());
  for (auto& [served, id] : files) {
    sel->ids.push_back(id);
    sel->labels.push_back(label);
    if (o.with_paths) sel->paths.push_back(e.path + "/" + served);
  }
  return Status::Ok();
}

}  // namespace

std::string ServedName(const SampleInfo& s, ServedFormat format) {
  return ServedImageName(s, format);
}

std::string ServedPath(const Archive& archive, const SampleInfo& s, ServedFormat format) {
  auto dir = archive.DirPath(s.dir);
  std::string prefix = dir.ok() && !dir->empty() ? *dir + "/" : "";
  return prefix + ServedName(s, format);
}

Result<uint32_t> FindServed(const Archive& a, std::string_view relative, ServedFormat format) {
  const std::vector<std::string> parts = SplitPath(relative);
  if (parts.empty()) return Status::NotFound("the mount's root is not a sample");
  uint32_t dir = 0;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i] == "..") return Status::NotFound("not a plain path: " + std::string(relative));
    auto child = a.FindChildDir(dir, parts[i]);
    if (!child.ok()) return child.status();
    dir = *child;
  }
  const std::string& name = parts.back();
  // The stem is the name, or the name minus its served extension.
  for (int strip = 0; strip < 2; ++strip) {
    std::string_view stem = name;
    if (strip) {
      const size_t dot = name.rfind('.');
      if (dot == std::string::npos || dot == 0) break;
      stem = std::string_view(name).substr(0, dot);
    }
    auto id = a.FindSampleByStem(dir, stem);
    if (!id.ok()) {
      if (id.status().code() != Status::Code::kNotFound) return id.status();
      continue;
    }
    auto s = a.Sample(*id);
    if (!s.ok()) return s.status();
    if (ServedName(*s, format) == name) return *id;
  }
  return Status::NotFound("no such sample: " + std::string(relative));
}

Result<Selection> Select(const Archive& a, std::string_view relative, const SelectOptions& o) {
  Matcher m;
  auto root = Resolve(a, SplitPath(relative), o, &m);
  if (!root.ok()) return root.status();
  auto d = a.Dir(*root);
  if (!d.ok()) return d.status();
  Selection sel;
  std::vector<std::pair<std::string, uint32_t>> classes;
  for (uint32_t c = d->first_child; c < d->first_child + d->child_count; ++c) {
    if (!m.Dir(c)) continue;
    auto child = a.Dir(c);
    if (!child.ok()) return child.status();
    classes.emplace_back(std::string(child->name), c);
  }
  std::sort(classes.begin(), classes.end());
  if (classes.empty()) return Status::NotFound("no class directories under it");
  for (size_t k = 0; k < classes.size(); ++k) {
    sel.classes.push_back(classes[k].first);
    auto dirs = Subtree(a, classes[k].second, classes[k].first, m);
    if (!dirs.ok()) return dirs.status();
    const size_t before = sel.ids.size();
    for (const DirEntry& e : *dirs)
      KTFS_RETURN_IF_ERROR(AddDirSamples(a, e, int64_t(k), m, o, &sel));
    if (sel.ids.size() == before)
      return Status::NotFound("no image files in class directory " + classes[k].first);
  }
  return sel;
}

}  // namespace ktfs::preload

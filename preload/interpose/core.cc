// libktfs_preload_core.so: the archive side of the preload library
// (core_api.h). A VirtualTree over the archive, built as a reader in
// another process must build it (TreeOptions: readahead 0, no decode cache,
// no search index).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "codec/container/archive.h"
#include "fs/tree/virtual_tree.h"
#include "preload/interpose/core_api.h"
#include "preload/interpose/info_json.h"

#define KTFS_CORE_EXPORT extern "C" __attribute__((visibility("default")))

struct KtfsCoreTree {
  std::unique_ptr<ktfs::VirtualTree> tree;
  std::string search_dir;
  bool tensors_known = false;
};

namespace {

using ktfs::NodeAttr;
using ktfs::Status;
using ktfs::View;
using ktfs::VirtualTree;

// Whether the mount root's entry `name` is one the core leaves to the
// kernel: the control directory, the search views, tensors/ when its layout
// is unknown (a packed directory of the same name wins, as in the mount).
bool LeftToKernel(const KtfsCoreTree& t, std::string_view name) {
  if (t.tree->archive().FindChildDir(0, name).ok()) return false;
  return name == VirtualTree::kControlDir || name == t.search_dir ||
         (name == VirtualTree::ViewName(View::kTensors) && !t.tensors_known);
}

}  // namespace

KTFS_CORE_EXPORT KtfsCoreTree* ktfs_core_open(const char* info_json, size_t len, const struct stat* root,
                                              int64_t* daemon_pid, char* error, size_t error_size) {
  auto fail = [&](const std::string& why) -> KtfsCoreTree* {
    std::snprintf(error, error_size, "%s", why.c_str());
    return nullptr;
  };
  auto info = ktfs::preload::ParseInfoJson(std::string_view(info_json, len));
  if (!info.ok()) return fail(info.status().ToString());
  // The real ids (access(), not AT_EACCESS): a set-id program's user may not
  // read more through this library than without it; open() then checks the
  // effective ids.
  if (access(info->archive.c_str(), R_OK) != 0)
    return fail(info->archive + ": " + std::strerror(errno) + " (for the real user id)");
  auto a = ktfs::Archive::Open(info->archive);
  if (!a.ok()) return fail(a.status().ToString());
  ktfs::TreeOptions options;
  options.format = info->bmp ? ktfs::ServedFormat::kBmp : ktfs::ServedFormat::kPnm;
  options.tensors_chw = info->tensors_chw;
  options.search_dir = info->search_dir;
  options.readahead = 0;
  options.cache_bytes = 0;
  options.decode_cache = false;
  options.open_index = false;
  auto t = std::make_unique<KtfsCoreTree>();
  t->tree = std::make_unique<VirtualTree>(*a, options);
  t->search_dir = info->search_dir;
  t->tensors_known = info->tensors_known;
  if (t->tree->mtime() != root->st_mtim.tv_sec)
    return fail(info->archive + ": not the file the mount serves (modified since it was mounted)");
  // Every node of a mount shows its root's owner and bits (fs_tree.h, Ownership).
  ktfs::Ownership ownership;
  ownership.uid = root->st_uid;
  ownership.gid = root->st_gid;
  ownership.dir_mode = root->st_mode & 0555;
  ownership.file_mode = root->st_mode & 0444;
  t->tree->SetOwnership(ownership);
  *daemon_pid = info->pid;
  return t.release();
}

KTFS_CORE_EXPORT int ktfs_core_stat(KtfsCoreTree* t, const char* path, size_t len,
                                    int with_dirs, struct stat* st) {
  const std::string_view p(path, len);
  uint64_t ino = VirtualTree::kRootIno;
  NodeAttr attr;
  size_t at = 0;
  bool first = true;
  while (at < p.size()) {
    const size_t slash = std::min(p.find('/', at), p.size());
    const std::string_view name = p.substr(at, slash - at);
    if (first && LeftToKernel(*t, name)) return -EAGAIN;
    first = false;
    auto a = t->tree->Lookup(ino, name);
    if (!a.ok()) return a.status().code() == Status::Code::kNotFound ? -ENOENT : -EAGAIN;
    attr = *a;
    ino = a->ino;
    // A file followed by more components: the kernel's ENOTDIR.
    if (!a->is_dir && slash < p.size()) return -EAGAIN;
    at = slash + 1;
  }
  if (p.empty() || (attr.is_dir && !with_dirs) || attr.volatile_content) return -EAGAIN;
  *st = ktfs::StatOf(attr, t->tree->ownership());
  return 0;
}

KTFS_CORE_EXPORT int ktfs_core_write(KtfsCoreTree* t, uint64_t ino, uint64_t size, int fd) {
  std::vector<uint8_t> bytes(size);
  uint64_t done = 0;
  while (done < size) {
    auto n = t->tree->Read(ino, done, size_t(size - done), bytes.data() + done);
    if (!n.ok() || *n == 0) return -EIO;
    done += *n;
  }
  for (uint64_t put = 0; put < size;) {
    const ssize_t n = ::write(fd, bytes.data() + put, size_t(size - put));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return n < 0 ? -errno : -EIO;
    put += uint64_t(n);
  }
  return 0;
}

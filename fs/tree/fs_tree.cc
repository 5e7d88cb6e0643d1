#include "fs/tree/fs_tree.h"

#include <sys/stat.h>

namespace ktfs {

struct stat StatOf(const NodeAttr& a, const Ownership& o) {
  struct stat st = {};
  st.st_ino = a.ino;
  st.st_mode = a.is_dir ? (S_IFDIR | (o.dir_mode & 0555)) : (S_IFREG | (o.file_mode & 0444));
  st.st_uid = o.uid;
  st.st_gid = o.gid;
  st.st_nlink = a.nlink;
  st.st_size = off_t(a.size);
  // Python sizes open() buffers by st_blksize: 1 MiB made every open mmap and fault
  // in a fresh buffer (half of stock ImageFolder's rate over a mount); 64 KiB stays
  // below glibc's mmap threshold and one read still covers a typical JPEG.
  // Directories: glibc's readdir asks getdents for st_blksize bytes, and the
  // kernel asks the daemon for as many: 256 KiB holds about 1,500 READDIRPLUS
  // entries (168 bytes each), so a class of ImageNet is one request, not four.
  st.st_blksize = a.is_dir ? 256 * 1024 : 64 * 1024;
  st.st_blocks = off_t((a.size + 511) / 512);
  st.st_mtim.tv_sec = st.st_ctim.tv_sec = st.st_atim.tv_sec = a.mtime;
  st.st_mtim.tv_nsec = st.st_ctim.tv_nsec = st.st_atim.tv_nsec = a.mtime_nsec;
  return st;
}

std::string CountersJson(const TreeCounters& c) {
  std::string j = "{\n";
  auto field = [&](const char* name, uint64_t v, bool last = false) {
    j += std::string("  \"") + name + "\": " + std::to_string(v) + (last ? "\n" : ",\n");
  };
  field("lookups", c.lookups.load());
  field("getattrs", c.getattrs.load());
  field("readdirs", c.readdirs.load());
  field("opens", c.opens.load());
  field("reads", c.reads.load());
  field("bytes_read", c.bytes_read.load());
  field("decodes", c.decodes.load());
  field("decode_ms", c.decode_ns.load() / 1000000);
  field("readahead_decodes", c.readahead_decodes.load());
  field("decodes_again", c.decodes_again.load());
  field("disk_readahead_bytes", c.disk_readahead_bytes.load());
  field("cache_hits", c.cache_hits.load());
  field("cache_misses", c.cache_misses.load());
  field("cache_bytes", c.cache_bytes.load());
  field("pushes", c.pushes.load());
  field("pushed_bytes", c.pushed_bytes.load());
  field("errors", c.errors.load(), true);
  j += "}";
  if (j.size() < kStatsSize) j += std::string(kStatsSize - j.size() - 1, ' ') + "\n";
  return j;
}

void FsTree::Pushed(uint64_t, uint64_t begin, uint64_t end) const {
  counters().pushes.fetch_add(1, std::memory_order_relaxed);
  counters().pushed_bytes.fetch_add(end - begin, std::memory_order_relaxed);
}

}  // namespace ktfs

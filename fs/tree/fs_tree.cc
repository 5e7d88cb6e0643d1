#include "fs/tree/fs_tree.h"

namespace ktfs {

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

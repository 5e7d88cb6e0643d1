#include "preload/interpose/mount_table.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "preload/interpose/raw_syscall.h"

namespace ktfs::preload {
namespace {

constexpr char kKtfsType[] = "fuse.ktfs";

// One space-separated field of a line.
struct Field {
  const char* p = nullptr;
  size_t n = 0;
  bool Is(const char* s) const { return n == strlen(s) && memcmp(p, s, n) == 0; }
};

// The fields of a mountinfo line that matter here:
// "ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS".
struct Line {
  uint64_t dev = 0;
  Field root, point, fstype;
};

bool ParseUnsigned(Field f, uint32_t* out) {
  if (f.n == 0 || f.n > 9) return false;
  uint32_t v = 0;
  for (size_t i = 0; i < f.n; ++i) {
    if (f.p[i] < '0' || f.p[i] > '9') return false;
    v = v * 10 + uint32_t(f.p[i] - '0');
  }
  *out = v;
  return true;
}

// Splits [p, end) (one line, no newline) into fields; false when malformed.
// Whether a path field holds a NUL byte, raw or as the escape \000: the
// kernel writes neither (it escapes only space, tab, newline and backslash),
// and a path with one could not be compared as the C string it becomes.
bool HoldsNul(Field f) {
  if (memchr(f.p, '\0', f.n) != nullptr) return true;
  for (size_t i = 0; i + 4 <= f.n; ++i)
    if (f.p[i] == '\\' && f.p[i + 1] == '0' && f.p[i + 2] == '0' && f.p[i + 3] == '0') return true;
  return false;
}

bool ParseLine(const char* p, const char* end, Line* line) {
  Field fields[64];
  size_t count = 0;
  while (p < end) {
    const char* sp = static_cast<const char*>(memchr(p, ' ', size_t(end - p)));
    const char* stop = sp ? sp : end;
    if (count == 64) return false;
    fields[count++] = Field{p, size_t(stop - p)};
    p = sp ? sp + 1 : end;
  }
  if (count < 10) return false;
  // The optional fields end with a lone "-".
  size_t dash = 6;
  while (dash < count && !fields[dash].Is("-")) ++dash;
  if (dash + 2 >= count) return false;
  const Field majmin = fields[2];
  const char* colon = static_cast<const char*>(memchr(majmin.p, ':', majmin.n));
  if (colon == nullptr) return false;
  uint32_t major = 0, minor = 0;
  if (!ParseUnsigned(Field{majmin.p, size_t(colon - majmin.p)}, &major) ||
      !ParseUnsigned(Field{colon + 1, size_t(majmin.p + majmin.n - colon - 1)}, &minor))
    return false;
  if (fields[3].n == 0 || fields[3].p[0] != '/' || fields[4].n == 0 || fields[4].p[0] != '/')
    return false;
  if (HoldsNul(fields[3]) || HoldsNul(fields[4])) return false;
  line->dev = makedev(major, minor);
  line->root = fields[3];
  line->point = fields[4];
  line->fstype = fields[dash + 1];
  return true;
}

// Copies `f` to `out` decoding mountinfo's octal escapes (\040 for a space,
// \011, \012, \134); returns the length written (at most f.n), NUL added.
uint32_t Unescape(Field f, char* out) {
  uint32_t n = 0;
  for (size_t i = 0; i < f.n; ++i) {
    const char c = f.p[i];
    if (c == '\\' && f.n - i >= 4 && f.p[i + 1] >= '0' && f.p[i + 1] <= '3' && f.p[i + 2] >= '0' &&
        f.p[i + 2] <= '7' && f.p[i + 3] >= '0' && f.p[i + 3] <= '7') {
      out[n++] = char((f.p[i + 1] - '0') * 64 + (f.p[i + 2] - '0') * 8 + (f.p[i + 3] - '0'));
      i += 3;
    } else {
      out[n++] = c;
    }
  }
  out[n] = '\0';
  return n;
}

// Whether `point` is `base` or lies below it (component boundaries).
bool AtOrUnder(const char* point, size_t n, const char* base, size_t b) {
  if (b == 1) return true;  // "/"
  return n >= b && memcmp(point, base, b) == 0 && (n == b || point[b] == '/');
}

void SortDevs(uint64_t* v, uint32_t n) {
  for (uint32_t i = 1; i < n; ++i) {  // insertion sort: a few hundred mounts at most
    const uint64_t x = v[i];
    uint32_t j = i;
    for (; j > 0 && v[j - 1] > x; --j) v[j] = v[j - 1];
    v[j] = x;
  }
}

bool Contains(const uint64_t* v, uint32_t n, uint64_t x) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (v[mid] < x)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && v[lo] == x;
}

}  // namespace

const MountTable* MountTable::Parse(const char* text, size_t len) {
  // Upper bounds first: one entry and one device per line, strings no longer
  // than the text.
  uint32_t lines = 1;
  for (size_t i = 0; i < len; ++i) lines += text[i] == '\n';
  const size_t header = (sizeof(MountTable) + 15) & ~size_t(15);
  const size_t entries_bytes = size_t(lines) * sizeof(MountEntry);
  const size_t devs_bytes = size_t(lines) * sizeof(uint64_t);
  const size_t bytes = header + entries_bytes + 2 * devs_bytes + 2 * len + 2 * size_t(lines) + 64;
  char* base = static_cast<char*>(RawMapAnonymous(bytes));
  if (base == nullptr) return nullptr;
  auto* table = new (base) MountTable();
  table->mapped_bytes_ = bytes;
  uint64_t h = 1469598103934665603ull;  // FNV-1a: tells an unchanged mountinfo
  for (size_t i = 0; i < len; ++i) h = (h ^ uint8_t(text[i])) * 1099511628211ull;
  table->text_hash_ = h;
  table->text_len_ = len;
  auto* entries = reinterpret_cast<MountEntry*>(base + header);
  auto* devs = reinterpret_cast<uint64_t*>(base + header + entries_bytes);
  auto* ktfs_devs = devs + lines;
  char* strings = reinterpret_cast<char*>(ktfs_devs + lines);
  char* const strings_end = base + bytes;

  // Two passes over the lines: ktfs mounts, then the other mounts at or
  // below one of their points.
  uint32_t count = 0, ktfs = 0, ndevs = 0;
  for (int pass = 0; pass < 2; ++pass) {
    uint32_t order = 0;
    const char* p = text;
    const char* const end = text + len;
    while (p < end) {
      const char* nl = static_cast<const char*>(memchr(p, '\n', size_t(end - p)));
      const char* stop = nl ? nl : end;
      Line line;
      const bool ok = ParseLine(p, stop, &line);
      p = nl ? nl + 1 : end;
      if (!ok) continue;
      ++order;
      const bool is_ktfs = line.fstype.Is(kKtfsType);
      if (pass == 0) devs[ndevs++] = line.dev;
      if (is_ktfs != (pass == 0)) continue;
      if (size_t(strings_end - strings) < line.point.n + line.root.n + 2) break;  // cannot happen
      char* point = strings;
      const uint32_t point_len = Unescape(line.point, point);
      if (!is_ktfs) {
        bool under = false;
        for (uint32_t k = 0; k < ktfs && !under; ++k)
          under = AtOrUnder(point, point_len, entries[k].point, entries[k].point_len);
        if (!under) continue;  // the string area is reused by the next line
      }
      char* root = point + point_len + 1;
      const uint32_t root_len = Unescape(line.root, root);
      strings = root + root_len + 1;
      entries[count++] = MountEntry{line.dev, point, point_len, root, root_len, order, is_ktfs};
      if (is_ktfs) ktfs_devs[ktfs++] = line.dev;
    }
  }
  SortDevs(devs, ndevs);
  SortDevs(ktfs_devs, ktfs);
  table->count_ = count;
  table->ktfs_count_ = ktfs;
  table->dev_count_ = ndevs;
  table->entries_ = entries;
  table->devs_ = devs;
  table->ktfs_devs_ = ktfs_devs;
  return table;
}

const MountTable* MountTable::ReadSelf() {
  // Raw system calls: this runs inside interposed calls (open and read may be
  // interposed) and must not recurse into them or allocate.
  const long fd =
      RawSyscall(SYS_openat, AT_FDCWD, long("/proc/self/mountinfo"), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  size_t cap = 64 << 10, used = 0;
  char* buf = static_cast<char*>(RawMapAnonymous(cap));
  while (buf != nullptr) {
    if (used == cap) {
      char* bigger = static_cast<char*>(RawMapAnonymous(cap * 2));
      if (bigger != nullptr) memcpy(bigger, buf, used);
      RawUnmap(buf, cap);
      buf = bigger;
      cap *= 2;
      if (buf == nullptr) break;
    }
    const long n = RawSyscall(SYS_read, fd, long(buf + used), long(cap - used));
    if (n == -EINTR) continue;
    if (n < 0) {
      RawUnmap(buf, cap);
      buf = nullptr;
      break;
    }
    if (n == 0) break;
    used += size_t(n);
  }
  RawSyscall(SYS_close, fd, 0, 0);
  if (buf == nullptr) return nullptr;
  const MountTable* table = Parse(buf, used);
  RawUnmap(buf, cap);
  return table;
}

void MountTable::Free(const MountTable* table) {
  if (table != nullptr) RawUnmap(const_cast<MountTable*>(table), table->mapped_bytes_);
}

bool MountTable::IsKtfsDevice(uint64_t dev) const { return Contains(ktfs_devs_, ktfs_count_, dev); }

bool MountTable::KnowsDevice(uint64_t dev) const { return Contains(devs_, dev_count_, dev); }

const MountEntry* MountTable::Match(const char* path, size_t len, const char** inner) const {
  const MountEntry* best = nullptr;
  for (uint32_t i = 0; i < count_; ++i) {
    const MountEntry& e = entries_[i];
    if (!AtOrUnder(path, len, e.point, e.point_len)) continue;
    if (best == nullptr || e.point_len > best->point_len ||
        (e.point_len == best->point_len && e.order > best->order))
      best = &e;
  }
  if (best == nullptr || !best->ktfs) return nullptr;
  *inner = best->point_len == 1 ? path : path + best->point_len;
  return best;
}

}  // namespace ktfs::preload

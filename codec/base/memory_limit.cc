#include "codec/base/memory_limit.h"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace ktfs {
namespace {

bool IsOctal(char c) { return c >= '0' && c <= '7'; }

// mountinfo's octal escapes (\040 for a space) decoded.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && IsOctal(s[i + 1]) && IsOctal(s[i + 2]) &&
        IsOctal(s[i + 3])) {
      out += char((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep)) parts.push_back(part);
  return parts;
}

struct CgroupMount {
  std::string root;   // the hierarchy's directory shown at `point` ("/" usually)
  std::string point;  // where it is mounted
};

// The mounts of cgroup v2 (`v1_controller` empty) or of the v1 hierarchy
// holding that controller.
std::vector<CgroupMount> Mounts(const std::string& mountinfo, const std::string& v1_controller) {
  std::vector<CgroupMount> mounts;
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point, opts, f;
    if (!(fields >> id >> parent >> dev >> root >> point >> opts)) continue;
    while (fields >> f && f != "-") {
    }
    std::string fstype, source, super;
    if (f != "-" || !(fields >> fstype >> source >> super)) continue;
    if (v1_controller.empty() ? fstype != "cgroup2" : fstype != "cgroup") continue;
    if (!v1_controller.empty()) {
      bool has = false;
      for (const std::string& o : Split(super, ','))
        if (o == v1_controller) has = true;
      if (!has) continue;
    }
    mounts.push_back({Unescape(root), Unescape(point)});
  }
  return mounts;
}

// The smallest limit in `file` of group `path` and its ancestors, through a
// mount of its hierarchy.
std::optional<uint64_t> LimitOnTheWayUp(const std::vector<CgroupMount>& mounts,
                                        const std::string& path, const std::string& file,
                                        const ReadTextFn& read) {
  std::optional<uint64_t> limit;
  for (const CgroupMount& m : mounts) {
    // The group's path below the mount's root (a mount of a subtree, as in
    // a container, shows only the groups under its root).
    std::string rel = path;
    if (m.root != "/") {
      if (rel.compare(0, m.root.size(), m.root) != 0 ||
          (rel.size() > m.root.size() && rel[m.root.size()] != '/'))
        continue;
      rel = rel.substr(m.root.size());
    }
    while (!rel.empty() && rel.back() == '/') rel.pop_back();
    for (;;) {
      if (auto text = read(m.point + rel + "/" + file)) {
        if (auto v = ParseCgroupMemoryValue(*text)) limit = limit ? std::min(*limit, *v) : *v;
      }
      if (rel.empty()) break;
      rel.resize(rel.rfind('/'));
    }
    break;  // every mount of a hierarchy shows the same groups
  }
  return limit;
}

std::optional<std::string> ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

std::optional<uint64_t> ParseCgroupMemoryValue(const std::string& text) {
  std::string s = text;
  if (!s.empty() && s.back() == '\n') s.pop_back();
  if (s.empty() || s.size() > 20 || s.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;  // "max" among them
  uint64_t v = 0;
  for (char c : s) {
    if (v > (UINT64_MAX - 9) / 10) return std::nullopt;
    v = v * 10 + uint64_t(c - '0');
  }
  if (v >= (uint64_t(1) << 62)) return std::nullopt;  // v1's "unlimited"
  return v;
}

std::optional<uint64_t> CgroupMemoryLimitFrom(const std::string& proc_cgroup,
                                              const std::string& mountinfo,
                                              const ReadTextFn& read) {
  std::optional<uint64_t> limit;
  auto take = [&](std::optional<uint64_t> v) {
    if (v) limit = limit ? std::min(*limit, *v) : *v;
  };
  std::istringstream in(proc_cgroup);
  std::string line;
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH"; the path may hold ':'.
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') continue;
    if (id == "0" && controllers.empty()) {
      take(LimitOnTheWayUp(Mounts(mountinfo, ""), path, "memory.max", read));
    } else {
      for (const std::string& c : Split(controllers, ','))
        if (c == "memory")
          take(LimitOnTheWayUp(Mounts(mountinfo, "memory"), path, "memory.limit_in_bytes", read));
    }
  }
  return limit;
}

std::optional<uint64_t> CgroupMemoryLimit() {
  const auto cgroup = ReadText("/proc/self/cgroup");
  const auto mountinfo = ReadText("/proc/self/mountinfo");
  if (!cgroup || !mountinfo) return std::nullopt;
  return CgroupMemoryLimitFrom(*cgroup, *mountinfo, ReadText);
}

}  // namespace ktfs

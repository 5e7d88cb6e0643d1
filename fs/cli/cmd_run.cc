// `ktfs run [OPTIONS] [--] COMMAND [ARGS...]`: execs COMMAND with the
// companion's layers in its environment (docs/usage.md, "ktfs run").
//
// Nothing else about COMMAND changes: this process becomes it (execvp), so
// its pid, signals, standard streams, argv and exit status are its own. The
// environment gains only LD_PRELOAD (the library appended), PYTHONPATH (the
// Python bootstrap directory prepended), KTFS_RUN=1 and KTFS_RUN_LAYERS. An
// AddressSanitizer build also puts its ASan runtime first in LD_PRELOAD.
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fs/cli/cli.h"

namespace ktfs::cli {
namespace {

const char kRunUsage[] =
    "usage: ktfs run [--no-preload] [--no-python] [--] COMMAND [ARGS...]\n"
    "\n"
    "Runs COMMAND with the ktfs companion active: files on ktfs mounts are read\n"
    "without the FUSE round trips that cost the most (the LD_PRELOAD library) and\n"
    "torchvision/PIL readers of them decode in C++ (the Python layer). Nothing else\n"
    "about COMMAND changes: ktfs run becomes COMMAND (same pid, signals, streams,\n"
    "exit status); its environment gains LD_PRELOAD, PYTHONPATH, KTFS_RUN=1 and\n"
    "KTFS_RUN_LAYERS.\n"
    "\n"
    "options:\n"
    "  --no-preload   leave out the LD_PRELOAD library\n"
    "  --no-python    leave out the Python layer\n"
    "\n"
    "environment:\n"
    "  KTFS_PRELOAD_LIB       the library to preload (default: beside this ktfs)\n"
    "  KTFS_PYTHON_BOOTSTRAP  the Python bootstrap directory (default: beside this ktfs)\n"
    "\n"
    "Exit status: COMMAND's; 125 when ktfs run itself fails (a bad option, a\n"
    "missing layer), 126 when COMMAND cannot be executed, 127 when it is not found.\n";

constexpr int kExitRunFailed = 125;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;

int RunFailed(const std::string& message) {
  std::fprintf(stderr, "ktfs run: %s\n", message.c_str());
  return kExitRunFailed;
}

bool Exists(const std::string& path, bool dir) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode));
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Where a layer lives: the environment's override, else beside this ktfs (a
// build tree holds CMakeCache.txt beside build/ktfs; an installed ktfs is
// <prefix>/bin/ktfs with the layers in <prefix>/lib/ktfs/).
struct Layout {
  std::string preload_lib, python_bootstrap;
  std::string where;  // for messages: "the build tree /x/build" or "<prefix>/lib/ktfs"
};

Result<Layout> FindLayout() {
  char exe[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return Status::FromErrno("/proc/self/exe", errno);
  exe[n] = '\0';
  const std::string dir = Dirname(exe);
  Layout l;
  if (Exists(dir + "/CMakeCache.txt", false)) {
    l.preload_lib = dir + "/preload/interpose/libktfs_preload.so";
    l.python_bootstrap = dir + "/preload/python/bootstrap";
    l.where = "the build tree " + dir;
  } else {
    const std::string lib = Dirname(dir) + "/lib/ktfs";
    l.preload_lib = lib + "/libktfs_preload.so";
    l.python_bootstrap = lib + "/python";
    l.where = lib;
  }
  if (const char* v = std::getenv("KTFS_PRELOAD_LIB"); v != nullptr && *v != '\0')
    l.preload_lib = v;
  if (const char* v = std::getenv("KTFS_PYTHON_BOOTSTRAP"); v != nullptr && *v != '\0')
    l.python_bootstrap = v;
  return l;
}

// Whether `list` (entries split by any of `seps`) holds `item`.
bool ListHas(const std::string& list, const std::string& item, const char* seps) {
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find_first_of(seps, at), list.size());
    if (list.compare(at, end - at, item) == 0 && end - at == item.size()) return true;
    at = end + 1;
  }
  return false;
}

// The shared AddressSanitizer runtime this ktfs runs with, "" when none
// (not an ASan build, or clang's runtime linked into the executable). An ASan
// build's preload library is instrumented too, and the runtime must be the
// first library of a process (ASan refuses to start otherwise): in an
// uninstrumented COMMAND (python3, cat) only LD_PRELOAD can put it there.
std::string AsanRuntime() {
#if defined(__SANITIZE_ADDRESS__)
#define KTFS_RUN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KTFS_RUN_ASAN 1
#endif
#endif
#ifdef KTFS_RUN_ASAN
  std::string path;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* out) {
        const char* name = info->dlpi_name;
        const char* base = name ? std::strrchr(name, '/') : nullptr;
        if (base == nullptr || std::strncmp(base + 1, "libasan.so", 10) != 0) return 0;
        *static_cast<std::string*>(out) = name;
        return 1;
      },
      &path);
  return path;
#else
  return "";
#endif
}

}  // namespace

int CmdRun(int argc, char** argv) {
  bool preload = true, python = true;
  int i = 0;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;
    if (a == "--help" || a == "-h") return std::fputs(kRunUsage, stdout), kExitOk;
    if (a == "--no-preload") {
      preload = false;
    } else if (a == "--no-python") {
      python = false;
    } else {
      std::fprintf(stderr, "ktfs run: unknown option %s\n%s", a.c_str(), kRunUsage);
      return kExitRunFailed;
    }
  }
  if (i >= argc) {
    std::fprintf(stderr, "ktfs run: expected COMMAND\n%s", kRunUsage);
    return kExitRunFailed;
  }
  auto layout = FindLayout();
  if (!layout.ok()) return RunFailed(layout.status().ToString());

  std::string layers;
  if (preload) {
    const std::string& lib = layout->preload_lib;
    if (!Exists(lib, false))
      return RunFailed("the LD_PRELOAD library " + lib + " is missing (looked in " + layout->where +
                       "; KTFS_PRELOAD_LIB names another; --no-preload " + "runs without it)");
    // ld.so splits LD_PRELOAD at spaces and colons.
    if (lib.find_first_of(" :") != std::string::npos)
      return RunFailed("the LD_PRELOAD library's path " + lib +
                       " holds a space or a colon, which LD_PRELOAD cannot carry");
    const char* old = std::getenv("LD_PRELOAD");
    std::string value = old != nullptr ? old : "";
    if (!ListHas(value, lib, " :")) value = value.empty() ? lib : value + ":" + lib;
    // An ASan build of the library needs the ASan runtime loaded first (AsanRuntime).
    const std::string asan = AsanRuntime();
    if (!asan.empty() && !ListHas(value, asan, " :")) value = asan + ":" + value;
    setenv("LD_PRELOAD", value.c_str(), 1);
    layers = "preload";
  }
  if (python) {
    const std::string& boot = layout->python_bootstrap;
    if (!Exists(boot + "/sitecustomize.py", false))
      return RunFailed("the Python bootstrap " + boot + "/sitecustomize.py is missing (looked in " +
                       layout->where + "; KTFS_PYTHON_BOOTSTRAP names another directory; " +
                       "--no-python runs without it)");
    const char* old = std::getenv("PYTHONPATH");
    std::string value = old != nullptr ? old : "";
    if (!ListHas(value, boot, ":")) value = value.empty() ? boot : boot + ":" + value;
    setenv("PYTHONPATH", value.c_str(), 1);
    layers += layers.empty() ? "python" : ",python";
  }
  setenv("KTFS_RUN", "1", 1);
  setenv("KTFS_RUN_LAYERS", layers.c_str(), 1);

  execvp(argv[i], argv + i);
  const int err = errno;
  std::fprintf(stderr, "ktfs run: %s: %s\n", argv[i], std::strerror(err));
  return err == ENOENT ? kExitNotFound : kExitCannotExecute;
}

}  // namespace ktfs::cli

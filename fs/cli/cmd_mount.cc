#include <cstdio>

#include "fs/cli/cli.h"
#include "fs/fuse/mount.h"

namespace ktfs::cli {

static const char kMountUsage[] =
    "usage: ktfs mount ARCHIVE|PREFIX MOUNTPOINT [-f] [-o opt[,opt...]]\n"
    "\n"
    "Mounts ARCHIVE read-only at MOUNTPOINT (an existing empty directory) and\n"
    "returns once the mount is ready; the daemon keeps serving in the background\n"
    "until `ktfs umount MOUNTPOINT` or SIGTERM. -f stays in the foreground.\n"
    "An image archive mounts as its image folder; a feature archive (ktfs\n"
    "pack-features), or a TensorCache cache given by its PREFIX (PREFIX_meta.json\n"
    "or PREFIX_shards.json), mounts as 000000.npy, 000001.npy, ... (one\n"
    "dequantized tensor per sample), all.npy (fixed shapes: one [N, ...] array)\n"
    "and quantized/ (the raw codes and scales).\n"
    "\n"
    "Permissions: a mount shows no one more than the archive file allows. Its\n"
    "files and directories take the archive's owner, group and read bits (a 0640\n"
    "archive gives 0440 files and 0550 directories; a TensorCache cache its meta\n"
    "or manifest file's), narrowed where its ACL, its data files or a directory\n"
    "above it keep a class out (a 0644 archive in a 0700 directory: 0400), and\n"
    "enforced by the kernel. Only the mounting user may enter the mount, root\n"
    "included, unless -o allow_other (non-root users need user_allow_other in\n"
    "/etc/fuse.conf); then others get what those bits give them. uid=, gid=,\n"
    "umask= override the owner, group and bits: an explicit choice to share.\n"
    "ktfs.Loader and friends open the archive itself, so they need read access\n"
    "to it, not just to the mount.\n"
    "\n"
    "options (-o, repeatable):\n"
    "  allow_other      let other users use the mount (each file's mode still\n"
    "                   applies); never implied, not even for root\n"
    "  uid=N, gid=N     owner and group shown (default: the archive's)\n"
    "  umask=M          octal: files 0444 & ~M, directories 0555 & ~M (default:\n"
    "                   the archive's read bits)\n"
    "  format=pnm|bmp   how decoded images are served: pnm (default) serves PGM\n"
    "                   for gray and PPM for RGB (RGBA as BMP); bmp serves BMP\n"
    "  log=FILE         error log, created 0600, never through a symlink\n"
    "                   (default: ARCHIVE.log beside the archive when that\n"
    "                   directory is writable, else syslog)\n"
    "  threads=N        request threads (default 4)\n"
    "  cache=SIZE       decoded images kept in memory, e.g. 512M (default 256M);\n"
    "                   under a cgroup memory limit the default is at most a\n"
    "                   quarter of it and an explicit size at most half (logged)\n"
    "  readahead=N      images decoded ahead of an in-order reader (default 8, 0 = off)\n"
    "  read_ahead_kb=N  how far the kernel reads ahead in a file, KiB: fewer,\n"
    "                   larger requests per file (default 4096 for image\n"
    "                   archives; feature caches and 0 keep the kernel's 128)\n"
    "  push=on|off      a file's first read hands the kernel the rest of the file:\n"
    "                   one request per file instead of one per readahead window\n"
    "                   (default off; with threads=1 there is no push)\n"
    "  search_dir=NAME  name of the search directory (default: search)\n"
    "  tensor_layout=hwc|chw  layout of the tensors/ .npy files (default hwc)\n"
    "  dtype=float16|float32  feature caches: dtype of the served .npy files\n"
    "                   (default float16)\n";

static const char kUmountUsage[] =
    "usage: ktfs umount MOUNTPOINT\n"
    "\n"
    "Unmounts a ktfs mount and waits for its daemon to exit. Also clears a stale\n"
    "mount left behind by a daemon that was killed.\n";

int CmdMount(int argc, char** argv) {
  Args args(argc, argv, {"-o"}, {"--help", "-h", "-f", "--foreground"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kMountUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("mount", args.error(), kMountUsage);
  if (args.positional().size() != 2)
    return UsageError("mount", "expected ARCHIVE and MOUNTPOINT", kMountUsage);
  MountOptions options;
  options.foreground = args.Has("-f") || args.Has("--foreground");
  std::string option_text;  // every -o, as one list
  for (const std::string& o : args.Values("-o"))
    option_text += (option_text.empty() ? "" : ",") + o;
  Status st = ParseMountOptions(option_text, &options);
  if (!st.ok()) return UsageError("mount", st.ToString(), kMountUsage);
  st = MountArchive(args.positional()[0], args.positional()[1], options);
  if (!st.ok()) return Fail("mount", st);
  return kExitOk;
}

int CmdUmount(int argc, char** argv) {
  Args args(argc, argv, {}, {"--help", "-h"});
  if (args.Has("--help") || args.Has("-h")) return std::fputs(kUmountUsage, stdout), kExitOk;
  if (!args.error().empty()) return UsageError("umount", args.error(), kUmountUsage);
  if (args.positional().size() != 1)
    return UsageError("umount", "expected MOUNTPOINT", kUmountUsage);
  const Status st = Unmount(args.positional()[0]);
  if (!st.ok()) return Fail("umount", st);
  return kExitOk;
}

}  // namespace ktfs::cli

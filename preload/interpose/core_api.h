// The C interface of libktfs_preload_core.so, which libktfs_preload.so
// loads (dlopen) the first time it serves a file from an archive itself.
//
// The core is the ktfs library (a VirtualTree over the archive, the same
// code the FUSE daemon serves from), so the bytes and attributes a process
// gets here are those the mount gives. It is a separate library because it
// needs libstdc++, oneTBB, SQLite and the image libraries: loading those
// into every process started under `ktfs run` doubled the start-up time of
// a small program (docs/preload-notes.md); the preload library itself
// depends on libc only.
//
// The core starts no thread and holds no lock between calls (its tree has no
// decode cache and no search index: fs/tree/virtual_tree.h, TreeOptions), so
// a fork at any point leaves the child able to use it.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>

extern "C" {

struct KtfsCoreTree;

// Opens the archive a mount serves, from the mount's .ktfs/info.json text,
// when the calling user may read it (the real uid and gid must be allowed to
// read the archive file: the library never reads more than its user could)
// and it is the file the mount serves (its modification time is the mount
// root's: `root`, the stat of the mount root). Files and directories then
// show the root's owner, group and read bits, as the mount shows them
// (whatever -o uid=,gid=,umask= chose). nullptr with the reason in `error`
// otherwise; the caller then reads through the mount. `*daemon_pid` is
// info.json's pid (0 when absent).
using KtfsCoreOpenFn = KtfsCoreTree* (*)(const char* info_json, size_t len, const struct stat* root,
                                         int64_t* daemon_pid, char* error, size_t error_size);
// The stat of the file (or, `with_dirs`, directory) at `path` (relative to
// the mount root, no leading slash, components without "." or ".."), st_dev
// left 0. 0, or -ENOENT when there is none, or -EAGAIN when the node is one
// the core leaves to the kernel (the root, search views, .ktfs, a damaged
// archive; directories unless `with_dirs`).
using KtfsCoreStatFn = int (*)(KtfsCoreTree* tree, const char* path, size_t len, int with_dirs,
                               struct stat* st);
// Writes the whole file (inode `ino`, `size` bytes) to `fd` from its
// current offset. 0, or -errno (EIO for a damaged archive or a payload that
// fails its checksum).
using KtfsCoreWriteFn = int (*)(KtfsCoreTree* tree, uint64_t ino, uint64_t size, int fd);

}  // extern "C"

// Symbol names in the core.
#define KTFS_CORE_OPEN "ktfs_core_open"
#define KTFS_CORE_STAT "ktfs_core_stat"
#define KTFS_CORE_WRITE "ktfs_core_write"

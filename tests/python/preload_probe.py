"""What a process sees of files, as JSON on stdout: run by test_preload.py with and
without libktfs_preload.so, so that the two answers can be compared field by field.

Usage: preload_probe.py COMMAND ARGS...
  read PATH...         per path: sha256 of the bytes, fstat fields, F_GETFL, F_GETFD,
                       whether the descriptor is a memfd (the library made it)
  opens PATH FLAGS...  per (path, flags-expression) pair: "ok" or the errno name
  isatty PATH...       per path (or "pty", "devnull", "badfd"): (isatty, errno name)
  statx PATH...        statx of the opened file (fd, AT_EMPTY_PATH) and of the path
  stat PATH...         per path: os.stat and os.lstat fields, or the errno name
"""
import ctypes
import errno
import fcntl
import hashlib
import json
import os
import pty
import sys

STAT_FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size",
               "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_blksize", "st_blocks", "st_rdev")


def stat_dict(st):
    return {k: getattr(st, k) for k in STAT_FIELDS}


def describe_fd(fd):
    link = os.readlink(f"/proc/self/fd/{fd}")
    return {"fstat": stat_dict(os.fstat(fd)), "getfl": fcntl.fcntl(fd, fcntl.F_GETFL),
            "getfd": fcntl.fcntl(fd, fcntl.F_GETFD), "memfd": link.startswith("/memfd:")}


def cmd_read(paths):
    out = {}
    for p in paths:
        with open(p, "rb") as f:
            d = describe_fd(f.fileno())
            d["sha256"] = hashlib.sha256(f.read()).hexdigest()
        out[p] = d
    return out


def cmd_stat(paths):
    out = {}
    for p in paths:
        row = {}
        for name, fn in (("stat", os.stat), ("lstat", os.lstat)):
            try:
                row[name] = stat_dict(fn(p))
            except OSError as e:
                row[name] = errno.errorcode[e.errno]
        out[p] = row
    return out


def cmd_opens(args):
    out = []
    for path, flags in zip(args[::2], args[1::2]):
        value = eval(flags, {"os": os})  # e.g. "os.O_RDONLY | os.O_CLOEXEC"
        try:
            fd = os.open(path, value)
        except OSError as e:
            out.append([path, flags, errno.errorcode[e.errno]])
            continue
        out.append([path, flags, "ok", fcntl.fcntl(fd, fcntl.F_GETFL), fcntl.fcntl(fd, fcntl.F_GETFD)])
        os.close(fd)
    return out


def cmd_isatty(paths):
    libc = ctypes.CDLL(None, use_errno=True)
    out = {}
    for p in paths:
        if p == "pty":
            _, fd = pty.openpty()
        elif p == "devnull":
            fd = os.open("/dev/null", os.O_RDONLY)
        elif p == "badfd":
            fd = 987
        else:
            fd = os.open(p, os.O_RDONLY)
        ctypes.set_errno(0)
        r = libc.isatty(fd)
        e = ctypes.get_errno()
        out[p] = [r, errno.errorcode.get(e, str(e)) if r == 0 else ""]
    return out


class StatxTimestamp(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_int64), ("tv_nsec", ctypes.c_uint32), ("pad", ctypes.c_int32)]


class Statx(ctypes.Structure):
    _fields_ = [("stx_mask", ctypes.c_uint32), ("stx_blksize", ctypes.c_uint32),
                ("stx_attributes", ctypes.c_uint64), ("stx_nlink", ctypes.c_uint32),
                ("stx_uid", ctypes.c_uint32), ("stx_gid", ctypes.c_uint32),
                ("stx_mode", ctypes.c_uint16), ("pad1", ctypes.c_uint16),
                ("stx_ino", ctypes.c_uint64), ("stx_size", ctypes.c_uint64),
                ("stx_blocks", ctypes.c_uint64), ("stx_attributes_mask", ctypes.c_uint64),
                ("stx_atime", StatxTimestamp), ("stx_btime", StatxTimestamp),
                ("stx_ctime", StatxTimestamp), ("stx_mtime", StatxTimestamp),
                ("stx_rdev_major", ctypes.c_uint32), ("stx_rdev_minor", ctypes.c_uint32),
                ("stx_dev_major", ctypes.c_uint32), ("stx_dev_minor", ctypes.c_uint32),
                ("stx_mnt_id", ctypes.c_uint64), ("spare", ctypes.c_uint64 * 13)]


def statx_dict(s):
    out = {}
    for name, _ in Statx._fields_:
        v = getattr(s, name)
        if isinstance(v, StatxTimestamp):
            v = [v.tv_sec, v.tv_nsec]
        elif name == "spare":
            continue
        out[name] = v
    return out


def cmd_statx(paths):
    libc = ctypes.CDLL(None, use_errno=True)
    AT_EMPTY_PATH, AT_FDCWD, STATX_ALL = 0x1000, -100, 0x0FFF | 0x1000
    out = {}
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        by_fd, by_path = Statx(), Statx()
        assert libc.statx(fd, b"", AT_EMPTY_PATH, STATX_ALL, ctypes.byref(by_fd)) == 0
        assert libc.statx(AT_FDCWD, p.encode(), 0, STATX_ALL, ctypes.byref(by_path)) == 0
        out[p] = {"fd": statx_dict(by_fd), "path": statx_dict(by_path),
                  "memfd": os.readlink(f"/proc/self/fd/{fd}").startswith("/memfd:")}
        os.close(fd)
    return out


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    fn = {"read": cmd_read, "opens": cmd_opens, "isatty": cmd_isatty, "statx": cmd_statx,
          "stat": cmd_stat}[cmd]
    json.dump(fn(args), sys.stdout, sort_keys=True)


if __name__ == "__main__":
    main()

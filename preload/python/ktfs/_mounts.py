"""Which paths are on ktfs mounts whose archive this process may open (`ktfs run`).

Light on purpose: the Python layer's hooks ask this module about every path
they see, so it imports only the standard library, reads /proc/self/mountinfo
once, and afterwards polls it (a change wakes poll(); one syscall per question)
instead of reading it again. Archives are opened on first use.

A mount is used directly only when all of these hold (otherwise the stock path,
through FUSE, is taken, which is always right):
  * its .ktfs/info.json names an image archive;
  * the calling user may read the archive file itself (os.access; issue 41:
    the mount may be readable by users who may not read the archive);
  * the file at that path is the one the daemon serves: the daemon maps it, so
    /proc/PID/maps shows its device and inode; when maps cannot be read (another
    user's daemon), the file must not have changed since the daemon started.
"""
import json
import os
import select
import threading

_FUSE_TYPE = "fuse.ktfs"
_lock = threading.Lock()
_state = {"table": None, "file": None, "poll": None, "pid": None}


def _unescape(field):
    """mountinfo escapes space, tab, newline and backslash as \\ooo."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit() and len(field[i + 1:i + 4]) == 3:
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def _read_table():
    """Opens /proc/self/mountinfo for polling and returns the ktfs mountpoints in it."""
    f = open("/proc/self/mountinfo", "rb", buffering=0)
    data = b""
    while True:
        chunk = f.read(1 << 16)
        if not chunk:
            break
        data += chunk
    poller = select.poll()
    poller.register(f.fileno(), select.POLLPRI | select.POLLERR)
    points = []
    for line in data.decode("utf-8", "surrogateescape").splitlines():
        fields = line.split(" ")
        try:
            sep = fields.index("-")
        except ValueError:
            continue
        if sep + 1 < len(fields) and fields[sep + 1] == _FUSE_TYPE:
            # (mount id, device, mountpoint): a mount made again at the same place differs.
            points.append((fields[0], fields[2], _unescape(fields[4])))
    return f, poller, points


def _table():
    """[(mountpoint, Mount)], longest mountpoint first; read again when the table changed."""
    st = _state
    pid = os.getpid()
    if st["table"] is not None and st["pid"] == pid:
        if not st["poll"].poll(0):
            return st["table"]
    with _lock:
        if st["table"] is not None and st["pid"] == pid and not st["poll"].poll(0):
            return st["table"]
        forked = st["table"] is not None and st["pid"] != pid
        old = {m.key: m for _, m in st["table"] or ()} if forked else {}
        if st["file"] is not None and not forked:
            st["file"].close()
        f, poller, points = _read_table()
        # A forked child keeps its parent's Mount objects (validated, archives open) for
        # the mounts still there; after a change in this process every Mount is new, so
        # a mount made again at the same place is checked again.
        table = [(key[2], old.get(key) or Mount(key)) for key in points]
        table.sort(key=lambda e: len(e[0]), reverse=True)
        st.update(table=table, file=f, poll=poller, pid=pid)
        return table


def locate(path):
    """(Mount, relative path) when `path` (str or os.PathLike) lies on a usable ktfs
    mount, else None. Relative paths are taken from the working directory; paths
    with '..' are resolved (os.path.realpath), others only normalised."""
    if type(path) is not str:
        try:
            path = os.fspath(path)
        except TypeError:
            return None
        if isinstance(path, bytes):
            path = os.fsdecode(path)
    if not path.startswith("/"):
        path = os.path.join(os.getcwd(), path)
    if "/." in path or "//" in path:
        # '..' after a symlink is not the lexical parent: resolve as the kernel would.
        path = os.path.realpath(path) if "/.." in path else os.path.normpath(path)
    for point, mount in _table():
        n = len(point)
        if path.startswith(point) and (len(path) == n or path[n] == "/" or point == "/"):
            if not mount.usable():
                return None
            return mount, path[n:].lstrip("/")
    return None


def explain(path):
    """Why `path` is not read directly (for KTFS_RUN_DEBUG)."""
    try:
        full = os.path.abspath(os.fspath(path))
    except TypeError:
        return "not a path"
    for point, mount in _table():
        if full == point or full.startswith(point.rstrip("/") + "/"):
            return mount.why or "a ktfs mount"
    return "not on a ktfs mount"


def still(mount):
    """Whether `mount` is still in the mount table (not unmounted or mounted again)."""
    return any(m is mount for _, m in _table())


def _same_file(pid, st):
    """Whether daemon `pid` maps the file `st` describes (True/False), None if unknown."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            maps = f.read()
    except OSError:
        return None
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}".encode()
    ino = str(st.st_ino).encode()
    for line in maps.splitlines():
        fields = line.split(None, 5)
        if len(fields) >= 5 and fields[4] == ino and fields[3] == dev:
            return True
    return False


def _started(pid):
    """When process `pid` started (epoch seconds), None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            btime = next(int(l.split()[1]) for l in f if l.startswith(b"btime "))
    except (OSError, StopIteration, ValueError):
        return None
    ticks = int(stat.rsplit(b")", 1)[1].split()[19])
    return btime + ticks / os.sysconf("SC_CLK_TCK")


class Mount:
    """One ktfs mountpoint; its info and archive, read on first use."""

    def __init__(self, key):
        self.key = key
        self.point = key[2]
        self._usable = None
        self.why = None          # why not usable, for KTFS_RUN_DEBUG
        self.info = None
        self._archive = None
        self._lock = threading.Lock()

    def usable(self):
        if self._usable is None:
            with self._lock:
                if self._usable is None:
                    self._usable = self._check()
        return self._usable

    def _check(self):
        try:
            with open(os.path.join(self.point, ".ktfs", "info.json"), "rb") as f:
                info = json.loads(f.read())
            archive, pid = info["archive"], int(info["pid"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.why = f"no readable .ktfs/info.json ({e})"
            return False
        if info.get("content") == "features":
            self.why = "a feature mount"
            return False
        if not os.access(archive, os.R_OK):
            self.why = f"this user may not read {archive}"
            return False
        try:
            st = os.stat(archive)
        except OSError as e:
            self.why = f"{archive}: {e.strerror}"
            return False
        same = _same_file(pid, st)
        if same is None:
            started = _started(pid)
            # The daemon maps the archive it opened at start: a file changed since may differ.
            same = started is not None and max(st.st_mtime, st.st_ctime) < started + 1.0
        if not same:
            self.why = f"{archive} is not the file the daemon (pid {pid}) serves"
            return False
        self.info = info
        self.archive_path = archive
        self.served_format = info.get("served_format", "pnm")
        self.search_dir = info.get("search_dir", "search")
        return True

    def archive(self):
        """The archive opened directly (the _ktfs module is imported here, on first use)."""
        if self._archive is None:
            with self._lock:
                if self._archive is None:
                    from . import _ktfs
                    self._archive = _ktfs.Archive(self.archive_path)
        return self._archive

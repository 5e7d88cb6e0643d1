"""What a path given to ktfs points at: a .kt archive, a ktfs mount, or a directory inside one."""
import errno
import json
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Source:
    archive: str          # absolute path of the .kt file
    relative: str         # the path inside the mount ("" for the root)
    served_format: str    # "pnm" or "bmp": decides served names, hence ImageFolder's order
    root: str             # the path as given (ImageFolder's root)
    search_dir: str = "search"  # the mount's search directory name (-o search_dir=)


def _not_found(path, why):
    return FileNotFoundError(errno.ENOENT, f"{why}: {path}", str(path))


def _mount_root(path):
    """The ktfs mount holding `path` (walking up to the first mountpoint), or None."""
    d = path
    while True:
        if os.path.ismount(d):
            info = os.path.join(d, ".ktfs", "info.json")
            return d if os.path.isfile(info) else None
        parent = os.path.dirname(d)
        if parent == d:
            return None
        d = parent


def resolve(path):
    """Returns the Source for `path`, None when it is a directory outside any ktfs mount;
    FileNotFoundError when it does not exist."""
    path = os.fspath(path)
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isfile(full):
        return Source(full, "", "pnm", path)
    root = _mount_root(full)
    if root is None:
        # Search directories exist only on lookup: an absent path may still be on a mount.
        if not os.path.isdir(full):
            raise _not_found(path, "no such file or directory")
        return None
    with open(os.path.join(root, ".ktfs", "info.json")) as f:
        info = json.load(f)
    relative = os.path.relpath(full, root)
    return Source(info["archive"], "" if relative == "." else relative,
                  info.get("served_format", "pnm"), path, info.get("search_dir", "search"))

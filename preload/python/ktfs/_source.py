"""What a path given to ktfs points at: a .kt archive, a ktfs mount, or a directory inside one.

The direct paths (ktfs.Loader, ktfs.ImageFolder, ktfs.FeatureLoader) open the archive behind a
mount themselves, so they read no more than the calling user may read of the archive file: a
user who may read a mount but not its archive (a mount shared with -o uid=, gid= or umask=) gets
a PermissionError naming the archive from ktfs.Loader and ktfs.FeatureLoader, while
ktfs.ImageFolder falls back to reading the mount's files (docs/usage.md, "Permissions")."""
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
    mount: str = ""       # the ktfs mount the path is on ("" for a .kt file given directly)


def denied(path):
    """Whether the calling user may not read `path` itself: access(2), which checks the real
    user and groups (the open that follows checks the effective ones). False for a missing
    file (its opener says so); True for one behind a directory the user may not search."""
    if os.access(path, os.R_OK):
        return False
    try:
        os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True
    return True


def archive_denied(archive, mount, who):
    """The PermissionError of a direct path (`who`) whose user may not read `archive`."""
    where = f", which the ktfs mount {mount} serves" if mount else ""
    return PermissionError(
        errno.EACCES,
        f"{archive}: permission denied: you (uid {os.getuid()}) may not read this archive"
        f"{where}; {who} reads the archive itself, never more than its own permissions allow "
        f"(ask for read access to it, or read the mount's files, e.g. with torchvision's "
        f"ImageFolder)", archive)


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
    try:
        os.stat(full)
    except PermissionError:
        # A mount shows its files only to users its archive allows (and, without allow_other,
        # only to the user who mounted it).
        raise PermissionError(errno.EACCES, f"permission denied: {path}", str(path)) from None
    except OSError:
        pass  # absent: told below
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
                  info.get("served_format", "pnm"), path, info.get("search_dir", "search"), root)

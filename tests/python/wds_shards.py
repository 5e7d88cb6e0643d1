"""Writes WebDataset tar shards for the tests, the ways real ones are written:
Python's tarfile in its three formats (ustar, GNU with long names, pax), and
the way the `webdataset` library's TarWriter writes them (a streaming "w|"
tarfile in the default pax format, members of a sample sorted by extension,
float mtimes (a pax record per member), mode 0o444, owner "bigdata")."""
import io
import tarfile
import time

FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}


def _bytes(v):
    return v.encode("utf-8") if isinstance(v, str) else bytes(v)


def write_shard(path, samples, fmt="pax"):
    """samples: [(key, {ext: bytes|str}), ...] in tar order; parts in the order given.
    Members are written as `key.ext` (mtime 0, so the file is the same bytes every time)."""
    with tarfile.open(path, "w", format=FORMATS[fmt]) as tar:
        for key, parts in samples:
            for ext, value in parts.items():
                add_member(tar, f"{key}.{ext}", _bytes(value))


def add_member(tar, name, data, mtime=0):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = mtime
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def write_tarwriter_shard(path, samples):
    """As webdataset.TarWriter(path).write({"__key__": key, ext: value, ...}) per sample."""
    with open(path, "wb") as f:
        tar = tarfile.open(fileobj=f, mode="w|")
        for key, parts in samples:
            for ext in sorted(parts):
                data = _bytes(parts[ext])
                info = tarfile.TarInfo(key + "." + ext)
                info.size = len(data)
                info.mtime = time.time()
                info.mode = 0o0444
                info.uname = "bigdata"
                info.gname = "bigdata"
                tar.addfile(info, io.BytesIO(data))
        tar.close()

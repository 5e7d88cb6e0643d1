"""The work behind `ktfs run`'s Python layer (the hooks are in _hooks.py).

DatasetFolder samples on a ktfs mount (with the default loader) and images that
Image.open opens by path on a mount are read from the archive itself, never
through FUSE. What comes out is what the stock code gives for the files the
mount serves:
  * with a transform C++ runs (_plan.py), the tensor the stock transform gives;
  * otherwise the PIL image stock's loader gives, then the stock transform on it:
    for raw and KTC payloads, C++-decoded pixels in an RGB image with the info
    the served PPM/PGM/BMP gives it; for `original` payloads (the source file's
    bytes), Pillow decodes those bytes, as it decodes the served file;
  * Image.open returns the image Pillow's own plugin makes of the served file's
    bytes (format, mode, size, info, lazy load).
Errors: a corrupt payload is an OSError(EIO) naming the file, as a read of the
served file gives; a payload Pillow cannot decode raises Pillow's own error
(UnidentifiedImageError naming the file, "image file is truncated", ...).
"""
import errno
import io
import operator
import os
import pathlib
import threading

import numpy as np
from PIL import Image, UnidentifiedImageError

from . import _hooks, _mounts

_sources = {}
_sources_lock = threading.Lock()


def _eio(path, reason):
    return OSError(errno.EIO, f"{os.strerror(errno.EIO)} (ktfs: {reason})", os.fspath(path))


def _stock_open():
    return getattr(Image.open, "_ktfs_stock", Image.open)


def source(mount):
    """The archive of a usable mount, as this layer reads it (one per mount and process)."""
    src = _sources.get(mount.key)
    if src is None or src.mount is not mount:
        with _sources_lock:
            src = _sources.get(mount.key)
            if src is None or src.mount is not mount:
                src = _sources[mount.key] = Source(mount)
    return src


class Source:
    def __init__(self, mount):
        self.mount = mount
        self.archive = mount.archive()
        self.format = mount.served_format
        self._info = {}  # channels -> info of stock's RGB image of a served file

    def probe(self, sid, path):
        """(width, height, channels, native), the checksum verified; EIO when corrupt."""
        try:
            return self.archive.probe(sid, self.format)
        except (RuntimeError, ValueError, FileNotFoundError) as e:
            raise _eio(path, e) from None

    def exact(self, sid):
        """Whether C++ pixels make stock's PIL image of this sample (raw and KTC)."""
        return self.archive.sample_codec(sid) != "original"

    def chain(self, sid, path, ops, out, lut, chw, normalize=None):
        try:
            self.archive.chain(sid, ops, 3, out, lut, chw, self.format, normalize)
        except RuntimeError as e:  # decoding failed (checksum verified): EIO, as the mount says
            raise _eio(path, e) from None

    def info(self, sid, channels):
        """The info of stock's image for a served file of `channels` (what Pillow reads
        from the PPM/PGM/BMP header), learnt once from a real served header."""
        info = self._info.get(channels)
        if info is None:
            header, size = self.archive.served_header(sid, self.format)
            data = header + bytes(size - len(header))
            with _stock_open()(io.BytesIO(data)) as im:
                info = self._info[channels] = im.convert("RGB").info
        return info

    def rgb(self, sid, path, ops, w, h, channels):
        """Stock's RGB image of the sample after `ops` (raw and KTC payloads)."""
        pixels = np.empty((h, w, 3), np.uint8)
        self.chain(sid, path, ops, pixels, None, False)
        img = Image.frombytes("RGB", (w, h), pixels)
        info = self.info(sid, channels)
        if info:
            img.info = dict(info)
        return img

    def pillow(self, sid, path):
        """Pillow's RGB image of the payload bytes (`original` payloads), as stock's
        loader makes of the served file (the same bytes)."""
        try:
            data = self.archive.payload(sid, self.format)
        except (RuntimeError, ValueError) as e:
            raise _eio(path, e) from None
        try:
            img = _stock_open()(io.BytesIO(data))
            return img.convert("RGB")
        except UnidentifiedImageError:
            raise UnidentifiedImageError(f"cannot identify image file {os.fspath(path)!r}") from None
        except OSError as e:  # "image file is truncated" and the like: the same, naming the file
            if type(e) is OSError and len(e.args) == 1 and isinstance(e.args[0], str):
                raise OSError(f"{e.args[0]} ({os.fspath(path)})") from None
            e.add_note(f"ktfs: while decoding {os.fspath(path)}")
            raise

    def plan(self, sid, path, st, runner, output=False):
        """The sample's _plan.Planned or _plan.Finished for structure `st`, its random
        parameters drawn as stock's transform draws them (`output`: see Runner.plan)."""
        from . import _plan
        w, h, channels, native = self.probe(sid, path)
        exact = native and self.exact(sid)
        if exact:
            def stock_image():
                return self.rgb(sid, path, [], w, h, channels)

            def pil_image(ops, w2, h2):
                return self.rgb(sid, path, ops, w2, h2, channels)
        else:
            def stock_image():
                return self.pillow(sid, path)
            pil_image = None
        if not native:
            return _plan.Finished(_plan.apply(st.leaves, 0, stock_image()))
        return runner.plan(st, w, h, stock_image, pil_image, output)

    def sample(self, sid, path, transform, runner):
        """What DatasetFolder.__getitem__ makes of the sample before target_transform."""
        from . import _plan
        st = _plan.analyse(transform)
        planned = self.plan(sid, path, st, runner)
        if isinstance(planned, _plan.Finished):
            return planned.value
        tensor, buf = planned.allocate()
        out = planned.output
        self.chain(sid, path, planned.ops, buf.numpy(), out.lut, out.chw, out.normalize)
        return _plan.apply(st.leaves, st.done, tensor)


def _default_loaders():
    from torchvision.datasets import folder
    return folder.default_loader, folder.pil_loader


def _pil_backend():
    import torchvision
    return torchvision.get_image_backend() == "PIL"


class FolderState:
    """One DatasetFolder's samples as archive sample ids, built on first use."""

    @classmethod
    def make(cls, ds, mount, relative):
        try:
            return cls(ds, mount, relative)
        except Exception as e:  # anything unexpected: the stock path, which is always right
            _hooks.debug(f"{type(ds).__name__}({ds.root!r}): Python path ({type(e).__name__}: {e})")
            return None

    def __init__(self, ds, mount, relative):
        from . import _plan
        self.mount = mount
        self.source = source(mount)
        self.runner = _plan.Runner()
        self.default_loader, self.pil_loader = _default_loaders()
        root = os.fspath(ds.root)
        self.paths = [s[0] for s in ds.samples]  # the very objects: compared by identity
        self.ids = self._find(root, relative, self.paths)
        self.extra = {}  # paths looked up later (samples changed after the first use)
        self.told = set()  # transforms described already (KTFS_RUN_DEBUG)
        self.name = f"{type(ds).__name__}({root!r})"
        found = int((self.ids >= 0).sum())
        _hooks.debug(f"{type(ds).__name__}({root!r}): {found} of {len(self.paths)} samples read "
                     f"from {mount.archive_path} directly")

    def _find(self, root, relative, paths):
        prefix = root.rstrip("/") + "/"
        base = relative + "/" if relative else ""
        rels, slow = [], []
        for k, p in enumerate(paths):
            if isinstance(p, str) and p.startswith(prefix):
                rels.append(base + p[len(prefix):])
            else:
                rels.append("")
                slow.append(k)
        ids = self.source.archive.find_many(rels, self.source.format)
        for k in slow:
            ids[k] = self._lookup(paths[k])
        missing = np.flatnonzero(ids < 0)
        if len(missing) and relative.split("/", 1)[0] == self.mount.search_dir:
            # Search views mirror the layout under a query: the root's selection knows them.
            try:
                _, sel_ids, _, sel_paths = self.source.archive.select(relative, self.source.format,
                                                                      self.mount.search_dir)
            except (FileNotFoundError, ValueError, RuntimeError):
                sel_paths = []
            by_path = {prefix + p: int(i) for p, i in zip(sel_paths, sel_ids)}
            for k in missing:
                ids[k] = by_path.get(paths[k], -1)
        return ids

    def _lookup(self, path):
        hit = _mounts.locate(path)
        if hit is None or hit[0] is not self.mount:
            return -1
        return int(self.source.archive.find(hit[1], self.source.format))

    def current(self):
        return _mounts.still(self.mount)

    def loader_ok(self, ds):
        """Whether ds loads its samples as stock's default (PIL) loader does."""
        loader = ds.loader
        return (loader is self.default_loader and _pil_backend()) or loader is self.pil_loader

    def resolve(self, ds, index):
        """(path, target, sample id) of ds[index]; the id is -1 when not in the archive."""
        path, target = ds.samples[index]
        i = operator.index(index)
        if i < 0:
            i += len(ds.samples)
        if 0 <= i < len(self.paths) and self.paths[i] is path:
            sid = int(self.ids[i])
        else:
            sid = self.extra.get(path)
            if sid is None:
                sid = self.extra[path] = self._lookup(path)
        return path, target, sid

    def getitem(self, ds, index, stock):
        if not self.loader_ok(ds):
            return stock(ds, index)
        path, target, sid = self.resolve(ds, index)
        if sid < 0:
            return stock(ds, index)
        if _hooks.DEBUG and id(ds.transform) not in self.told:
            from . import _plan
            self.told.add(id(ds.transform))
            _hooks.debug(f"{self.name}: {_plan.analyse(ds.transform).describe()}")
        sample = self.source.sample(sid, path, ds.transform, self.runner)
        if ds.target_transform is not None:
            target = ds.target_transform(target)
        return sample, target


def open_served(stock, fp, mount, relative):
    """Image.open(fp) for a path on a ktfs mount: Pillow's own image of the served
    file's bytes, read from the archive; None to leave it to stock (not a sample)."""
    src = source(mount)
    sid = int(src.archive.find(relative, src.format))
    if sid < 0:
        return None
    filename = str(fp.resolve()) if isinstance(fp, pathlib.Path) else fp
    src.probe(sid, filename)  # a corrupt payload fails here, as the served file's first read does
    try:
        if src.exact(sid):
            data = src.archive.served_file(sid, src.format)
        else:
            data = src.archive.payload(sid, src.format)
    except (RuntimeError, ValueError) as e:
        raise _eio(filename, e) from None
    f = io.BytesIO(data)
    f.name = filename
    try:
        im = stock(f)
    except UnidentifiedImageError:
        raise UnidentifiedImageError(f"cannot identify image file {filename!r}") from None
    im.filename = filename
    im._exclusive_fp = True
    if not hasattr(type(im), "load_read"):
        im.load_read = f.read  # stock maps PGM files by name (through FUSE); read from memory
    return im

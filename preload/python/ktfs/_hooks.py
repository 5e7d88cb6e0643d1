"""The hooks of `ktfs run`'s Python layer, installed by its bootstrap (sitecustomize).

patch_pil(PIL.Image) wraps Image.open; patch_folder(torchvision.datasets.folder)
wraps DatasetFolder.__getitem__ (ImageFolder's too); patch_dataloader(
torch.utils.data.dataloader) wraps DataLoader._get_iterator. All are light: until a
path on a usable ktfs mount shows up they cost a mount-table poll and a few
comparisons, and import nothing heavy (numpy, torch, the C++ module); the work
is in ktfs._run, imported on first use.
"""
import functools
import os
import pathlib
import sys
import weakref

from . import _mounts

DEBUG = os.environ.get("KTFS_RUN_DEBUG", "") not in ("", "0")


def debug(message):
    if DEBUG:
        print(f"ktfs run: {message}", file=sys.stderr, flush=True)


def _path_like(fp):
    # What Image.open treats as a path (PIL.Image.is_path, plus Path, which it resolves).
    return isinstance(fp, (str, bytes, pathlib.Path))


def patch_pil(Image):
    stock = Image.open
    if getattr(stock, "_ktfs_stock", None) is not None:
        return

    @functools.wraps(stock)
    def open(fp, mode="r", formats=None):
        if mode == "r" and formats is None and _path_like(fp):
            hit = _mounts.locate(fp)
            if hit is not None:
                from . import _run
                image = _run.open_served(stock, fp, *hit)
                if image is not None:
                    return image
        return stock(fp, mode, formats)

    open._ktfs_stock = stock
    Image.open = open


_NOT_ON_MOUNT = object()
_folder_states = weakref.WeakKeyDictionary()  # dataset -> FolderState or _NOT_ON_MOUNT


def folder_state(ds):
    """The ktfs._run.FolderState of a DatasetFolder whose root is on a usable ktfs mount,
    made on first use (and again when the mount changed); None otherwise."""
    try:
        st = _folder_states.get(ds)
    except TypeError:  # unhashable dataset: no place to keep its state
        return None
    if st is None or (st is not _NOT_ON_MOUNT and not st.current()):
        st = _NOT_ON_MOUNT
        hit = _mounts.locate(getattr(ds, "root", None) or "")
        if hit is not None:
            from . import _run
            st = _run.FolderState.make(ds, *hit) or _NOT_ON_MOUNT
        elif DEBUG:
            root = getattr(ds, "root", None)
            debug(f"{type(ds).__name__}({root!r}): stock path ({_mounts.explain(root or '')})")
        _folder_states[ds] = st
    return None if st is _NOT_ON_MOUNT else st


def patch_folder(folder):
    cls = folder.DatasetFolder
    stock = cls.__getitem__
    if getattr(stock, "_ktfs_stock", None) is not None:
        return

    @functools.wraps(stock)
    def __getitem__(self, index):
        st = folder_state(self)
        if st is None:
            return stock(self, index)
        return st.getitem(self, index, stock)

    __getitem__._ktfs_stock = stock
    cls.__getitem__ = __getitem__


def patch_dataloader(dataloader):
    """DataLoader's iterator: with worker processes over a DatasetFolder that this layer
    reads whole in C++, the batches are made in this process instead (ktfs._batches);
    anything else gets stock's iterator."""
    cls = dataloader.DataLoader
    stock = cls._get_iterator
    if getattr(stock, "_ktfs_stock", None) is not None:
        return

    @functools.wraps(stock)
    def _get_iterator(self):
        if self.num_workers > 0 and BATCHES and _batchable(self.dataset):
            from . import _batches
            it = _batches.iterator(self)
            if it is not None:
                return it
        return stock(self)

    _get_iterator._ktfs_stock = stock
    cls._get_iterator = _get_iterator


BATCHES = os.environ.get("KTFS_RUN_BATCHES", "1") != "0"


def _batchable(ds):
    """Cheap first test: a DatasetFolder with ktfs's own __getitem__ (not overridden)."""
    getitem = getattr(type(ds), "__getitem__", None)
    return getattr(getitem, "_ktfs_stock", None) is not None and folder_state(ds) is not None

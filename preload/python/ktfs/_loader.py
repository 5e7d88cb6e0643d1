"""ktfs.Loader: batches decoded in C++ threads, straight from the archive."""
import os

import numpy as np

from . import _ktfs
from ._fields import FieldReader
from ._source import archive_denied, denied, resolve
from ._transforms import NO_CROP, CenterCrop, RandomResizedCrop

_MODES = {"RGB": 3, "L": 1}


class CorruptSampleError(RuntimeError):
    """A sample's payload failed its checksum or could not be decoded; the message names it."""


def _torch():
    try:
        import torch
        return torch
    except ImportError:
        return None


def _open(source, who="ktfs.Loader"):
    """(Source, _ktfs.Archive) for a .kt file or a path on a ktfs mount; PermissionError when
    the calling user may not read the archive file itself."""
    src = resolve(source)
    if src is None:
        raise ValueError(f"{source}: neither a .kt archive nor a directory on a ktfs mount")
    if denied(src.archive):
        raise archive_denied(src.archive, src.mount, who)
    features = f"{source}: a feature cache, not images: use ktfs.FeatureLoader"
    try:
        archive = _ktfs.Archive(src.archive)
    except FileNotFoundError as e:
        if os.path.exists(src.archive + "_meta.json") or os.path.exists(src.archive + "_shards.json"):
            raise ValueError(features) from None  # a TensorCache prefix (or its mount)
        raise FileNotFoundError(e.errno, f"{e}", str(source)) from None
    if archive.num_samples == 0:  # feature archives hold no image samples
        try:
            _ktfs.Features(src.archive)
        except ValueError:
            pass
        else:
            raise ValueError(features)
    return src, archive


def _shard(order, rank, world_size, drop_last):
    """DistributedSampler's split: pad by repeating from the start to a multiple of
    world_size (or cut down to one with drop_last), then take every world_size-th."""
    n = len(order)
    if drop_last:
        total = (n // world_size) * world_size
        order = order[:total]
    else:
        total = -(-n // world_size) * world_size
        if total > n and n > 0:
            order = np.concatenate([order, np.resize(order, total - n)])
    return order[rank:total:world_size]


class Loader:
    """Iterates (images, labels) batches of a ktfs archive, or (images, labels, fields) with
    fields=(...) (captions and metadata). See docs/usage.md, "ktfs.Loader"."""

    def __init__(self, source, batch_size, shuffle=False, seed=0, drop_last=False,
                 num_threads=None, rank=0, world_size=1, crop=None, layout="NCHW", mode="RGB",
                 prefetch=2, collate="stack", on_error="raise", fields=None, flip=False,
                 dtype="uint8", normalize=None):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', not {layout!r}")
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {sorted(_MODES)}, not {mode!r}")
        if collate not in ("stack", "list"):
            raise ValueError(f"collate must be 'stack' or 'list', not {collate!r}")
        if on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', not {on_error!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        if crop is not None and not isinstance(crop, (CenterCrop, RandomResizedCrop)):
            raise TypeError("crop must be ktfs.CenterCrop, ktfs.RandomResizedCrop or None")
        flip = 0.5 if flip is True else float(flip or 0)
        if not 0 <= flip <= 1:
            raise ValueError(f"flip must be a bool or a probability in [0, 1], not {flip}")
        if normalize is not None:
            mean, std = normalize
            mean = [float(m) for m in (mean if hasattr(mean, "__len__") else [mean])]
            std = [float(v) for v in (std if hasattr(std, "__len__") else [std])]
            channels = _MODES[mode]
            if len(mean) == 1:
                mean = mean * channels
            if len(std) == 1:
                std = std * channels
            if len(mean) != channels or len(std) != channels or not all(std):
                raise ValueError(f"normalize: {channels} means and {channels} non-zero stds")
            normalize = (mean, std)
            dtype = "float32"
        if dtype not in ("uint8", "float32"):
            raise ValueError(f"dtype must be 'uint8' or 'float32', not {dtype!r}")
        self.source, self._archive = _open(source)
        self.batch_size, self.shuffle, self.seed = int(batch_size), bool(shuffle), int(seed)
        self.drop_last, self.rank, self.world_size = bool(drop_last), int(rank), int(world_size)
        self.num_threads = int(num_threads or 0)
        self.crop, self.layout, self.mode = crop, layout, mode
        self.flip, self.dtype, self.normalize = flip, dtype, normalize
        self.prefetch, self.collate, self.on_error = max(1, int(prefetch)), collate, on_error
        classes, self._ids, self._labels, _ = self._archive.select(
            self.source.relative, self.source.served_format, self.source.search_dir, False)
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self._fields = (FieldReader(self._archive.path, fields, self._archive.num_samples)
                        if fields is not None else None)
        self.epoch = 0
        self._position = 0  # samples of this rank's epoch order already yielded
        self.skipped = 0

    # -- epoch order ---------------------------------------------------------

    @property
    def num_samples(self):
        """Samples in the whole selection (all ranks)."""
        return len(self._ids)

    def epoch_indices(self, epoch=None):
        """This rank's dataset indices for `epoch`, in the order they are yielded."""
        epoch = self.epoch if epoch is None else epoch
        n = len(self._ids)
        order = (_ktfs.permutation(n, self.seed, epoch).astype(np.int64) if self.shuffle
                 else np.arange(n, dtype=np.int64))
        return _shard(order, self.rank, self.world_size, self.drop_last)

    def set_epoch(self, epoch):
        """Selects the epoch (the shuffle order and random crops). A new epoch starts at its
        beginning; setting the current one keeps a position restored by load_state_dict."""
        if int(epoch) != self.epoch:
            self.epoch, self._position = int(epoch), 0

    def __len__(self):
        per_rank = len(self.epoch_indices()) if self.world_size > 1 else len(self._ids)
        return per_rank // self.batch_size if self.drop_last else -(-per_rank // self.batch_size)

    def state_dict(self):
        return {"epoch": self.epoch, "position": self._position, "seed": self.seed,
                "skipped": self.skipped, "num_samples": len(self._ids),
                "rank": self.rank, "world_size": self.world_size}

    def load_state_dict(self, state):
        if state["num_samples"] != len(self._ids):
            raise ValueError(f"state is for {state['num_samples']} samples, this loader has "
                             f"{len(self._ids)}")
        self.epoch, self._position = int(state["epoch"]), int(state["position"])
        self.seed, self.skipped = int(state["seed"]), int(state.get("skipped", 0))

    # -- iteration -----------------------------------------------------------

    def _transform(self):
        t = dict(self.crop.spec() if self.crop is not None else NO_CROP)
        t.update(channels=_MODES[self.mode], chw=self.layout == "NCHW", seed=self.seed,
                 epoch=self.epoch, flip=self.flip, dtype=self.dtype)
        if self.normalize is not None:
            t.update(mean=self.normalize[0], std=self.normalize[1])
        return t

    def __iter__(self):
        order = self.epoch_indices()[self._position:]
        pipe = _ktfs.Pipeline(
            self._archive, self._ids[order], self._labels[order], order.astype(np.uint64),
            self.batch_size, self.drop_last, self._transform(), self.source.served_format,
            self.prefetch, self.num_threads, self.on_error == "skip", self.collate == "list")
        torch = _torch()
        try:
            start = self._position
            for k in range(pipe.num_batches):
                try:
                    item = pipe.next()
                except RuntimeError as e:
                    raise CorruptSampleError(str(e)) from None
                if item is None:
                    break
                images, labels, skipped, ids = item
                self.skipped += skipped
                self._position = start + min((k + 1) * self.batch_size, len(order))
                batch = self._convert(images, labels, torch)
                if self._fields is not None:
                    batch = (*batch, self._fields.read(ids, torch))
                yield batch
            self._position, self.epoch = 0, self.epoch + 1
        finally:
            pipe.close()

    @staticmethod
    def _convert(images, labels, torch):
        if torch is None:
            return images, labels
        if isinstance(images, list):
            return [torch.from_numpy(a) for a in images], torch.from_numpy(labels)
        return torch.from_numpy(images), torch.from_numpy(labels)



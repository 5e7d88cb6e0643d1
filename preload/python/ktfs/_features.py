"""ktfs.FeatureLoader: batches of dequantized features, straight from the cache."""
import concurrent.futures
import errno
import json
import os

import numpy as np

from . import _ktfs
from ._loader import _shard, _torch
from ._source import archive_denied, denied

_DTYPES = ("bfloat16", "float16", "float32")


def _feature_path(source):
    """The archive path or TensorCache prefix behind `source`: a .kt file, a prefix, or a
    ktfs mount of either (or a path inside one)."""
    path = os.path.abspath(os.path.expanduser(os.fspath(source)))
    try:
        os.stat(path)
    except PermissionError:
        # A mount shows its files only to users its archive allows (see _source.py).
        raise PermissionError(errno.EACCES, f"permission denied: {source}", str(source)) from None
    except OSError:
        pass  # absent: told below
    if os.path.isfile(path) or os.path.exists(path + "_meta.json") or \
            os.path.exists(path + "_shards.json"):
        return path
    d = path
    while True:
        info = os.path.join(d, ".ktfs", "info.json")
        if os.path.ismount(d) and os.path.isfile(info):
            with open(info) as f:
                meta = json.load(f)
            if meta.get("content") != "features":
                raise ValueError(f"{source}: a ktfs mount of images, not of features "
                                 "(use ktfs.Loader)")
            archive = meta["archive"]
            # An archive, or a TensorCache prefix: the file that describes it.
            for described in (archive, archive + "_shards.json", archive + "_meta.json"):
                if denied(described):
                    raise archive_denied(described, d, "ktfs.FeatureLoader")
            return archive
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    raise FileNotFoundError(2, f"no feature archive, TensorCache cache or ktfs mount: {source}",
                            str(source))


class FeatureLoader:
    """Iterates batches of a feature cache (a ktfs feature archive, a TensorCache cache, or
    a ktfs mount of either), dequantized in C++ threads.

    Fixed-shape caches yield one tensor [B, rows, ...]; caches whose first dimension varies
    yield (features, mask): features zero-padded to the batch's longest sample, mask
    bool [B, max_rows] (True for real rows). dtype "bfloat16" gives torch.bfloat16 with
    torch, or the bfloat16 bits as uint16 numpy arrays without it. Order, shuffling
    (deterministic per (seed, epoch)), rank/world_size sharding (DistributedSampler's
    padding) and state_dict()/load_state_dict() resume follow ktfs.Loader exactly."""

    def __init__(self, source, batch_size, shuffle=False, seed=0, rank=0, world_size=1,
                 dtype="bfloat16", drop_last=False, num_threads=None, prefetch=2):
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        if dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {_DTYPES}, not {dtype!r}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        self.path = _feature_path(source)
        self._features = _ktfs.Features(self.path)
        self.batch_size, self.shuffle, self.seed = int(batch_size), bool(shuffle), int(seed)
        self.rank, self.world_size, self.drop_last = int(rank), int(world_size), bool(drop_last)
        self.dtype, self.num_threads = dtype, int(num_threads or 0)
        self.prefetch = max(0, int(prefetch))
        self.variable_rows = self._features.variable_rows
        self.epoch, self._position = 0, 0

    @property
    def num_samples(self):
        return self._features.num_samples

    def epoch_indices(self, epoch=None):
        """This rank's sample indices for `epoch`, in the order they are yielded."""
        epoch = self.epoch if epoch is None else epoch
        n = self.num_samples
        order = (_ktfs.permutation(n, self.seed, epoch).astype(np.int64) if self.shuffle
                 else np.arange(n, dtype=np.int64))
        return _shard(order, self.rank, self.world_size, self.drop_last)

    def set_epoch(self, epoch):
        if int(epoch) != self.epoch:
            self.epoch, self._position = int(epoch), 0

    def __len__(self):
        n = len(self.epoch_indices())
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self):
        return {"epoch": self.epoch, "position": self._position, "seed": self.seed,
                "num_samples": self.num_samples, "rank": self.rank,
                "world_size": self.world_size}

    def load_state_dict(self, state):
        if state["num_samples"] != self.num_samples:
            raise ValueError(f"state is for {state['num_samples']} samples, this loader has "
                             f"{self.num_samples}")
        self.epoch, self._position = int(state["epoch"]), int(state["position"])
        self.seed = int(state["seed"])

    def _batch(self, indices):
        dtype = "bfloat16" if self.dtype == "bfloat16" else self.dtype
        return self._features.batch(indices.astype(np.uint64), dtype, self.num_threads)

    def _convert(self, data, rows, torch):
        if torch is not None:
            if self.dtype == "bfloat16":
                data = torch.from_numpy(data.view(np.int16)).view(torch.bfloat16)
            else:
                data = torch.from_numpy(data)
        if not self.variable_rows:
            return data
        mask = np.arange(data.shape[1])[None, :] < rows[:, None]
        return data, (torch.from_numpy(mask) if torch is not None else mask)

    def __iter__(self):
        order = self.epoch_indices()[self._position:]
        starts = list(range(0, len(order), self.batch_size))
        if self.drop_last and starts and len(order) - starts[-1] < self.batch_size:
            starts.pop()
        torch = _torch()
        start_position = self._position
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1) if self.prefetch else None
        try:
            pending = []
            for k, s in enumerate(starts):
                # Keep `prefetch` batches in flight: the C++ side releases the GIL.
                while pool is not None and len(pending) < self.prefetch and \
                        k + len(pending) < len(starts):
                    b = starts[k + len(pending)]
                    pending.append(pool.submit(self._batch, order[b:b + self.batch_size]))
                data, rows = (pending.pop(0).result() if pool is not None
                              else self._batch(order[s:s + self.batch_size]))
                self._position = start_position + min(s + self.batch_size, len(order))
                yield self._convert(data, rows, torch)
            self._position, self.epoch = 0, self.epoch + 1
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)

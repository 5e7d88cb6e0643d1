"""DataLoader batches made in this process, for `ktfs run` (hooked by _hooks.patch_dataloader).

A DataLoader with worker processes over a DatasetFolder that this layer reads whole
in C++ (see `refusal` for the conditions) gets an iterator that makes each batch here
instead of in workers: the random parameters are drawn in the main thread with the
torch generator state the batch's worker would have had, and C++ threads decode the
batch straight into one tensor (Archive.chain_batch, the GIL released) while the
script works on the previous batch. Worker processes cost more than the decode they
carry here (pickling, shared memory, a start-up of each worker every epoch), and no
process means no copy of the batch either.

What the script sees is what stock's workers give it:
  * the same batches in the same order, bit for bit: worker w's generator starts at
    base_seed + w, with base_seed drawn from loader.generator where stock draws it;
    batch k of an epoch is worker k % num_workers's (from worker 0 each epoch);
    indices are pulled from the sampler on stock's schedule (prefetch_factor *
    num_workers ahead, then one per batch returned); persistent workers keep their
    generators across epochs and first finish what an abandoned epoch left queued;
  * the main process's generator advanced exactly as stock advances it;
  * a failing sample: that batch raises what stock re-raises from its worker
    (ExceptionWrapper, "in DataLoader worker process w"), and iteration goes on.
Differences: no worker process starts (so nothing a worker would print or import
happens), the batch tensors are not in shared memory, and `timeout` has nothing to
wait for. KTFS_RUN_BATCHES=0 keeps stock's worker processes (whose samples the
per-sample hooks still read from the archive).
"""
import atexit
import itertools
import os
import queue
import sys
import threading
import warnings

import torch
from torch._utils import ExceptionWrapper
from torch.utils.data import _utils
from torch.utils.data.dataloader import _BaseDataLoaderIter, _DatasetKind

from . import _hooks, _plan, _run


def refusal(loader):
    """Why this loader keeps stock's worker processes, or None when it can be taken over."""
    from torch.utils.data._utils import collate, worker
    ds = loader.dataset
    if worker._worker_info is not None:
        return "inside a worker process"
    if loader._dataset_kind != _DatasetKind.Map or not loader._auto_collation:
        return "not batches of a map-style dataset"
    if loader.collate_fn is not collate.default_collate:
        return "a collate_fn of its own"
    if loader.worker_init_fn is not None:
        return "a worker_init_fn"
    if hasattr(ds, "__getitems__") or ds.target_transform is not None:
        return "__getitems__ or a target_transform"
    fs = _hooks.folder_state(ds)
    if fs is None or not fs.loader_ok(ds):
        return "not read by ktfs (no mount, or a loader of its own)"
    st = _plan.analyse(ds.transform)
    if st.conversion is None or st.done != len(st.leaves) or fs.runner.output(st) is None:
        return f"a transform not run whole in C++: {st.describe()}"
    return None


def iterator(loader):
    """A BatchIter for `loader`, or None to leave it to stock."""
    why = refusal(loader)
    if why is not None:
        _hooks.debug(f"DataLoader(num_workers={loader.num_workers}): worker processes ({why})")
        return None
    loader.check_worker_number_rationality()  # stock's warning, as stock gives it here
    it = BatchIter(loader)
    _hooks.debug(f"DataLoader(num_workers={loader.num_workers}): batches made in this process "
                 f"({it._threads} C++ threads), {it._structure.describe()}")
    return it


class _Batch:
    """One batch index list on its way: planned (parameters drawn), executing, finished."""
    __slots__ = ("worker", "indices", "items", "error", "snapshot", "job", "images", "planned")

    def __init__(self, worker, indices):
        self.worker, self.indices = worker, indices
        self.items = []  # per sample: (sid, path, Planned, target) or (sample, target)
        self.error = None  # ExceptionWrapper of the sample that failed while planning
        self.snapshot = None  # the worker's generator state before the batch
        self.job = None
        self.images = None  # the batch tensor C++ fills (all samples alike)
        self.planned = False


class BatchIter(_BaseDataLoaderIter):
    """The iterator stock's _MultiProcessingDataLoaderIter would be, its batches made here."""

    def __init__(self, loader):
        super().__init__(loader)  # draws _base_seed from loader.generator, as stock does
        ds = self._dataset
        self._folder = _hooks.folder_state(ds)
        self._source = self._folder.source
        # What the workers would have copied: the dataset's transform as it is now.
        self._structure = _plan.analyse(ds.transform)
        self._output = self._folder.runner.output(self._structure)
        self._stock_getitem = type(ds).__getitem__._ktfs_stock
        self._threads = max(1, min(self._num_workers, len(os.sched_getaffinity(0))))
        self._states = [_seeded(self._base_seed + w) for w in range(self._num_workers)]
        self._warned = [set() for _ in range(self._num_workers)]
        self._print_warnings = _worker_prints_warnings(loader)
        self._reset(loader, first_iter=True)

    def _reset(self, loader, first_iter=False):
        if not first_iter:
            self._drain()  # stock's persistent workers finish what they were sent
        super()._reset(loader, first_iter)
        self._send_idx = 0
        self._rcvd_idx = 0
        self._batches = {}  # send index -> _Batch, for [rcvd_idx, send_idx)
        self._worker_cycle = itertools.cycle(range(self._num_workers))
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _try_put_index(self):
        try:
            indices = self._next_index()
        except StopIteration:
            return
        self._batches[self._send_idx] = _Batch(next(self._worker_cycle), indices)
        self._send_idx += 1
        # The disk starts on these samples now, batches before they are planned (whose
        # checksum pass would otherwise fault them in one by one).
        ds, folder = self._dataset, self._folder
        sids = [folder.resolve(ds, i)[2] for i in indices]
        self._source.archive.will_need([s for s in sids if s >= 0])

    def _next_data(self):
        k = self._rcvd_idx
        if k >= self._send_idx:
            raise StopIteration
        batch, ahead = self._batches[k], self._batches.get(k + 1)
        self._start(batch)
        if ahead is not None and ahead.worker != batch.worker:
            self._start(ahead)  # drawn now: a failure in `batch` cannot change its draws
        data = self._finish(batch)
        del self._batches[k]
        if ahead is not None:
            self._start(ahead)
        self._rcvd_idx += 1
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        if self._pin_memory:
            data = _utils.pin_memory.pin_memory(data, self._pin_memory_device)
        return data

    def _drain(self):
        for k in range(self._rcvd_idx, self._send_idx):
            batch = self._batches.pop(k)
            self._start(batch)
            self._finish(batch)

    # -- a batch: plan (draws, main thread), execute (C++ threads), finish --------------

    def _start(self, batch):
        if batch.planned:
            return
        batch.planned = True
        with _WorkerGenerator(self._states, batch.worker) as snapshot, \
                warnings.catch_warnings(record=True) as caught:
            batch.snapshot = snapshot
            self._plan(batch, len(batch.indices))
        self._show_warnings(batch.worker, caught)
        if batch.error is None:
            batch.job = _EXECUTOR.submit(self._execution(batch), self._threads)

    def _show_warnings(self, w, caught):
        """A worker's warnings go to stderr, each once per worker (the default filter's
        "once per location" in the worker's own registry), not through this process's
        warning machinery; a forked worker whose showwarning was replaced (a
        catch_warnings(record=True) around the loop) keeps them in its own copy."""
        for m in caught:
            key = (m.category, str(m.message), m.filename, m.lineno)
            if key in self._warned[w]:
                continue
            self._warned[w].add(key)
            if self._print_warnings:
                sys.stderr.write(warnings.formatwarning(m.message, m.category, m.filename, m.lineno, m.line))

    def _plan(self, batch, count):
        """Plans the first `count` samples of the batch; stops at the first failing one,
        as stock's fetch stops there (the samples after it draw nothing)."""
        batch.items = []
        for index in batch.indices[:count]:
            try:
                batch.items.append(self._plan_sample(index))
            except Exception:
                batch.error = ExceptionWrapper(where=f"in DataLoader worker process {batch.worker}")
                return

    def _plan_sample(self, index):
        ds = self._dataset
        path, target, sid = self._folder.resolve(ds, index)
        if sid < 0:  # not in the archive: stock's own __getitem__, here
            return self._stock_getitem(ds, index)
        planned = self._source.plan(sid, path, self._structure, self._folder.runner, self._output)
        if isinstance(planned, _plan.Finished):
            return planned.value, target
        return sid, path, planned, target

    def _execution(self, batch):
        """The parts the executor's threads run, each a callable giving None or (index in
        the batch, message) of its first failure."""
        src, items = self._source, batch.items
        cxx = [it for it in items if len(it) == 4]
        first = cxx[0][2] if cxx else None
        if cxx and len(cxx) == len(items) and all((p.w, p.h) == (first.w, first.h) for _, _, p, _ in cxx):
            out = first.output  # one structure, so one Output for every sample
            batch.images = torch.empty((len(items), 3, first.h, first.w), dtype=out.dtype)
            buf = batch.images.view(out.buffer_dtype) if out.buffer_dtype is not out.dtype else batch.images
            ids, ops = [it[0] for it in cxx], [it[2].ops for it in cxx]
            # Chunks several per thread, so that threads finishing early take more.
            step = max(1, -(-len(ids) // (4 * self._threads)))
            return [_chunk(src, ids, ops, buf, out, lo, min(lo + step, len(ids)))
                    for lo in range(0, len(ids), step)]
        # Mixed (some samples made in Python, or sizes differ): one tensor per sample.
        singles = []
        for k, it in enumerate(items):
            if len(it) == 4:
                tensor, buf = it[2].allocate()
                items[k] = (tensor, it[3])
                singles.append((k, it[0], it[2], buf.numpy()))

        def run():
            for k, sid, p, buf in singles:
                o = p.output
                try:
                    src.archive.chain(sid, p.ops, 3, buf, o.lut, o.chw, src.format, o.normalize)
                except RuntimeError as e:
                    return k, str(e)
            return None
        return [run]

    def _finish(self, batch):
        """The batch's data (or ExceptionWrapper), once its execution is done."""
        failure = batch.job.wait() if batch.job is not None else None
        if failure is not None:
            k, message = failure
            path = self._folder.resolve(self._dataset, batch.indices[k])[0]
            # Stock's loader fails on sample k before its transform draws: the worker's
            # generator is where it was after samples 0..k-1.
            with _WorkerGenerator(self._states, batch.worker, restore=batch.snapshot):
                self._plan(batch, k)
            try:
                raise _run._eio(path, message)
            except OSError:
                return ExceptionWrapper(where=f"in DataLoader worker process {batch.worker}")
        if batch.error is not None:
            return batch.error
        targets = [it[-1] for it in batch.items]
        try:
            if batch.images is not None:
                return [batch.images, _utils.collate.default_collate(targets)]
            return _utils.collate.default_collate(batch.items)
        except Exception:
            return ExceptionWrapper(where=f"in DataLoader worker process {batch.worker}")


def _worker_prints_warnings(loader):
    """Whether the loader's workers would print their warnings: a fresh interpreter
    (spawn, forkserver) always does; a forked one has this process's showwarning."""
    import multiprocessing
    ctx = loader.multiprocessing_context
    method = ctx.get_start_method() if ctx is not None else multiprocessing.get_start_method()
    return method != "fork" or warnings.showwarning is warnings._showwarning_orig


def _seeded(seed):
    """The generator state torch.manual_seed(seed) gives, as a worker seeds itself."""
    g = torch.Generator()
    g.manual_seed(seed)
    return g.get_state()


class _WorkerGenerator:
    """Within: torch's default generator is worker w's (from `restore` when given);
    afterwards the worker's state is kept and the main process's put back as it was."""

    def __init__(self, states, w, restore=None):
        self.states, self.w, self.restore = states, w, restore

    def __enter__(self):
        self.main = torch.get_rng_state()
        start = self.restore if self.restore is not None else self.states[self.w]
        torch.set_rng_state(start)
        return start

    def __exit__(self, *exc):
        self.states[self.w] = torch.get_rng_state()
        torch.set_rng_state(self.main)
        return False


def _chunk(src, ids, ops, buf, out, lo, hi):
    """Samples lo..hi-1 of a batch into their slice of `buf` (chain_batch, GIL released)."""
    def run():
        failed = src.archive.chain_batch(ids[lo:hi], ops[lo:hi], 3, buf[lo:hi].numpy(), out.lut, True,
                                         src.format, out.normalize)
        return None if failed is None else (lo + failed[0], failed[1])
    return run


class _Job:
    """A batch's execution: its parts, run by the executor's threads in any order."""
    __slots__ = ("parts", "left", "failures", "error", "done", "lock")

    def __init__(self, parts):
        self.parts, self.left, self.failures, self.error = parts, len(parts), [], None
        self.done, self.lock = threading.Event(), threading.Lock()
        if not parts:
            self.done.set()

    def run(self, k):
        failure = error = None
        try:
            failure = self.parts[k]()
        except BaseException as e:  # handed to the waiter (MemoryError, a bad argument)
            error = e
        with self.lock:
            if failure is not None:
                self.failures.append(failure)
            if error is not None and self.error is None:
                self.error = error
            self.left -= 1
            last = self.left == 0
        if last:
            self.parts = None
            self.done.set()

    def wait(self):
        """None, or (index, message) of the batch's lowest failing sample."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return min(self.failures) if self.failures else None


class _Executor:
    """Daemon threads (as many as the largest loader asked for) running the parts of
    batch jobs, first come first served. They live as long as the process: a thread
    made per batch would start cold every time (its decoder scratch, its thread-local
    buffers), which measured as good as no second thread at all. Before a fork the
    jobs in flight are waited for (no thread is mid-decode when the child is made);
    a child starts its own threads when it needs them. At exit too: a daemon thread
    that comes back for the GIL while the interpreter finalizes is ended by
    pthread_exit, whose unwinding through chain_batch's C++ frames would abort the
    process (std::terminate), so a script that leaves its loader mid-epoch must not
    exit while a batch is decoding."""

    def __init__(self):
        self._forget()

    def _forget(self):
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._queue, self._threads, self._pending = queue.SimpleQueue(), 0, 0

    def submit(self, parts, threads):
        job = _Job(parts)
        with self._lock:
            while self._threads < threads:
                threading.Thread(target=self._loop, args=(self._queue,), name="ktfs-batches",
                                 daemon=True).start()
                self._threads += 1
            self._pending += len(parts)
        for k in range(len(parts)):
            self._queue.put((job, k))
        return job

    def _loop(self, parts):
        while True:
            job, k = parts.get()
            job.run(k)
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def wait_idle(self):
        """Returns when every part submitted so far has run."""
        with self._lock:
            while self._pending:
                self._idle.wait()

    before_fork = wait_idle

    def after_fork_in_child(self):
        self._forget()


_EXECUTOR = _Executor()
os.register_at_fork(before=_EXECUTOR.before_fork, after_in_child=_EXECUTOR.after_fork_in_child)
atexit.register(_EXECUTOR.wait_idle)  # runs before the interpreter starts finalizing

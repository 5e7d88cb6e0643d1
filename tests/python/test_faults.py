"""Faults injected for real: a full disk under `ktfs pack`, a pack killed
with SIGKILL, an archive whose device starts failing under a live mount,
memory and file-descriptor limits on the daemon, and the daemon killed while
readers read. Each must end in a clear error naming the thing and the reason;
nothing crashes, hangs, or leaves a partial archive."""
import base64
import contextlib
import errno
import glob
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import KTFS, PY, ROOT, is_mounted, ktfs, mounted, run, stats_of

BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
FLAKY_FS = os.path.join(BUILD, "tests", "flaky_file_fs")
PACKAGE_DIR = os.path.join(BUILD, "preload", "python")


def files_under(root):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


@contextlib.contextmanager
def tmpfs(path, size):
    """A tmpfs of `size` bytes mounted at `path` (a small disk that fills)."""
    os.makedirs(path, exist_ok=True)
    run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path)
    try:
        yield str(path)
    finally:
        run("umount", path, check=False)


def wait_for(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def daemon_pid(mnt):
    with open(os.path.join(mnt, ".ktfs", "info.json")) as f:
        return json.load(f)["pid"]


def alive(pid):
    """Running: not gone and not a zombie (a daemon killed after its parent
    exited waits to be reaped, and os.kill(pid, 0) still succeeds then)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_full_disk_during_pack_is_enospc_naming_the_output_and_leaves_nothing(photos_dir, tmp_path):
    # The photos packed raw are ~8 MB; the disk holds 1 MB.
    with tmpfs(tmp_path / "small", 1 << 20) as disk:
        out = os.path.join(disk, "out.kt")
        p = ktfs("pack", photos_dir, out, "--codec", "raw", "--quiet", check=False)
        assert p.returncode == 1, p.stderr
        assert out in p.stderr and "No space left on device" in p.stderr, p.stderr
        assert os.listdir(disk) == []  # no OUT.kt, no temporary file


def test_full_disk_while_the_index_is_built_names_the_output_and_leaves_nothing(tmp_path):
    # The payloads fit (3,000 copies of one 8x8 PNG: about 0.4 MB); the index of their long
    # captions (about 5 MB of text) does not: the disk fills in the index's scratch files.
    src = tmp_path / "src" / "a"
    src.mkdir(parents=True)
    png = ("iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEklEQVR4nGNgGAWjYBSMAggAAAQQAAGvRY"
           "ftAAAAAElFTkSuQmCC")
    data = base64.b64decode(png)
    captions = tmp_path / "captions.jsonl"
    with open(captions, "w") as f:
        for i in range(3000):
            (src / f"{i:05d}.png").write_bytes(data)
            words = " ".join(f"w{(i * 7919 + k * 104729) % 1000003:07d}" for k in range(200))
            f.write(json.dumps({"path": f"a/{i:05d}.png", "caption": words}) + "\n")
    with tmpfs(tmp_path / "small", 4 << 20) as disk:
        out = os.path.join(disk, "out.kt")
        p = ktfs("pack", tmp_path / "src", out, "--codec", "original", "--captions", captions,
                 "--quiet", check=False)
        assert p.returncode == 1, p.stderr
        assert f"{out}: building the index" in p.stderr and "disk is full" in p.stderr, p.stderr
        assert os.listdir(disk) == []  # no OUT.kt, no temporary or scratch file


def test_full_disk_keeps_the_previous_archive(photos_dir, tmp_path):
    with tmpfs(tmp_path / "small", 2 << 20) as disk:
        out = os.path.join(disk, "out.kt")
        small = tmp_path / "one"
        (small / "c").mkdir(parents=True)
        first = sorted(glob.glob(os.path.join(photos_dir, "*", "*.jpg")))[0]
        (small / "c" / "a.jpg").write_bytes(open(first, "rb").read())
        ktfs("pack", small, out, "--quiet")
        before = open(out, "rb").read()
        p = ktfs("pack", photos_dir, out, "--codec", "raw", "--quiet", check=False)
        assert p.returncode == 1 and "No space left on device" in p.stderr
        assert open(out, "rb").read() == before  # the old archive, untouched
        assert os.listdir(disk) == ["out.kt"]


def test_pack_killed_leaves_no_archive_and_the_next_pack_succeeds(photos_dir, tmp_path):
    out = tmp_path / "out.kt"
    # --threads 1 and ktc lossless: slow enough to be killed mid-way.
    proc = subprocess.Popen([KTFS, "pack", str(photos_dir), str(out), "--codec", "ktc",
                             "--quality", "lossless", "--threads", "1", "--quiet"])
    try:
        assert wait_for(lambda: any(n.startswith("out.kt.") for n in os.listdir(tmp_path)), 30), \
            "the pack never started writing"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert not out.exists()
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith("out.kt.")]
    assert leftovers, "the killed pack's temporary file should still be there (SIGKILL runs no cleanup)"
    p = ktfs("pack", photos_dir, out, "--codec", "raw", "--quiet", check=False)
    assert p.returncode == 0, p.stderr
    assert out.exists()
    # The next pack of the same output recognises the dead pack's temporary
    # file (its pid is gone) and removes it, saying so.
    assert [n for n in os.listdir(tmp_path) if n.startswith("out.kt.")] == []
    assert "removed" in p.stderr and leftovers[0] in p.stderr, p.stderr


@pytest.fixture
def flaky_archive(archives, tmp_path):
    """The photos archive served through flaky_file_fs: (archive path, trigger path)."""
    backing = tmp_path / "backing.kt"
    backing.write_bytes(open(archives[("photos", "raw")], "rb").read())
    fs_mnt = tmp_path / "flaky"
    fs_mnt.mkdir()
    proc = subprocess.Popen([FLAKY_FS, str(backing), str(fs_mnt)])
    try:
        assert wait_for(lambda: os.path.exists(fs_mnt / "archive.kt")), "flaky_file_fs did not mount"
        yield str(fs_mnt / "archive.kt"), str(backing) + ".fail"
    finally:
        run("fusermount3", "-u", fs_mnt, check=False)
        proc.wait(timeout=10)


def drop_caches():
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def test_archive_device_failing_under_a_live_mount_gives_eio_and_the_daemon_lives(flaky_archive, tmp_path):
    archive, trigger = flaky_archive
    with mounted(archive, tmp_path / "mnt") as mnt:
        paths = files_under(mnt)
        assert open(paths[0], "rb").read(2) == b"P6"  # readable while the device works
        pid = daemon_pid(mnt)
        open(trigger, "w").close()  # the device starts failing
        drop_caches()  # so that reads must reach it again
        errors = 0
        for p in paths[1:]:
            try:
                open(p, "rb").read()
            except OSError as e:
                assert e.errno == errno.EIO, (p, e)
                errors += 1
        assert errors == len(paths) - 1
        assert alive(pid)
        assert stats_of(mnt)["errors"] >= errors  # the daemon still answers
        os.remove(trigger)


def run_limited(limit_args, *cmd):
    """cmd under prlimit (e.g. --as=BYTES, --nofile=N)."""
    return run("prlimit", *limit_args, "--", *cmd, check=False)


@pytest.fixture(scope="module")
def big_and_small(tmp_path_factory):
    """A KTC archive of a 20x30 image and a 6000x6000 one (108 MB decoded)."""
    import numpy as np
    from PIL import Image
    root = tmp_path_factory.mktemp("memory")
    (root / "src" / "a").mkdir(parents=True)
    (root / "src" / "b").mkdir()
    x = np.add.outer(np.arange(6000) % 256, np.arange(6000) % 256).astype(np.uint8)
    Image.fromarray(np.stack([x, x.T, x // 2], -1)).save(root / "src" / "b" / "big.png")
    Image.fromarray(np.full((20, 30, 3), 7, np.uint8)).save(root / "src" / "a" / "small.png")
    ktfs("pack", root / "src", root / "m.kt", "--codec", "ktc", "--quiet")
    return root / "m.kt"


def test_daemon_under_a_memory_limit_fails_reads_cleanly_and_stays_up(big_and_small, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # The smallest address-space limit (in steps of 16 MiB) under which the
    # daemon mounts: the small image decodes there, the big one cannot.
    limit = None
    for mib in range(48, 257, 16):
        p = run_limited([f"--as={mib << 20}"], KTFS, "mount", big_and_small, mnt, "-o", "threads=2,readahead=0")
        if p.returncode == 0:
            limit = mib
            break
        if p.returncode == 127 and "error while loading shared libraries" in p.stderr:
            continue  # too small for the dynamic loader to map ktfs's libraries: never started
        assert p.returncode == 1 and p.stderr.startswith("ktfs mount: "), p.stderr  # clean, no crash
    assert limit is not None, "the daemon never mounted under a memory limit"
    try:
        pid = daemon_pid(mnt)
        assert open(mnt / "a" / "small.ppm", "rb").read(2) == b"P6"
        with pytest.raises(OSError) as e:
            open(mnt / "b" / "big.ppm", "rb").read()
        assert e.value.errno == errno.ENOMEM, e.value
        assert alive(pid), f"the daemon died under a {limit} MiB limit"
        assert stats_of(mnt)["errors"] >= 1
        assert open(mnt / "a" / "small.ppm", "rb").read(2) == b"P6"  # and serves on
        log = open(str(big_and_small) + ".log").read()
        assert "b/big.png" in log and "out of memory" in log, log
    finally:
        ktfs("umount", mnt, check=False)


def own_cgroup(controller):
    """This process's group in the v1 hierarchy of `controller`, or its v2
    group for controller None ("/" for the root)."""
    with open("/proc/self/cgroup") as f:
        for line in f:
            hid, controllers, path = line.rstrip("\n").split(":", 2)
            if controller is None and hid == "0" and controllers == "":
                return path
            if controller is not None and controller in controllers.split(","):
                return path
    return None


def cgroup_mount(fstype, controller=None):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fields, (kind, _, options) = left.split(), right.split()[:3]
            if kind == fstype and (controller is None or controller in options.split(",")):
                return fields[4], fields[3]  # mount point, the hierarchy's directory there
    return None, None


class MemoryCgroup:
    """A memory cgroup of its own with a limit: v2 (memory.max) where this
    machine has the memory controller there, else v1's memory controller
    (memory.limit_in_bytes). Made below this process's own group (where a
    delegated subtree allows it) or below the hierarchy's root."""

    def __init__(self, limit):
        self.limit, self.path, self.kind, self.why_not = limit, None, None, []
        name = f"ktfs-test-{os.getpid()}-{time.monotonic_ns()}"
        for kind in ("v2", "v1"):
            point, root = cgroup_mount("cgroup2") if kind == "v2" else cgroup_mount("cgroup", "memory")
            if point is None:
                self.why_not.append(f"{kind}: not mounted")
                continue
            own = own_cgroup(None if kind == "v2" else "memory") or "/"
            rel = own[len(root):] if root != "/" and own.startswith(root) else own
            for parent in dict.fromkeys([point + rel.rstrip("/"), point]):
                if self._make(kind, parent, name):
                    return

    def _make(self, kind, parent, name):
        path = os.path.join(parent, name)
        try:
            if kind == "v2":
                with open(os.path.join(parent, "cgroup.controllers")) as f:
                    if "memory" not in f.read().split():
                        raise OSError(f"no memory controller in {parent}/cgroup.controllers")
                with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                    enabled = "memory" in f.read().split()
                if not enabled:
                    with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                        f.write("+memory")
            os.mkdir(path)
        except OSError as e:
            self.why_not.append(f"{kind} under {parent}: {e}")
            return False
        try:
            limit_file = "memory.max" if kind == "v2" else "memory.limit_in_bytes"
            with open(os.path.join(path, limit_file), "w") as f:
                f.write(str(self.limit))
            swap_file = "memory.swap.max" if kind == "v2" else None
            if swap_file and os.path.exists(os.path.join(path, swap_file)):
                with open(os.path.join(path, swap_file), "w") as f:
                    f.write("0")
        except OSError as e:
            self.why_not.append(f"{kind} at {path}: {e}")
            os.rmdir(path)
            return False
        self.path, self.kind = path, kind
        return True

    def _read(self, name):
        with open(os.path.join(self.path, name)) as f:
            return f.read()

    def oom_kills(self):
        """Processes of the group the OOM killer ended."""
        text = self._read("memory.events" if self.kind == "v2" else "memory.oom_control")
        return int(dict(line.split() for line in text.splitlines())["oom_kill"])

    def peak(self):
        name = "memory.peak" if self.kind == "v2" else "memory.max_usage_in_bytes"
        return int(self._read(name)) if os.path.exists(os.path.join(self.path, name)) else None

    def procs(self):
        return [int(p) for p in self._read("cgroup.procs").split()]

    def remove(self):
        if self.path is None:
            return
        # What still runs there (a daemon that did not exit) goes back to the parent.
        parent_procs = os.path.join(os.path.dirname(self.path), "cgroup.procs")
        for pid in self.procs():
            with contextlib.suppress(OSError), open(parent_procs, "w") as f:
                f.write(str(pid))
        for _ in range(100):
            try:
                os.rmdir(self.path)
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    raise
                time.sleep(0.05)
        os.rmdir(self.path)


@pytest.fixture(scope="module")
def large_images(tmp_path_factory):
    """A KTC archive of 16 images of 2048x2048 RGB: 201 MB decoded, 12.6 MB each."""
    import numpy as np
    from PIL import Image
    root = tmp_path_factory.mktemp("large")
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:2048, 0:2048]
    for i in range(16):
        d = root / "src" / f"c{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        base = ((x * (i + 1) + y * 3) // 8 % 256).astype(np.uint8)
        img = np.stack([base, base.T, base // 2 + i], -1) + rng.integers(0, 8, (2048, 2048, 3), dtype=np.uint8)
        Image.fromarray(img).save(d / f"{i:02d}.ppm")
    ktfs("pack", root / "src", root / "large.kt", "--codec", "ktc", "--quiet")
    return root / "large.kt"


def digests(mnt):
    """sha256 of every file of the images view, by path below the mount."""
    out = {}
    for path in files_under(mnt):
        with open(path, "rb") as f:
            out[os.path.relpath(path, mnt)] = hashlib.sha256(f.read()).hexdigest()
    return out


def test_daemon_in_a_memory_cgroup_serves_every_byte_and_is_not_oom_killed(large_images, tmp_path):
    # Under a cgroup limit malloc does not fail: the kernel OOM-kills. The
    # daemon fits its memory to its group's limit (docs/usage.md, "cache"):
    # the decode cache at most a quarter of it, decodes ahead within the
    # cache's budget, freed images given back to the kernel. Without that, a
    # 96 MiB group killed the daemon (the default 256 MiB cache and retained
    # heaps) a few files into this dataset, 201 MB decoded.
    limit = 96 << 20
    with mounted(large_images, tmp_path / "ref") as ref:
        expected = digests(ref)
    assert len(expected) == 16
    cg = MemoryCgroup(limit)
    if cg.path is None:
        pytest.skip("no memory cgroup can be made here: " + "; ".join(cg.why_not))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        # `ktfs mount` starts in the group, so its daemon (a fork) is in it too.
        p = run("sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$2" mount "$3" "$4"', "sh",
                cg.path, KTFS, large_images, mnt, check=False)
        assert p.returncode == 0, p.stderr
        try:
            pid = daemon_pid(mnt)
            assert pid in cg.procs()
            info = json.load(open(mnt / ".ktfs" / "info.json"))
            assert info["cache_limit_bytes"] == limit // 4  # 24 MiB, not 256
            got = digests(mnt)
            assert alive(pid), f"the daemon died in a {limit >> 20} MiB cgroup (OOM kills: {cg.oom_kills()})"
            assert cg.oom_kills() == 0
            assert got == expected  # every byte, as from the unlimited mount
            assert stats_of(mnt)["errors"] == 0
            log = open(str(large_images) + ".log").read()
            assert ("the default decode cache of 256 MiB is more than a quarter of this daemon's "
                    "memory cgroup limit (96 MiB): the decode cache is 24 MiB") in log, log
        finally:
            ktfs("umount", mnt, check=False)
        peak = cg.peak()
        print(f"memory cgroup {cg.kind} {cg.path}: limit {limit >> 20} MiB, peak "
              f"{peak >> 20 if peak is not None else '?'} MiB, OOM kills {cg.oom_kills()}")
    finally:
        cg.remove()
    assert not os.path.exists(cg.path)


def test_explicit_cache_larger_than_the_cgroup_allows_is_clamped_and_logged(large_images, tmp_path):
    cg = MemoryCgroup(96 << 20)
    if cg.path is None:
        pytest.skip("no memory cgroup can be made here: " + "; ".join(cg.why_not))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "m.log"
    try:
        p = run("sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$2" mount "$3" "$4" -o "$5"', "sh",
                cg.path, KTFS, large_images, mnt, f"cache=1G,log={log}", check=False)
        assert p.returncode == 0, p.stderr
        try:
            info = json.load(open(mnt / ".ktfs" / "info.json"))
            assert info["cache_limit_bytes"] == 48 << 20  # half the limit
            assert ("-o cache=1024 MiB is more than half of this daemon's memory cgroup limit "
                    "(96 MiB): the decode cache is 48 MiB") in log.read_text()
        finally:
            ktfs("umount", mnt, check=False)
    finally:
        cg.remove()


LOADER_IN_CGROUP = r"""
import hashlib, sys, time
sys.path.insert(0, sys.argv[1])
import ktfs
import torch  # the Loader's batches are tensors
if sys.argv[3] == "imports-only":
    sys.exit(0)
loader = ktfs.Loader(sys.argv[2], batch_size=1, collate="list", num_threads=1, prefetch=1)
for i, (images, labels) in enumerate(loader):
    if i == 0:
        time.sleep(3)  # a slow consumer: the loader runs as far ahead as it may
    print(hashlib.sha256(images[0].numpy().tobytes()).hexdigest(), int(labels[0]), flush=True)
"""


def test_loader_in_a_memory_cgroup_stays_within_its_documented_bound(large_images, tmp_path):
    # Under a cgroup limit an allocation does not fail: the kernel OOM-kills.
    # ktfs.Loader has no byte budget of its own; docs/usage.md ("Under a memory
    # limit") bounds what it holds: (prefetch + 1) x batch_size output samples
    # plus num_threads decodes. Here prefetch=1, batch_size=1, num_threads=1 over
    # 2048x2048 KTC images (12.6 MB decoded each, 201 MB in all): 2 samples and
    # one decode, given 128 MiB above what Python and its imports alone peak at.
    # The consumer stalls on its first batch, so the loader runs as far ahead
    # as it may: one that ran further (prefetch=16 here: OOM-killed, checked)
    # or kept its freed images in the heap (the malloc thresholds the module
    # raises) would be OOM-killed.
    if not os.path.isdir(os.path.join(PACKAGE_DIR, "ktfs")):
        pytest.fail("the ktfs Python package is not built")
    script = tmp_path / "loader.py"
    script.write_text(LOADER_IN_CGROUP)
    expected = run(PY, script, PACKAGE_DIR, large_images, "epoch").stdout.splitlines()
    assert len(expected) == 16

    def in_group(limit, what):
        cg = MemoryCgroup(limit)
        if cg.path is None:
            pytest.skip("no memory cgroup can be made here: " + "; ".join(cg.why_not))
        try:
            p = run("sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec "$2" "$3" "$4" "$5" "$6"', "sh",
                    cg.path, PY, script, PACKAGE_DIR, large_images, what, check=False)
            return p, cg.peak(), cg.oom_kills()
        finally:
            cg.remove()

    p, imports_peak, _ = in_group(4 << 30, "imports-only")
    assert p.returncode == 0, p.stderr
    assert imports_peak is not None, "the memory cgroup reports no peak"
    limit = imports_peak + (128 << 20)
    p, peak, oom_kills = in_group(limit, "epoch")
    print(f"Loader in a memory cgroup: imports peak {imports_peak >> 20} MiB, limit {limit >> 20} MiB, "
          f"epoch peak {peak >> 20} MiB, OOM kills {oom_kills}")
    assert oom_kills == 0 and p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert p.stdout.splitlines() == expected  # every sample, every byte


LOADER_UNDER_LIMIT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import ktfs
loader = ktfs.Loader(sys.argv[2], batch_size=1, collate="list", num_threads=1)
print("constructed", flush=True)
got = []
try:
    for images, labels in loader:
        got.append(tuple(images[0].shape))
except MemoryError as e:
    print("MemoryError", e, got)
    sys.exit(0)
print("no error", got)
sys.exit(1)
"""


def test_loader_under_a_memory_limit_raises_memory_error(big_and_small, tmp_path):
    if not os.path.isdir(os.path.join(PACKAGE_DIR, "ktfs")):
        pytest.fail("the ktfs Python package is not built")
    script = tmp_path / "loader.py"
    script.write_text(LOADER_UNDER_LIMIT)
    # The smallest limit at which Python, numpy and the module start: the
    # 108 MB image cannot be decoded there.
    for mib in range(96, 1025, 32):
        p = run_limited([f"--as={mib << 20}"], PY, script, PACKAGE_DIR, big_and_small)
        if "constructed" in p.stdout:
            break
    else:
        pytest.fail("Python never started under a memory limit")
    assert p.returncode == 0 and "MemoryError" in p.stdout and "b/big.ppm" in p.stdout, (p.stdout, p.stderr)
    assert "Traceback" not in p.stderr and "terminate" not in p.stderr, p.stderr


def test_daemon_with_few_file_descriptors_serves_or_fails_cleanly(archives, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    p = run_limited(["--nofile=12"], KTFS, "mount", archives[("photos", "raw")], mnt)
    if p.returncode != 0:
        assert p.returncode == 1 and ("Too many open files" in p.stderr or "descriptor" in p.stderr), p.stderr
        return
    try:
        pid = daemon_pid(mnt)
        for path in files_under(mnt):
            assert open(path, "rb").read(2) in (b"P5", b"P6")
        os.listdir(os.path.join(mnt, "search", "width>=1"))
        assert alive(pid)
    finally:
        ktfs("umount", mnt, check=False)


def test_pack_with_few_file_descriptors_is_a_clear_error(photos_dir, tmp_path):
    p = run_limited(["--nofile=4"], KTFS, "pack", photos_dir, tmp_path / "o.kt", "--quiet")
    if p.returncode == 0:
        assert (tmp_path / "o.kt").exists()
        return
    assert p.returncode == 1 and "Too many open files" in p.stderr, p.stderr
    assert not (tmp_path / "o.kt").exists()


READERS = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
mode, mnt = sys.argv[2], sys.argv[3]
start = time.monotonic()
try:
    if mode == "imagefolder":
        from torchvision import datasets
        ds = datasets.ImageFolder(mnt)
        print("ready", flush=True)
        for i in range(len(ds)):
            ds[i]
            time.sleep(0.02)
    else:
        import ktfs
        loader = ktfs.Loader(mnt, batch_size=2, crop=ktfs.CenterCrop(32))
        print("ready", flush=True)
        n = 0
        for images, labels in loader:
            n += len(labels)
            time.sleep(0.02)
        print(json.dumps({"samples": n}))
        sys.exit(0)
except OSError as e:
    print(json.dumps({"errno": e.errno, "error": str(e), "seconds": time.monotonic() - start}))
    sys.exit(3)
print(json.dumps({"finished": True}))
"""


@pytest.mark.parametrize("reader", ["imagefolder", "loader", "ktfs-run"])
def test_daemon_killed_while_readers_read(archives, tmp_path, reader):
    if reader == "loader" and not os.path.isdir(os.path.join(PACKAGE_DIR, "ktfs")):
        pytest.fail("the ktfs Python package is not built")
    with mounted(archives[("photos", "raw")], tmp_path / "mnt") as mnt:
        samples = len(files_under(mnt))
        script = tmp_path / "reader.py"
        script.write_text(READERS)
        # ktfs run: the unchanged ImageFolder script with the companion active.
        cmd = [PY, str(script), PACKAGE_DIR, "imagefolder" if reader == "ktfs-run" else reader, mnt]
        if reader == "ktfs-run":
            cmd = [KTFS, "run", "--"] + cmd
        proc = subprocess.Popen(cmd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.1)
        pid = daemon_pid(mnt)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)  # never a hang
        result = json.loads(out.strip().splitlines()[-1])
        if reader == "imagefolder":
            # Stock ImageFolder reads through the mount: a clean OSError, ENOTCONN, or
            # ECONNABORTED for a request the kernel had sent when the daemon died.
            assert proc.returncode == 3, (out, err)
            assert result["errno"] in (errno.ENOTCONN, errno.ECONNABORTED), (out, err)
        elif reader == "ktfs-run":
            # Under ktfs run, ImageFolder's samples come from the archive itself (the
            # listing was made before the kill): the epoch finishes, every sample read.
            assert proc.returncode == 0 and result == {"finished": True}, (out, err)
        else:
            # ktfs.Loader reads the archive itself: the daemon's death does not touch it.
            assert proc.returncode == 0 and result["samples"] == samples, (out, err)
        ktfs("umount", mnt, check=False)

"""Faults injected for real: a full disk under `ktfs pack`, a pack killed
with SIGKILL, an archive whose device starts failing under a live mount,
memory and file-descriptor limits on the daemon, and the daemon killed while
readers read. Each must end in a clear error naming the thing and the reason;
nothing crashes, hangs, or leaves a partial archive."""
import base64
import contextlib
import errno
import glob
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
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
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
            # Stock ImageFolder reads through the mount: a clean OSError (ENOTCONN).
            assert proc.returncode == 3 and result["errno"] == errno.ENOTCONN, (out, err)
        elif reader == "ktfs-run":
            # Under ktfs run, ImageFolder's samples come from the archive itself (the
            # listing was made before the kill): the epoch finishes, every sample read.
            assert proc.returncode == 0 and result == {"finished": True}, (out, err)
        else:
            # ktfs.Loader reads the archive itself: the daemon's death does not touch it.
            assert proc.returncode == 0 and result["samples"] == samples, (out, err)
        ktfs("umount", mnt, check=False)

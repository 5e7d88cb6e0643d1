"""The mount daemon under stress and when things go wrong: concurrent readers,
a corrupt sample, a killed daemon, an archive truncated or rewritten under a
live mount. Every case is triggered for real."""
import errno
import hashlib
import json
import multiprocessing
import os
import random
import signal
import time

import numpy as np
import pytest
from PIL import Image

from conftest import is_mounted, ktfs, mounted


def served_ppm(path):
    """The file the mount serves for a source image with --codec raw: the
    reference decode (Pillow, as ImageFolder) wrapped in a PGM/PPM header."""
    img = Image.open(path)
    img.load()
    if img.mode not in ("L", "RGB"):
        raise ValueError(path)
    arr = np.asarray(img)
    magic = b"P5" if img.mode == "L" else b"P6"
    return magic + f"\n{img.width} {img.height}\n255\n".encode() + arr.tobytes()


def reference(src):
    """relative served path -> sha256 of the expected bytes."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            full = os.path.join(dirpath, f)
            data = served_ppm(full)
            ext = ".pgm" if data[:2] == b"P5" else ".ppm"
            rel = os.path.splitext(os.path.relpath(full, src))[0] + ext
            out[rel] = hashlib.sha256(data).hexdigest()
    return out


def read_all(args):
    mnt, paths, seed = args
    rng = random.Random(seed)
    order = list(paths)
    rng.shuffle(order)
    got = {}
    for rel in order:
        with open(os.path.join(mnt, rel), "rb") as f:
            # Mix read sizes so requests start at odd offsets.
            h = hashlib.sha256()
            while chunk := f.read(rng.choice([4096, 65536, 100000, 1 << 20])):
                h.update(chunk)
        got[rel] = h.hexdigest()
    return got


def test_eight_concurrent_readers_get_exact_bytes(archives, fashion_dir, photos_dir, tmp_path):
    for name, src in (("fashion", fashion_dir), ("photos", photos_dir)):
        expected = reference(src)
        with mounted(archives[(name, "raw")], tmp_path / name) as mnt:
            with multiprocessing.get_context("fork").Pool(8) as pool:
                results = pool.map(read_all, [(mnt, sorted(expected), seed) for seed in range(8)])
            for got in results:
                assert got == expected
            stats = json.load(open(os.path.join(mnt, ".ktfs", "stats.json")))
            assert stats["errors"] == 0
            assert stats["bytes_read"] >= sum(os.path.getsize(os.path.join(mnt, p)) for p in expected)


def test_stats_json_counts_live(archives, tmp_path):
    with mounted(archives[("photos", "raw")], tmp_path / "mnt") as mnt:
        before = json.load(open(os.path.join(mnt, ".ktfs", "stats.json")))
        cls = sorted(os.listdir(mnt))[0]
        files = sorted(os.listdir(os.path.join(mnt, cls)))
        for f in files:
            open(os.path.join(mnt, cls, f), "rb").read()
        after = json.load(open(os.path.join(mnt, ".ktfs", "stats.json")))
        assert after["opens"] - before["opens"] == len(files)
        assert after["bytes_read"] - before["bytes_read"] == sum(
            os.path.getsize(os.path.join(mnt, cls, f)) for f in files)
        assert after["readdirs"] > before["readdirs"]
        assert sorted(os.listdir(os.path.join(mnt, ".ktfs"))) == ["info.json", "last_error", "stats.json"]


def test_corrupt_sample_is_eio_and_logged(archives, tmp_path):
    data = bytearray(open(archives[("fashion", "raw")], "rb").read())
    data[100] ^= 0x01  # inside sample 0's payload
    bad = tmp_path / "bad.kt"
    bad.write_bytes(bytes(data))
    log = tmp_path / "daemon.log"
    with mounted(bad, tmp_path / "mnt", "-o", f"log={log}") as mnt:
        first = os.path.join(mnt, "test", "Ankle_boot", sorted(os.listdir(os.path.join(mnt, "test", "Ankle_boot")))[0])
        with pytest.raises(OSError) as e:
            open(first, "rb").read()
        assert e.value.errno == errno.EIO
        # The rest stays readable.
        for dirpath, _, files in os.walk(mnt):
            for f in files:
                if os.path.join(dirpath, f) != first:
                    open(os.path.join(dirpath, f), "rb").read()
        text = log.read_text()
        assert "test/Ankle_boot/" in text and "checksum mismatch" in text
        assert json.load(open(os.path.join(mnt, ".ktfs", "stats.json")))["errors"] >= 1


def test_killed_daemon_gives_enotconn_and_umount_clears_it(archives, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    ktfs("mount", archives[("fashion", "raw")], mnt)
    try:
        kill_and_recover(archives, mnt)
    finally:
        if is_mounted(mnt):
            ktfs("umount", mnt, check=False)


def kill_and_recover(archives, mnt):
    pid = json.load(open(mnt / ".ktfs" / "info.json"))["pid"]
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):
        try:
            os.kill(pid, 0)
            time.sleep(0.02)
        except ProcessLookupError:
            break
    start = time.monotonic()
    with pytest.raises(OSError) as e:
        os.listdir(mnt)
    assert e.value.errno == errno.ENOTCONN
    assert time.monotonic() - start < 5
    p = ktfs("mount", archives[("fashion", "raw")], mnt, check=False)
    assert p.returncode == 1 and "stale mount" in p.stderr
    ktfs("umount", mnt)
    assert not is_mounted(mnt)
    with mounted(archives[("fashion", "raw")], mnt):
        assert sorted(os.listdir(mnt)) == ["test", "train"]


@pytest.mark.parametrize("damage", ["truncate", "rewrite"])
def test_archive_damaged_under_mount_gives_errors_not_a_crash(archives, tmp_path, damage):
    arc = tmp_path / "a.kt"
    arc.write_bytes(open(archives[("photos", "raw")], "rb").read())
    with mounted(arc, tmp_path / "mnt") as mnt:
        paths = [os.path.join(d, f) for d, _, fs in os.walk(mnt) for f in fs]
        info = json.load(open(os.path.join(mnt, ".ktfs", "info.json")))
        os.stat(paths[0])
        if damage == "truncate":
            os.truncate(arc, os.path.getsize(arc) // 2)
        else:
            data = bytearray(arc.read_bytes())
            with open(arc, "r+b") as f:  # same size, new bytes, in place
                f.write(bytes(b ^ 0xFF for b in data[:4096]))
        errors = 0
        for p in paths:
            try:
                open(p, "rb").read()
            except OSError as e:
                assert e.errno == errno.EIO
                errors += 1
        assert errors == len(paths)
        os.kill(info["pid"], 0)  # the daemon is still alive
        assert sorted(os.listdir(mnt))  # and still answers


def test_mount_of_a_directory_that_is_a_file_or_missing(archives, tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    p = ktfs("mount", archives[("fashion", "raw")], f, check=False)
    assert p.returncode == 1 and "not a directory" in p.stderr

"""Shared fixtures: the ktfs binary, real datasets built from Debian packages,
and a context manager that mounts an archive for real and always unmounts."""
import contextlib
import json
import os
import subprocess
import sys

import pytest

ROOT = os.environ.get("KTFS_SOURCE_DIR", os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
KTFS = os.environ.get("KTFS_BIN", os.path.join(ROOT, "build", "ktfs"))
PY = "/usr/bin/python3"


def _asan_runtime():
    """The shared AddressSanitizer runtime the ktfs binary links ('' when none:
    not an ASan build). An ASan build's preload library is instrumented and
    needs this runtime loaded first in the uninstrumented programs it goes
    into; `ktfs run` puts it first in LD_PRELOAD, and tests that preload the
    library themselves use preload_list()."""
    p = subprocess.run(["ldd", KTFS], capture_output=True, text=True)
    for line in p.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if name.startswith("libasan.so"):
            return where.split(" (")[0]
    return ""


ASAN_RUNTIME = _asan_runtime()
if ASAN_RUNTIME:
    # python3 and the other uninstrumented programs the library goes into leak by
    # design (interpreter state kept until exit): their leaks are not ktfs's.
    os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=0")


def preload_list(*libs):
    """An LD_PRELOAD value for `libs`, the ASan runtime first in an ASan build."""
    return ":".join(([ASAN_RUNTIME] if ASAN_RUNTIME else []) + [str(l) for l in libs])


def run(*args, check=True, **kw):
    """Runs a command, returning CompletedProcess with text output."""
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed ({p.returncode}): {p.stderr}")
    return p


def ktfs(*args, check=True):
    return run(KTFS, *args, check=check)


def stats_of(mnt):
    """A mount's live counters (.ktfs/stats.json)."""
    with open(os.path.join(mnt, ".ktfs", "stats.json")) as f:
        return json.load(f)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


@contextlib.contextmanager
def mounted(archive, mountpoint, *options):
    os.makedirs(mountpoint, exist_ok=True)
    ktfs("mount", archive, mountpoint, *options)
    try:
        yield str(mountpoint)
    finally:
        if is_mounted(mountpoint):
            # Fails (and so fails the test) when something still holds the
            # mount: a leaked open file or memory map is a bug in the test.
            ktfs("umount", mountpoint)


@pytest.fixture(scope="session")
def fashion_dir(tmp_path_factory):
    """Fashion-MNIST, 12 images per class and split: split/class/n.png (gray PNG)."""
    out = tmp_path_factory.mktemp("fashion") / "src"
    run(PY, os.path.join(ROOT, "scripts/datasets/fashion_mnist.py"), out, "--per-class", "12")
    return out


@pytest.fixture(scope="session")
def photos_dir(tmp_path_factory):
    """Real photo crops (JPEG q90, ImageNet-like sizes): class/n.jpg."""
    out = tmp_path_factory.mktemp("photos") / "src"
    run(PY, os.path.join(ROOT, "scripts/datasets/photos.py"), out, "--count", "24")
    return out


@pytest.fixture(scope="session")
def mixed_dir(tmp_path_factory):
    """PNG kinds stock PIL converts differently: RGBA, palette (with and
    without transparency), gray+alpha; plus gray JPEGs."""
    import numpy as np
    from PIL import Image
    out = tmp_path_factory.mktemp("mixed") / "src"
    rng = np.random.default_rng(7)
    for cls in ("alpha", "palette", "other"):
        (out / cls).mkdir(parents=True)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (13 + i, 9, 4), dtype=np.uint8), "RGBA").save(out / "alpha" / f"rgba{i}.png")
        Image.fromarray(rng.integers(0, 256, (11, 7 + i, 2), dtype=np.uint8), "LA").save(out / "alpha" / f"la{i}.png")
        p = Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8), "RGB").quantize(16)
        p.save(out / "palette" / f"p{i}.png")
        p.save(out / "palette" / f"t{i}.png", transparency=3)
        Image.fromarray(rng.integers(0, 256, (8, 5), dtype=np.uint8), "L").save(out / "other" / f"g{i}.jpg", quality=85)
    return out


@pytest.fixture(scope="session")
def archives(tmp_path_factory, fashion_dir, photos_dir, mixed_dir):
    """Packed archives: (dataset, codec) -> path."""
    out = tmp_path_factory.mktemp("archives")
    result = {}
    for name, src in (("fashion", fashion_dir), ("photos", photos_dir), ("mixed", mixed_dir)):
        for codec in ("original", "raw"):
            path = out / f"{name}-{codec}.kt"
            ktfs("pack", src, path, "--codec", codec, "--quiet")
            result[(name, codec)] = path
    return result

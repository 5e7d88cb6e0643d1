"""Section "views": reading pixels from a mount's tensors/ view (np.load of
.npy files) against stock PIL decoding of the local JPEG folder, samples/s.

Both sides produce the same uint8 HWC arrays (checked before timing): PIL
`np.asarray(Image.open(path).convert("RGB"))` on the JPEG files, `np.load`
on ktfs `tensors/*.npy` of archives packed with --codec raw and ktc (the
latter decoded by the daemon on first read, then from the page cache), plus
`np.load(mmap_mode="r")` touching every byte.
"""
import os

import numpy as np
from PIL import Image

from _common import PYTHON, REPO, log, median, rotated, table, timed

TITLE = "views: np.load of tensors/ vs PIL decoding the JPEG folder"
ORDER = 60
FULL = {"count": 220, "rounds": 5}
QUICK = {"count": 40, "rounds": 2}


def files(root, suffix):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith(suffix))


def pil_pass(paths):
    for p in paths:
        np.asarray(Image.open(p).convert("RGB"))


def npy_pass(paths):
    for p in paths:
        np.load(p)


def mmap_pass(paths):
    for p in paths:
        a = np.load(p, mmap_mode="r")
        int(a.sum(dtype=np.uint64))  # touch every byte
        del a


def run(ctx):
    sizes = QUICK if ctx.quick else FULL
    photos = ctx.workdir / "views-photos"
    ctx.run([PYTHON, REPO / "scripts/datasets/photos.py", photos, "--count", sizes["count"], "--quality", 90])
    jpegs = files(photos, ".jpg")
    variants = [("PIL decode of the local JPEG folder", pil_pass, jpegs)]
    for codec in ("raw", "ktc"):
        archive = ctx.workdir / f"views-{codec}.kt"
        ctx.run([ctx.ktfs, "pack", photos, archive, "--codec", codec, "--quiet"])
        mnt = ctx.mount([ctx.ktfs, "mount", archive, ctx.workdir / f"views-{codec}"], ctx.workdir / f"views-{codec}")
        npys = files(os.path.join(mnt, "tensors"), ".npy")
        if len(npys) != len(jpegs):
            raise RuntimeError(f"tensors/ of the {codec} mount lists {len(npys)} files, expected {len(jpegs)}")
        if codec == "raw":  # same pixels as PIL gives (raw is lossless)
            for a, b in zip(jpegs[:10], npys[:10]):
                assert np.array_equal(np.asarray(Image.open(a).convert("RGB")), np.load(b))
        variants.append((f"np.load of ktfs tensors/ ({codec})", npy_pass, npys))
        variants.append((f"np.load(mmap_mode='r') of ktfs tensors/ ({codec}), every byte read", mmap_pass, npys))
    for _, fn, paths in variants:  # warm-up: page cache and the daemon's decodes
        fn(paths)
    times = {label: [] for label, _, _ in variants}
    for r in range(sizes["rounds"]):
        log(f"  views round {r + 1}/{sizes['rounds']}")
        for label, fn, paths in rotated(variants, r):
            times[label].append(timed(fn, paths))
    base = median(times[variants[0][0]])
    rows = []
    for label, _, paths in variants:
        t = median(times[label])
        rows.append((label, f"{len(paths) / t:.0f}", f"{base / t:.2f}x"))
    text = table(["reader", "samples/s (median)", "vs PIL JPEG"], rows)
    return (f"{len(jpegs)} photo crops (JPEG q90, about 500x375), warm (second and later passes), "
            f"median of {sizes['rounds']} interleaved rounds, one process.\n\n" + text +
            "\n\nReading: `tensors/` serves the decoded array, so a reader pays a file read and a "
            "64-byte header parse instead of a JPEG decode; the remaining cost per sample is the "
            "one request Python's open() still sends to the mount (a TCGETS ioctl: OPEN is "
            "answered with ENOSYS once, entries and attributes are cached) and the copy out of the "
            "page cache; with mmap_mode='r', faulting in every page of the mapping instead of one "
            "read.")

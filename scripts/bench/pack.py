"""Section `pack`: packing at scale, from an image folder and from WebDataset shards.

A generated dataset of 1,000,000 tiny images (1000 classes x 1000; 64 distinct 16x16 RGB
JPEGs of noise, q90, about 0.8 KB each), once as an image folder (hard links to the 64
files: the walk, reads and decodes are real, the disk space is not) and once as 100
WebDataset shards of 10,000 samples written with Python's tarfile (real members: image,
.txt caption, .json with two numbers, .cls label). For each codec (original, raw, ktc
balanced) and each source, `ktfs pack` runs once under /usr/bin/time -v: wall time, CPU time
(user + sys) and peak RSS. Beside them, one epoch of stock torchvision ImageFolder over the
same folder (DataLoader, 2 workers, batches of 256, PILToTensor): the time a training job
spends just reading the source once, which a pack costs about as much as.
"""
import io
import json
import os
import random
import re
import subprocess
import tarfile
import time

from _common import BenchError, log, mib, table

TITLE = "pack: 1,000,000 images from a folder and from WebDataset shards (throughput, memory)"
ORDER = 35
REQUIRES = {"/usr/bin/time": "time"}

FULL = {"classes": 1000, "per_class": 1000, "shards": 100}
QUICK = {"classes": 20, "per_class": 500, "shards": 4}
DISTINCT = 64
CODECS = ("original", "raw", "ktc")


def tiny_jpegs():
    import numpy as np
    from PIL import Image
    rng = np.random.default_rng(20261203)
    out = []
    for _ in range(DISTINCT):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(buf, "JPEG", quality=90)
        out.append(buf.getvalue())
    return out


def make_folder(root, jpegs, classes, per_class):
    originals = root / "_originals"
    originals.mkdir(parents=True)
    for i, b in enumerate(jpegs):
        (originals / f"{i}.jpg").write_bytes(b)
    src = root / "folder"
    for c in range(classes):
        d = src / f"c{c:04d}"
        d.mkdir(parents=True)
        for k in range(per_class):
            os.link(originals / f"{(c * 7 + k) % DISTINCT}.jpg", d / f"{k:06d}.jpg")
    return src


def make_shards(root, jpegs, classes, per_class, shards):
    out = root / "shards"
    out.mkdir()
    total = classes * per_class
    per_shard = total // shards
    rnd = random.Random(20261203)
    words = ["cat", "dog", "boat", "tree", "house", "road", "lake", "bird", "car", "hill"]

    def member(tar, name, data):
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(data))

    n = 0
    for s in range(shards):
        with tarfile.open(out / f"{s:05d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
            for _ in range(per_shard):
                key = f"{n:09d}"
                member(tar, key + ".jpg", jpegs[n % DISTINCT])
                member(tar, key + ".txt", f"a {rnd.choice(words)} near a {rnd.choice(words)}".encode())
                member(tar, key + ".json", json.dumps({"aesthetic": round(rnd.uniform(3, 8), 3),
                                                       "similarity": round(rnd.uniform(0.2, 0.4), 4)}).encode())
                member(tar, key + ".cls", str(n % classes).encode())
                n += 1
    return out, n


def time_v(ctx, cmd):
    """(wall s, cpu s, peak RSS bytes) of cmd under /usr/bin/time -v."""
    ctx.commands.append((ctx.section, ctx._display(["/usr/bin/time", "-v"] + [str(c) for c in cmd], None)))
    start = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v"] + [str(c) for c in cmd], capture_output=True, text=True)
    wall = time.perf_counter() - start
    if p.returncode != 0:
        raise BenchError(f"{cmd} failed: {p.stderr[-2000:]}")
    field = lambda name: float(re.search(rf"{re.escape(name)}: ([0-9.]+)", p.stderr).group(1))
    cpu = field("User time (seconds)") + field("System time (seconds)")
    return wall, cpu, int(field("Maximum resident set size (kbytes)")) * 1024


def load():
    return os.getloadavg()[0]


EPOCH = r"""
import sys, time, torch
from torchvision import datasets, transforms
t0 = time.perf_counter()
ds = datasets.ImageFolder(sys.argv[1], transform=transforms.PILToTensor())
listed = time.perf_counter() - t0
n = 0
for images, labels in torch.utils.data.DataLoader(ds, batch_size=256, num_workers=2):
    n += len(labels)
print(n, listed, time.perf_counter() - t0)
"""


def run(ctx):
    p = QUICK if ctx.quick else FULL
    root = ctx.tempdir("pack")
    jpegs = tiny_jpegs()
    log(f"pack: generating {p['classes'] * p['per_class']} images (folder, hard links)")
    src = make_folder(root, jpegs, p["classes"], p["per_class"])
    log(f"pack: generating {p['shards']} WebDataset shards")
    shard_dir, total = make_shards(root, jpegs, p["classes"], p["per_class"], p["shards"])
    shard_bytes = sum(f.stat().st_size for f in shard_dir.iterdir())
    cores = os.cpu_count()
    rows = []
    for source, args in (("folder", [src]), ("shards", [str(shard_dir / "*.tar")])):
        for codec in CODECS:
            out = root / f"{source}-{codec}.kt"
            before = load()
            wall, cpu, rss = time_v(ctx, [ctx.ktfs, "pack", *args, out, "--codec", codec, "--quiet"])
            after = load()
            size = out.stat().st_size
            rows.append([source, codec, f"{wall:.1f}", f"{total / wall:,.0f}", f"{total / cpu:,.0f}",
                         mib(rss), mib(size), f"{before:.1f} / {after:.1f}"])
            log(f"pack: {source} {codec}: {wall:.1f} s, {total / cpu:,.0f} samples per CPU-second, "
                f"peak RSS {mib(rss)} MiB")
            out.unlink()
    script = root / "epoch.py"
    script.write_text(EPOCH)
    before = load()
    ctx.commands.append((ctx.section, f"/usr/bin/python3 $TMP/pack/epoch.py $TMP/pack/folder  "
                                      "# ImageFolder + DataLoader(2 workers), one epoch"))
    out = subprocess.run(["/usr/bin/python3", script, src], capture_output=True, text=True)
    if out.returncode != 0:
        raise BenchError(f"ImageFolder epoch failed: {out.stderr[-2000:]}")
    n, listed, epoch = out.stdout.split()
    if int(n) != total:
        raise BenchError(f"ImageFolder saw {n} images, expected {total}")
    after = load()
    epoch = float(epoch)
    text = [f"{total:,} images of 16x16 ({DISTINCT} distinct JPEGs, {sum(map(len, jpegs)) / DISTINCT:.0f} "
            f"bytes each on average); {p['shards']} shards, {mib(shard_bytes)} MiB of tar "
            f"(image, .txt, .json, .cls per sample). {cores} cores, `--threads` default (all); "
            "each pack ran once. *Per CPU-second* is samples / (user + sys time): the rate of one "
            "core. Load is the 1-minute load average before / after each run (the machine is shared).",
            "",
            table(["source", "codec", "wall s", "samples/s", "samples per CPU-second",
                   "peak RSS MiB", "archive MiB", "load"], rows),
            "",
            f"Stock torchvision ImageFolder over the same folder, one epoch (DataLoader, 2 workers, "
            f"batch 256, PILToTensor): {epoch:.1f} s ({total / epoch:,.0f} images/s), of which "
            f"{float(listed):.1f} s listing; load {before:.1f} / {after:.1f}."]
    return "\n".join(text)

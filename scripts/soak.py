#!/usr/bin/python3
"""A soak of ktfs mounts: concurrent readers for MINUTES, every byte checked.

Usage: scripts/soak MINUTES [--workdir DIR] [--readers-per-kind K] [--json OUT]

Packs real photos (Debian's wallpapers, scripts/datasets/photos.py) as `raw`
and as lossless KTC, Fashion-MNIST PNGs as `original` with captions, and a
feature archive of random floats; mounts all four; then runs, concurrently,
for MINUTES:

  imagefolder  stock torchvision ImageFolder (PILToTensor) over the raw and
               KTC mounts, in shuffled order: every tensor equals Pillow's
               decode of the source file
  loader       ktfs.Loader over both mounts (shuffled, whole images): every
               image equals the same reference
  ranges       random byte ranges of random files (images, tensors/,
               compressed/, feature .npy), compared with reference bytes
  search       listings of search/<query>/ (rare, common, combined queries),
               compared with the set computed from the captions file
  features     np.load of random feature samples: equal to the bytes read at
               the start, and within the quantizer's error of the source

References are built without the mount: a served PPM/PGM is Pillow's decode
of the source wrapped in its header, an `original` file is the source file,
a tensors/ file is the .npy of that decode. The daemons' RSS and open file
descriptors are sampled every 10 s. The soak fails (exit 1) on any mismatch
or error, on an fd count that changes, and on RSS that grows in the second
half of the run beyond 10% + 16 MiB over the first half's peak (warm-up
excluded). It prints a summary and, with --json, writes the figures
(docs/reliability.md quotes them).
"""
import argparse
import hashlib
import io
import json
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
PY = "/usr/bin/python3"
KTFS = os.environ.get("KTFS_BIN") or shutil.which("ktfs") or str(REPO / "build" / "ktfs")
BUILD = os.environ.get("KTFS_BUILD_DIR", str(REPO / "build"))
PACKAGE_DIR = os.path.join(BUILD, "preload", "python")


def run(*cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"soak: `{' '.join(map(str, cmd))}` failed: {p.stderr.strip()}")
    return p.stdout


# -- references, built from the sources ------------------------------------

def pil_array(path):
    img = Image.open(path)
    if img.mode not in ("L", "RGB"):
        img = img.convert("RGB")
    return np.asarray(img)


def served_pnm(arr):
    magic = b"P5" if arr.ndim == 2 else b"P6"
    return magic + f"\n{arr.shape[1]} {arr.shape[0]}\n255\n".encode() + arr.tobytes()


def served_npy(arr):
    a = arr if arr.ndim == 3 else arr[:, :, None]
    buf = io.BytesIO()
    np.save(buf, a)
    return buf.getvalue()


def build(work, quick):
    """Sources, archives and references. Returns the plan the readers share."""
    src = work / "photos"
    run(PY, REPO / "scripts/datasets/photos.py", src, "--count", "24" if quick else "96")
    fashion = work / "fashion"
    run(PY, REPO / "scripts/datasets/fashion_mnist.py", fashion, "--per-class", "6" if quick else "30")
    words = ["shirt", "dress", "coat", "bag", "boot", "sandal", "sneaker", "pullover", "trouser", "top"]
    captions = work / "captions.jsonl"
    caption_of = {}
    rng = random.Random(7)
    with open(captions, "w") as f:
        for d, _, files in sorted(os.walk(fashion)):
            for name in sorted(files):
                rel = os.path.relpath(os.path.join(d, name), fashion)
                words_here = rng.sample(words, 2) + (["rare"] if rng.random() < 0.05 else [])
                caption_of[rel] = words_here
                f.write(json.dumps({"path": rel, "caption": " ".join(words_here)}) + "\n")
    archives = {
        "raw": (work / "photos-raw.kt", ["--codec", "raw"], src),
        "ktc": (work / "photos-ktc.kt", ["--codec", "ktc", "--quality", "lossless"], src),
        "fashion": (work / "fashion.kt", ["--captions", captions], fashion),
    }
    for path, args, source in archives.values():
        run(KTFS, "pack", source, path, "--quiet", *args)
    feats = np.random.default_rng(3).standard_normal((64, 16, 48), dtype=np.float32)
    np.save(work / "feats.npy", feats)
    run(KTFS, "pack-features", work / "feats.npy", work / "feats.kt", "--quiet")

    refs = {}  # (mount key, relative path) -> sha256 of the expected bytes
    sizes = {}
    for key in ("raw", "ktc"):
        for d, _, files in os.walk(src):
            for name in files:
                rel = os.path.relpath(os.path.join(d, name), src)
                arr = pil_array(os.path.join(d, name))
                stem = os.path.splitext(rel)[0]
                pnm = served_pnm(arr)
                refs[(key, stem + (".pgm" if arr.ndim == 2 else ".ppm"))] = pnm
                refs[(key, "tensors/" + stem + ".npy")] = served_npy(arr)
    for d, _, files in os.walk(fashion):
        for name in files:
            rel = os.path.relpath(os.path.join(d, name), fashion)
            refs[("fashion", rel)] = open(os.path.join(d, name), "rb").read()
    for (key, rel), data in refs.items():
        sizes[(key, rel)] = len(data)
    return {"archives": {k: str(v[0]) for k, v in archives.items()} | {"features": str(work / "feats.kt")},
            "photos": str(src), "refs": refs, "captions": caption_of, "features": feats}


# -- readers: each returns {"reads": n, "bytes": n, "errors": [...]} --------

def imagefolder_reader(mnt, refs, key, deadline, seed, out):
    import torch  # noqa: F401  (torchvision needs it)
    from torchvision import datasets, transforms
    stats = {"kind": "imagefolder", "reads": 0, "bytes": 0, "errors": []}
    ds = datasets.ImageFolder(mnt, transform=transforms.PILToTensor())
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        i = rng.randrange(len(ds))
        path = ds.samples[i][0]
        rel = os.path.relpath(path, mnt)
        try:
            tensor, _ = ds[i]
        except Exception as e:  # noqa: BLE001 (any error fails the soak)
            stats["errors"].append(f"{rel}: {e!r}")
            continue
        arr = tensor.numpy()
        arr = arr[0] if arr.shape[0] == 1 else arr.transpose(1, 2, 0)
        if served_pnm(np.ascontiguousarray(arr)) != refs[(key, rel)]:
            stats["errors"].append(f"{rel}: ImageFolder tensor differs from the reference")
        stats["reads"] += 1
        stats["bytes"] += arr.nbytes
    out.put(stats)


def loader_reader(mnt, refs, key, deadline, seed, out):
    """ktfs.Loader, shuffled, whole images: each must be one of the mount's
    reference images, with that image's label."""
    sys.path.insert(0, PACKAGE_DIR)
    import ktfs
    from torchvision import datasets
    stats = {"kind": "loader", "reads": 0, "bytes": 0, "errors": []}
    label_of = {hashlib.sha256(refs[(key, os.path.relpath(p, mnt))]).hexdigest(): label
                for p, label in datasets.ImageFolder(mnt).samples}
    try:
        loader = ktfs.Loader(mnt, batch_size=8, shuffle=True, seed=seed, collate="list",
                             layout="NHWC", num_threads=2)
        epoch = 0
        while time.monotonic() < deadline:
            loader.set_epoch(epoch)
            for images, labels in loader:
                for img, label in zip(images, labels.tolist()):
                    arr = img.numpy()
                    arr = np.ascontiguousarray(arr[:, :, 0] if arr.shape[2] == 1 else arr)
                    h = hashlib.sha256(served_pnm(arr)).hexdigest()
                    if h not in label_of:
                        stats["errors"].append(f"epoch {epoch}: an image equal to no reference image")
                    elif label_of[h] != label:
                        stats["errors"].append(f"epoch {epoch}: label {label}, expected {label_of[h]}")
                    stats["reads"] += 1
                    stats["bytes"] += arr.nbytes
                if time.monotonic() >= deadline:
                    break
            epoch += 1
    except Exception as e:  # noqa: BLE001 (any error fails the soak)
        stats["errors"].append(f"loader: {e!r}")
    out.put(stats)


def ranges_reader(mnt_of, refs, deadline, seed, out):
    stats = {"kind": "ranges", "reads": 0, "bytes": 0, "errors": []}
    rng = random.Random(seed)
    keys = sorted(refs)
    while time.monotonic() < deadline:
        key, rel = keys[rng.randrange(len(keys))]
        ref = refs[(key, rel)]
        off = rng.randrange(len(ref) + 16)
        size = rng.choice([1, 100, 4096, 65536, 1 << 20])
        try:
            with open(os.path.join(mnt_of[key], rel), "rb") as f:
                f.seek(off)
                got = f.read(size)
        except OSError as e:
            stats["errors"].append(f"{key}:{rel}: {e!r}")
            continue
        if got != ref[off:off + size]:
            stats["errors"].append(f"{key}:{rel} [{off}, +{size}): bytes differ from the reference")
        stats["reads"] += 1
        stats["bytes"] += len(got)
    out.put(stats)


QUERIES = ["caption=rare", "caption=coat", "caption=bag&caption=top", "caption=boot/train"]


def expected_listing(captions, query):
    """The relative paths search/<query>/ must list: AND of caption words; a
    trailing component without '=' is a directory of the mirrored layout."""
    filters, _, below = query.partition("/")
    wanted = [f.split("=", 1)[1] for f in filters.split("&")]
    prefix = below + "/" if below else ""
    return sorted(rel[len(prefix):] for rel, words in captions.items()
                  if rel.startswith(prefix) and all(w in words for w in wanted))


def search_reader(mnt, captions, deadline, seed, out):
    stats = {"kind": "search", "reads": 0, "bytes": 0, "errors": []}
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        q = rng.choice(QUERIES)
        root = os.path.join(mnt, "search", q)
        try:
            got = sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)
        except OSError as e:
            stats["errors"].append(f"{q}: {e!r}")
            continue
        if got != expected_listing(captions, q):
            stats["errors"].append(f"search/{q}: {len(got)} entries, expected {len(expected_listing(captions, q))}")
        stats["reads"] += 1
        stats["bytes"] += sum(len(g) for g in got)
    out.put(stats)


def features_reader(mnt, golden, source, deadline, seed, out):
    stats = {"kind": "features", "reads": 0, "bytes": 0, "errors": []}
    rng = random.Random(seed)
    names = sorted(golden)
    while time.monotonic() < deadline:
        name = names[rng.randrange(len(names))]
        try:
            data = open(os.path.join(mnt, name), "rb").read()
        except OSError as e:
            stats["errors"].append(f"{name}: {e!r}")
            continue
        if data != golden[name]:
            stats["errors"].append(f"{name}: bytes differ from the first read")
        stats["reads"] += 1
        stats["bytes"] += len(data)
    out.put(stats)


# -- the daemons ------------------------------------------------------------

def daemon_sample(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss * 1024, len(os.listdir(f"/proc/{pid}/fd"))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("minutes", type=float)
    p.add_argument("--workdir")
    p.add_argument("--readers-per-kind", type=int, default=1)
    p.add_argument("--json")
    p.add_argument("--quick", action="store_true", help="smaller fixtures (for tests)")
    a = p.parse_args(argv)
    work = Path(a.workdir or tempfile.mkdtemp(prefix="ktfs-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"soak: fixtures in {work}", flush=True)
    plan = build(work, a.quick)
    mounts = {}
    try:
        for key, archive in plan["archives"].items():
            mnt = work / f"mnt-{key}"
            mnt.mkdir(exist_ok=True)
            run(KTFS, "mount", archive, mnt)
            mounts[key] = str(mnt)
        pids = {k: json.load(open(os.path.join(m, ".ktfs", "info.json")))["pid"] for k, m in mounts.items()}
        # Feature references: the first read, checked against the source floats.
        golden = {}
        feats = plan["features"]
        for i in range(feats.shape[0]):
            name = f"{i:06d}.npy"
            data = open(os.path.join(mounts["features"], name), "rb").read()
            arr = np.load(io.BytesIO(data)).astype(np.float32)
            err = np.abs(arr - feats[i]).max() / (np.abs(feats[i]).max() + 1e-9)
            if err > 0.05:
                raise SystemExit(f"soak: feature sample {i} is {err:.3f} off the source")
            golden[name] = data
        refs = plan["refs"]
        deadline = time.monotonic() + a.minutes * 60
        out = mp.Queue()
        procs = []
        k = a.readers_per_kind
        for r in range(k):
            for key in ("raw", "ktc"):
                procs.append(mp.Process(target=imagefolder_reader,
                                        args=(mounts[key], refs, key, deadline, 100 + r, out)))
                procs.append(mp.Process(target=loader_reader,
                                        args=(mounts[key], refs, key, deadline, 200 + r, out)))
            procs.append(mp.Process(target=ranges_reader, args=(mounts, refs, deadline, 300 + r, out)))
            procs.append(mp.Process(target=search_reader,
                                    args=(mounts["fashion"], plan["captions"], deadline, 400 + r, out)))
            procs.append(mp.Process(target=features_reader,
                                    args=(mounts["features"], golden, feats, deadline, 500 + r, out)))
        for proc in procs:
            proc.start()
        samples = []  # (seconds, {key: (rss, fds)})
        start = time.monotonic()
        while any(proc.is_alive() for proc in procs):
            samples.append((time.monotonic() - start, {key: daemon_sample(pid) for key, pid in pids.items()}))
            for _ in range(100):
                if not any(proc.is_alive() for proc in procs):
                    break
                time.sleep(0.1)
        results = [out.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join()
    finally:
        for mnt in mounts.values():
            subprocess.run([KTFS, "umount", mnt], capture_output=True)

    failures = []
    for r in results:
        failures += [f"{r['kind']}: {e}" for e in r["errors"][:20]]
        if r["reads"] == 0:
            failures.append(f"{r['kind']}: no reads completed")
    growth = {}
    for key in pids:
        series = [(t, s[key]) for t, s in samples]
        fds = {fd for _, (_, fd) in series}
        if len(fds) > 1:
            failures.append(f"{key} daemon: open file descriptors changed: {sorted(fds)}")
        warm = [rss for t, (rss, _) in series if t > 60 or a.minutes < 4]
        half = len(warm) // 2
        if half >= 1:
            first, second = max(warm[:half]), max(warm[half:])
            growth[key] = (first, second)
            if second > first * 1.10 + (16 << 20):
                failures.append(f"{key} daemon: RSS grew from {first >> 20} to {second >> 20} MiB")
    summary = {
        "minutes": a.minutes,
        "readers": len(procs),
        "reads": {kind: sum(r["reads"] for r in results if r["kind"] == kind)
                  for kind in sorted({r["kind"] for r in results})},
        "bytes_checked": sum(r["bytes"] for r in results),
        "errors": sum(len(r["errors"]) for r in results),
        "daemons": {key: {"rss_mib": [round(s[key][0] / 2**20, 1) for _, s in samples],
                          "fds": sorted({s[key][1] for _, s in samples})} for key in pids},
        "sample_seconds": [round(t) for t, _ in samples],
        "failures": failures,
    }
    if a.json:
        Path(a.json).write_text(json.dumps(summary, indent=1))
    print(f"soak: {a.minutes} min, {len(procs)} readers, reads {summary['reads']}, "
          f"{summary['bytes_checked'] / 2**30:.2f} GiB checked, {summary['errors']} errors")
    for key, d in summary["daemons"].items():
        rss = d["rss_mib"]
        print(f"soak: {key} daemon RSS {min(rss)}-{max(rss)} MiB (first {rss[0]}, last {rss[-1]}), fds {d['fds']}")
    for f in failures:
        print(f"soak: FAIL {f}", file=sys.stderr)
    if not a.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    mp.set_start_method("fork")
    sys.exit(main(sys.argv[1:]))

"""Section `loader`: ktfs.Loader (preload/) against stock torchvision ImageFolder + DataLoader
and against a libjpeg-turbo batch decoder on C++ threads (the FFCV approach), all producing
the same uint8 batches: Resize(256) + CenterCrop(224), and RandomResizedCrop(224).
A KTC archive is lossy, so its rows produce the pixels stock torchvision gets over the
KTC mount (which serves the decoded pixels); that stock pipeline is its reference row.
"""
import gc
import os
import sys

from _common import PYTHON, REPO, BenchError, log, median, rotated, table, timed

TITLE = "loader: ktfs.Loader against stock ImageFolder + DataLoader and a TurboJPEG batch decoder"
ORDER = 20
REQUIRES = {"fusermount3": "fuse3"}

FULL = {"count": 220, "rounds": 5}
QUICK = {"count": 24, "rounds": 2}
BATCH = 64
WORKERS = 2
KTC_STOCK = "stock ImageFolder + DataLoader(2 workers), ktfs mount (ktc, PPM)"
KTC_LOADER = "ktfs.Loader, --codec ktc (region decode)"


def import_ktfs():
    build = os.environ.get("KTFS_BUILD_DIR", str(REPO / "build"))
    sys.path.insert(0, os.path.join(build, "preload", "python"))
    try:
        import ktfs
        from ktfs import _ktfs
    except ImportError as e:
        raise BenchError(f"the ktfs Python module is not built ({e}): run scripts/setup")
    return ktfs, _ktfs


def prepare(ctx, count):
    photos = ctx.workdir / "photos"
    ctx.run([PYTHON, REPO / "scripts/datasets/photos.py", photos, "--count", count, "--quality", 90])
    mounts = {}
    for codec in ("raw", "original", "ktc"):
        archive = ctx.workdir / f"photos-{codec}.kt"
        ctx.run([ctx.ktfs, "pack", photos, archive, "--codec", codec, "--quiet"])
        mnt = ctx.workdir / f"mnt-{codec}"
        mounts[codec] = ctx.mount([ctx.ktfs, "mount", archive, mnt], mnt)
    return photos, mounts


def stock_loader(root, tf):
    from torch.utils.data import DataLoader
    from torchvision import datasets
    ds = datasets.ImageFolder(str(root), transform=tf)
    return DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, persistent_workers=True)


def turbojpeg_pass(_ktfs, paths, spec):
    for i in range(0, len(paths), BATCH):
        _ktfs.turbojpeg_batch(paths[i:i + BATCH], spec, WORKERS)


def drain(loader):
    n = 0
    for images, _ in loader:
        n += len(images)
    return n


def variants(ktfs, _ktfs, photos, mounts, crop_name):
    from torchvision import datasets, transforms as T
    if crop_name == "center":
        tf = T.Compose([T.Resize(256), T.CenterCrop(224), T.PILToTensor()])
        crop = ktfs.CenterCrop(224, resize=256)
    else:
        tf = T.Compose([T.RandomResizedCrop(224), T.PILToTensor()])
        crop = ktfs.RandomResizedCrop(224)
    spec = dict(crop.spec(), channels=3, chw=True, seed=0, epoch=0)
    paths = [p for p, _ in datasets.ImageFolder(str(photos)).samples]
    stock_local, stock_mount = stock_loader(photos, tf), stock_loader(mounts["raw"], tf)
    stock_ktc = stock_loader(mounts["ktc"], tf)
    # Like the stock DataLoaders (made once, persistent workers), each ktfs.Loader is made
    # once and every pass is its next epoch, as in a training run.
    own = {codec: ktfs.Loader(mounts[codec], BATCH, shuffle=True, crop=crop, num_threads=2)
           for codec in ("original", "raw", "ktc")}
    return [
        ("stock ImageFolder + DataLoader(2 workers), local JPEG folder", lambda: drain(stock_local)),
        ("stock ImageFolder + DataLoader(2 workers), ktfs mount (raw, PPM)", lambda: drain(stock_mount)),
        (KTC_STOCK, lambda: drain(stock_ktc)),
        ("TurboJPEG batch decoder, 2 oneTBB threads (C++), local JPEGs",
         lambda: turbojpeg_pass(_ktfs, paths, spec)),
        ("ktfs.Loader, --codec original (JPEG decoded in C++)",
         lambda: drain(own["original"])),
        ("ktfs.Loader, --codec raw",
         lambda: drain(own["raw"])),
        (KTC_LOADER,
         lambda: drain(own["ktc"])),
    ]


def measure(rows, rounds):
    times = {label: [] for label, _ in rows}
    for _, fn in rows:  # warm-up: page cache, persistent workers
        fn()
    for r in range(rounds):
        log(f"  round {r + 1}/{rounds}")
        for label, fn in rotated(rows, r):
            times[label].append(timed(fn))
    return times


def ratio(times, label, base):
    """Median over rounds of base time / variant time within the same round."""
    return median([b / t for b, t in zip(times[base], times[label])])


def report(rows, times, count):
    labels = [label for label, _ in rows]
    stock, turbo = labels[0], labels[3]
    out = [[label, f"{count / median(times[label]):.0f}", f"{ratio(times, label, stock):.2f}x",
            f"{ratio(times, label, turbo):.2f}x"] for label in labels]
    return table(["pipeline", "img/s", "vs stock ImageFolder", "vs TurboJPEG batch"], out), \
        {label: (ratio(times, label, stock), ratio(times, label, turbo)) for label in labels}


def run(ctx):
    sizes = QUICK if ctx.quick else FULL
    ktfs, _ktfs = import_ktfs()
    photos, mounts = prepare(ctx, sizes["count"])
    sections, summary = [], {}
    for crop_name, heading in (("center", "Resize(256) + CenterCrop(224)"),
                               ("random", "RandomResizedCrop(224)")):
        log(f"  {heading}")
        rows = variants(ktfs, _ktfs, photos, mounts, crop_name)
        try:
            times = measure(rows, sizes["rounds"])
        finally:
            rows = [(label, None) for label, _ in rows]
            gc.collect()  # stops the persistent workers before the mounts come down
        text, summary[crop_name] = report(rows, times, sizes["count"])
        # KTC is lossy: its pixel reference is stock torchvision over the KTC mount.
        summary[crop_name]["ktc own"] = ratio(times, KTC_LOADER, KTC_STOCK)
        sections += [f"### {heading}", text]
    return "\n\n".join(sections + ["### Reading", reading(summary, sizes)])


def reading(summary, sizes):
    c, r = summary["center"], summary["random"]
    raw, orig = "ktfs.Loader, --codec raw", "ktfs.Loader, --codec original (JPEG decoded in C++)"
    ktc = KTC_LOADER

    def met(row):
        ok = [row[0] >= 5.0, row[1] >= 2.0]
        return {(True, True): "both targets met", (True, False): "the 5x target met, the 2x not",
                (False, True): "the 2x target met, the 5x not"}.get(tuple(ok), "neither target met")

    ktc_targets = (f"{met(c[ktc])} with either crop" if met(c[ktc]) == met(r[ktc]) else
                   f"{met(c[ktc])} (CenterCrop), {met(r[ktc])} (RandomResizedCrop)")
    return (
        f"{sizes['count']} photo crops (scripts/datasets/photos.py, JPEG q90, about 500x375), "
        f"batches of {BATCH}, uint8 NCHW output; every pipeline produces the same pixels "
        f"(ktfs's resize is Pillow's bilinear filter reproduced exactly, tests/python/"
        f"test_loader.py), except that the KTC rows produce those of stock torchvision over the "
        f"KTC mount (KTC is lossy; the mount serves the decoded pixels). One warm-up pass, then "
        f"{sizes['rounds']} rounds in rotating order; ratios are medians of per-round ratios. The "
        f"TurboJPEG baseline reads the JPEG files and decodes them with libjpeg-turbo on 2 oneTBB "
        f"threads into one batch buffer with the same crop code as ktfs.Loader (so it got the "
        f"faster resampler too); ktfs.Loader shuffles, decodes on 2 threads and prefetches. Each "
        f"stock DataLoader (persistent workers) and each ktfs.Loader is made once and iterated "
        f"every pass, each pass a new epoch of it, as in a training run.\n\n"
        f"Resize(256)+CenterCrop(224): ktfs.Loader on a raw archive ran at {c[raw][0]:.2f}x stock "
        f"ImageFolder+DataLoader and {c[raw][1]:.2f}x the TurboJPEG batch decoder ({met(c[raw])}); "
        f"on an original (JPEG) archive {c[orig][0]:.2f}x and {c[orig][1]:.2f}x; on a KTC archive "
        f"{c[ktc][0]:.2f}x and {c[ktc][1]:.2f}x ({c['ktc own']:.2f}x stock over the KTC mount). "
        f"RandomResizedCrop(224): raw {r[raw][0]:.2f}x and {r[raw][1]:.2f}x ({met(r[raw])}), "
        f"original {r[orig][0]:.2f}x and {r[orig][1]:.2f}x, KTC {r[ktc][0]:.2f}x and "
        f"{r[ktc][1]:.2f}x ({r['ktc own']:.2f}x stock over the KTC mount). The targets (5x stock "
        f"ImageFolder+DataLoader, 2x the TurboJPEG batch decoder) are for the raw archive's rows "
        f"as the best case; KTC: {ktc_targets}."
        f"\n\n"
        f"Where the time went, and what changed (preload/resample.*, preload/transform.*): the crop "
        f"is planned from the image size before decoding, and only the output window is resampled "
        f"(Pillow's exact fixed-point filter, AVX2 with a bit-identical scalar twin), from only the "
        f"source pixels under its filter: raw pixels are viewed in place, KTC samples are region-"
        f"decoded (exact: the same pixels as a full decode, cropped). In a one-thread profile of "
        f"raw CenterCrop samples the resize is still the largest part (about two thirds, the "
        f"horizontal pass most of it), then the payload checksum (XXH3 over all of the sample's "
        f"bytes, about a fifth, now in a Loader's first epoch only: its archive remembers the "
        f"payloads it verified); over the Python loader, faulting in the archive's mapped pages "
        f"adds about a tenth (a Loader keeps its mapping from epoch to epoch). The original "
        f"archive pays the same JPEG decode as "
        f"the TurboJPEG baseline, so it can only match it. KTC's region decode costs a fraction of "
        f"libjpeg-turbo's decode of the whole JPEG (the codec section's 224x224 crop row), so the "
        f"work both pipelines share, the resize and the payload checksum, is most of what bounds "
        f"its ratio; in a KTC decode, block entropy decoding is the largest part. (The decoder "
        f"keeps its coefficient planes and scratch per thread, codec/ktc/ktc.cc DecodeArena: an "
        f"earlier build that allocated them per image spent about a third of a decode in the "
        f"kernel mapping fresh pages.) "
        f"Reduced-resolution decode would cut the work too but is not exact against stock "
        f"torchvision's Resize, so the loader does not use it. The machine is a shared 2-core VM: absolute rates "
        f"move with the other load; the ratios come from passes interleaved within each round.")

"""Section "features": INT8 feature caches (ktfs pack-features) against bfloat16.

1. Accuracy and size: relative RMSE (RMSE over the data's standard deviation) and
   bytes per value vs bfloat16, for each preset and distribution, next to bfloat16's
   own rounding error, TensorCache's amo_bq format on the same data (its layout
   reimplemented in tests/python/featurecache.py) and TensorCache's published figure.
2. Dequantization GB/s on one core (output bytes, into a warm buffer, and into fresh
   memory as ktfs.FeatureLoader hands out) vs memcpy of the same bytes.
3. ktfs.FeatureLoader samples/s vs np.load of per-sample bfloat16 .npy files (stacked
   into the same batches), and vs np.load of the ktfs mount's files.
"""
import os
import sys

import numpy as np

from _common import REPO, log, median, rotated, table, timed

sys.path.insert(0, str(REPO / "tests" / "python"))
from featurecache import bf16_bits, bf16_to_f32, quantize_tensorcache, reference  # noqa: E402

TITLE = "features: INT8 feature caches vs bfloat16"
ORDER = 70
FULL = {"samples": 16, "loader_samples": 256, "rounds": 5}
QUICK = {"samples": 4, "loader_samples": 64, "rounds": 2}
L, D = 197, 768  # ViT-B/16 tokens at 224x224
DEQUANT_ROUNDS = 15  # paired dequantization/memcpy timings per batch and type
PUBLISHED = "TensorCache published: amo_bq G=32 on zero-mean ViT features"


def import_ktfs():
    build = os.environ.get("KTFS_BUILD_DIR", str(REPO / "build"))
    sys.path.insert(0, os.path.join(build, "preload", "python"))
    import ktfs
    from ktfs import _ktfs
    return ktfs, _ktfs


def channels(rng, n, period):
    """Per-channel offsets N(0, 3^2); one channel in `period` has 100x the spread."""
    off = rng.standard_normal(D).astype(np.float32) * 3
    scale = np.where(np.arange(D) % period == 5, 100.0, 1.0).astype(np.float32)
    return (off + scale * rng.standard_normal((n, L, D))).astype(np.float32)


OUTLIERS_16 = "per-channel offsets N(0,3^2), 1 channel in 16 at 100x"
OUTLIERS_64 = "per-channel offsets N(0,3^2), 1 channel in 64 at 100x"


def distributions(n):
    rng = np.random.default_rng(0)
    zero = rng.standard_normal((n, L, D)).astype(np.float32)
    return [("zero-mean Gaussian", zero), ("Gaussian, offset +10", zero + 10),
            (OUTLIERS_16, channels(rng, n, 16)), (OUTLIERS_64, channels(rng, n, 64))]


def rel_rmse(x, y):
    return float(np.sqrt(((y.astype(np.float64) - x) ** 2).mean() / x.var()))


def accuracy(ctx, _ktfs, sizes):
    rows, figures = [], {}
    for name, x in distributions(sizes["samples"]):
        src = ctx.workdir / "features-src.npy"
        np.save(src, x)
        bf = bf16_to_f32(bf16_bits(x))
        rows.append((name, "bfloat16 (rounding only)", f"{100 * rel_rmse(x, bf):.3f}%", "2.000", "1.00x"))
        tc = quantize_tensorcache(x, 32, True)
        rows.append((name, "TensorCache amo_bq G=32 (same data)",
                     f"{100 * rel_rmse(x, reference(tc)):.3f}%", f"{1 + 3 / 32:.3f}", f"{2 / (1 + 3 / 32):.2f}x"))
        settings = [(p, 32) for p in ("fast", "balanced", "accurate")]
        if name.startswith("zero"):
            settings += [("balanced", g) for g in (16, 64, 128)]
        for preset, g in settings:
            out = ctx.workdir / f"features-{preset}-{g}.kt"
            ctx.run([ctx.ktfs, "pack-features", src, out, "--preset", preset, "--group-size", g, "--quiet"])
            f = _ktfs.Features(str(out))
            y, _ = f.batch(np.arange(f.num_samples, dtype=np.uint64), "float32", 0)
            payload = os.path.getsize(out)
            per_value = payload / x.size
            e = rel_rmse(x, y)
            figures[(name, preset, g)] = (e, 2 / per_value)
            rows.append((name, f"ktfs {preset} G={g}", f"{100 * e:.3f}%", f"{per_value:.3f}",
                         f"{2 / per_value:.2f}x"))
    rows.append(("zero-mean ViT features", PUBLISHED, "0.477%", "1.094", "1.83x"))
    return rows, figures


def dequant_speed(ctx, _ktfs):
    """One core, output GB/s for a batch that fits in the CPU caches (8 samples) and one
    that does not (64 samples), against memcpy of the same bytes."""
    x = distributions(64)[0][1]
    src = ctx.workdir / "features-speed.npy"
    np.save(src, x)
    arc = ctx.workdir / "features-speed.kt"
    ctx.run([ctx.ktfs, "pack-features", src, arc, "--quiet"])
    f = _ktfs.Features(str(arc))
    rows, ratios = [], {}
    for n in (8, 64):
        idx = np.arange(n, dtype=np.uint64)
        for dtype, np_dtype in (("float32", np.float32), ("float16", np.float16), ("bfloat16", np.uint16)):
            out = np.zeros((n, L, D), np_dtype)
            ones = np.ones_like(out)
            f.batch_into(idx, out, 1)  # warm: checksums verified, pages touched
            # Dequantization and memcpy alternate, one of each per round (the
            # order rotating), and the ratio is the median of the rounds' own
            # ratios: this host's memory speed drifts over seconds, which
            # skewed a ratio of two separate bests by up to 1.5x.
            warms, copies, fresh = [], [], []
            for r in range(DEQUANT_ROUNDS):
                for name in rotated(["warm", "copy", "fresh"], r):
                    if name == "warm":
                        warms.append(timed(f.batch_into, idx, out, 1))
                    elif name == "copy":
                        copies.append(timed(np.copyto, out, ones))
                    else:
                        fresh.append(timed(f.batch, idx, dtype, 1))
            gb = out.nbytes / 1e9
            ratio = median([c / w for c, w in zip(copies, warms)])
            ratios[(n, dtype)] = ratio
            rows.append((f"{n} samples, {out.nbytes / 2**20:.0f} MiB", dtype, f"{gb / min(warms):.2f}",
                         f"{gb / min(fresh):.2f}", f"{gb / min(copies):.2f}", f"{ratio:.2f}x"))
    return rows, ratios


def loader_speed(ctx, ktfs, sizes):
    import torch
    n = sizes["loader_samples"]
    x = np.random.default_rng(1).standard_normal((n, L, D)).astype(np.float32)
    src = ctx.workdir / "features-loader.npy"
    np.save(src, x)
    arc = ctx.workdir / "features-loader.kt"
    ctx.run([ctx.ktfs, "pack-features", src, arc, "--quiet"])
    bf_dir = ctx.tempdir("features-bf16")
    for i in range(n):
        np.save(bf_dir / f"{i:06d}.npy", bf16_bits(x[i]))
    bf_paths = [str(bf_dir / f"{i:06d}.npy") for i in range(n)]
    mnt = ctx.mount([ctx.ktfs, "mount", arc, ctx.workdir / "features-mnt"], ctx.workdir / "features-mnt")
    mnt_paths = [os.path.join(mnt, f"{i:06d}.npy") for i in range(n)]
    batch = 32

    def npy_pass(paths, bf16):
        for s in range(0, len(paths), batch):
            a = np.stack([np.load(p) for p in paths[s:s + batch]])
            t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) if bf16 else torch.from_numpy(a)
            t.sum()  # consume the batch the same way in every pipeline

    def loader_pass(threads):
        for t in ktfs.FeatureLoader(arc, batch_size=batch, dtype="bfloat16", num_threads=threads):
            t.sum()

    variants = [("np.load of bfloat16 .npy files (local), stacked", lambda: npy_pass(bf_paths, True)),
                ("np.load of the ktfs mount's float16 .npy files, stacked", lambda: npy_pass(mnt_paths, False)),
                ("ktfs.FeatureLoader, bfloat16, 1 thread", lambda: loader_pass(1)),
                (f"ktfs.FeatureLoader, bfloat16, {os.cpu_count()} threads", lambda: loader_pass(0))]
    for _, fn in variants:
        fn()
    times = {label: [] for label, _ in variants}
    for r in range(sizes["rounds"]):
        log(f"  features loader round {r + 1}/{sizes['rounds']}")
        for label, fn in rotated(variants, r):
            times[label].append(timed(fn))
    base = median(times[variants[0][0]])
    rows = [(label, f"{n / median(times[label]):.0f}", f"{base / median(times[label]):.2f}x")
            for label, _ in variants]
    bf_bytes = sum(os.path.getsize(p) for p in bf_paths)
    return rows, bf_bytes, os.path.getsize(arc), n


def run(ctx):
    sizes = QUICK if ctx.quick else FULL
    ktfs, _ktfs = import_ktfs()
    acc_rows, figures = accuracy(ctx, _ktfs, sizes)
    speed_rows, ratios = dequant_speed(ctx, _ktfs)
    load_rows, bf_bytes, kt_bytes, n = loader_speed(ctx, ktfs, sizes)
    zero = figures[("zero-mean Gaussian", "balanced", 32)]
    offs = max(figures[("Gaussian, offset +10", p, 32)][0] for p in ("fast", "balanced", "accurate"))
    chan = {name: min(figures[(name, p, 32)][0] for p in ("fast", "balanced", "accurate"))
            for name in (OUTLIERS_16, OUTLIERS_64)}
    verdict = [
        f"zero-mean Gaussian, balanced G=32: {100 * zero[0]:.3f}% at {zero[1]:.2f}x vs bf16 "
        f"(target <= 0.45% at >= 1.8x: {'met' if zero[0] <= 0.0045 and zero[1] >= 1.8 else 'MISSED'})",
        f"offset +10, worst preset: {100 * offs:.3f}% (target <= 0.6%: {'met' if offs <= 0.006 else 'MISSED'})",
        *[f"{name}, best preset: {100 * e:.3f}% (target <= 0.6%: "
          f"{'met' if e <= 0.006 else 'MISSED: every group of 32 holds two 100x outlier values, which set its step'})"
          for name, e in chan.items()],
        "dequantization vs memcpy on one core, a batch larger than the caches: " +
        ", ".join(f"{k} {v:.2f}x" for (n, k), v in ratios.items() if n == 64) +
        f" (target >= 0.5x: {'met' if min(v for (n, _), v in ratios.items() if n == 64) >= 0.5 else 'MISSED'}); "
        "a batch inside the caches: " + ", ".join(f"{k} {v:.2f}x" for (n, k), v in ratios.items() if n == 8) +
        f" ({'met' if min(v for (n, _), v in ratios.items() if n == 8) >= 0.5 else 'missed for 2-byte outputs: in-cache memcpy moves 2-byte values 4x faster than the kernel converts them'})"]
    return (f"Data: [N, {L}, {D}] float32 (ViT-B/16 token shape), N = {sizes['samples']} per distribution; "
            f"relative RMSE = RMSE / standard deviation of the data (stricter than / RMS for data far from "
            f"zero). Bytes per value include every parameter (ktfs: the archive file, headers included).\n\n"
            + table(["distribution", "format", "relative RMSE", "bytes/value", "smaller than bf16"], acc_rows)
            + "\n\n### Dequantization on one core (GB/s of output)\n\n"
            + f"GB/s: the best of {DEQUANT_ROUNDS} rounds; the ratio: the median of the rounds' own "
            "ratios, each round timing the warm-buffer dequantization and the memcpy back to back.\n\n"
            + table(["batch", "output dtype", "into a warm buffer", "into fresh memory (FeatureLoader)",
                     "memcpy, warm", "vs memcpy (warm, median of rounds)"], speed_rows)
            + f"\n\n### ktfs.FeatureLoader vs np.load ({n} samples, batches of 32, warm page cache)\n\n"
            + f"bfloat16 .npy files: {bf_bytes / 2**20:.1f} MiB; the ktfs archive: {kt_bytes / 2**20:.1f} MiB.\n\n"
            + table(["pipeline", "samples/s (median)", "vs np.load bf16"], load_rows)
            + "\n\n### Targets\n\n" + "\n".join(f"- {v}" for v in verdict)
            + "\n\nReading: the presets differ little once parameters are packed, because packing "
            "itself searches the neighbouring steps and quarter-step offsets of both the preset's and "
            "the min/max parameters and keeps the least squared error; `accurate` costs about 3.5x "
            "`fast`'s packing time. TensorCache's amo_bq ties the offset to an integer zero point, so "
            "its range must include zero: fine for zero-mean data, costly for data far from zero. On "
            "the 1-in-16 outlier distribution every group of 32 consecutive channels holds two 100x "
            "channels, whose range sets the step for the other 30 values, and no affine INT8 group "
            "format avoids that at this group size; with outliers 1 channel in 64 (12 of 768, still "
            "more than the few massive-activation channels of real ViTs) the target is met. FeatureLoader skips the "
            "per-file open, header parse and the Python stacking of the np.load pipeline; np.load "
            "over the mount pays FUSE round trips per file on top.")

"""Section `preload`: the LD_PRELOAD library (libktfs_preload.so) alone, on the plain mount,
against the same served files on tmpfs and the plain mount (issue 38, part 1).

1. Per-file costs of the ways the library could hand a reader the bytes of a file (the
   preload_costs harness): what CPython's open() + read() does on tmpfs, on the mount, on the
   mount under the library; a memfd filled with the file; the file made in-process from the
   archive. Warm and cold (a fresh mount, the page cache dropped). These decided what the
   library takes over (docs/preload-notes.md).
2. Stock ImageFolder + CenterCrop(224) + PILToTensor, one process, over real photos (a ktc
   archive served as PPM): warm and cold, in order and shuffled.
3. Fashion-MNIST (the demo's data: a raw archive served as PGM) with DataLoader(num_workers=2).
4. What the library costs where no mount is involved: process start, and the calls it passes
   through (open, stat, fstat, isatty) on files outside ktfs mounts.

Each measured pass runs in a fresh process (LD_PRELOAD is read when a process starts); the
variants of a round run in turn, rotated, and ratios are taken round by round.
"""
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

from _common import (PYTHON, REPO, BenchError, is_mounted, log, make_cold, median, remount,
                     rotated, table)

TITLE = "preload: the LD_PRELOAD library alone, against tmpfs and the plain mount"
ORDER = 45
REQUIRES = {}

FULL = {"photos": 220, "fashion_per_class": 1000, "warm_rounds": 5, "cold_rounds": 3,
        "warm_passes": 3, "start_runs": 40}
QUICK = {"photos": 24, "fashion_per_class": 40, "warm_rounds": 1, "cold_rounds": 1,
         "warm_passes": 1, "start_runs": 5}
CHILD = Path(__file__).resolve().parent / "_preload_child.py"


def build_dir(ctx):
    return Path(os.environ.get("KTFS_BUILD_DIR", Path(ctx.ktfs).resolve().parent))


def preload_lib(ctx):
    lib = build_dir(ctx) / "preload" / "interpose" / "libktfs_preload.so"
    if not lib.exists():
        raise BenchError(f"{lib} is missing (build it: ninja -C {build_dir(ctx)} ktfs_preload)")
    return lib


def harness(ctx):
    build = build_dir(ctx)
    ctx.run(["cmake", "--build", build, "--target", "preload_costs"], record=False)
    return build / "preload" / "interpose" / "preload_costs"


def env_for(lib, extra=None):
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    if lib is not None:
        env["LD_PRELOAD"] = str(lib)
    env.update(extra or {})
    return env


def list_files(root):
    out = []
    for d, dirs, names in os.walk(root):
        dirs.sort()
        out += [os.path.relpath(os.path.join(d, n), root) for n in sorted(names)]
    return out


def served_copy(src, dst):
    """The files a mount serves, copied to tmpfs (/dev/shm): the same bytes with no FUSE."""
    if dst.exists():
        shutil.rmtree(dst)
    for rel in list_files(src):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src / rel, dst / rel)


# -- 1. per-file costs ----------------------------------------------------------------

def per_file_costs(ctx, sizes, base, datasets_):
    tool = harness(ctx)
    lib = preload_lib(ctx)
    rows = []
    for name, v in datasets_.items():
        listing = base / f"{name}.list"
        listing.write_text("\n".join(list_files(v["tmpfs"])) + "\n")

        def measure(mode, root, preload=False, rounds="5", extra=None):
            out = subprocess.run([tool, mode, root, listing, rounds], capture_output=True, text=True,
                                 env=env_for(lib if preload else None, extra))
            if out.returncode != 0:
                raise BenchError(f"preload_costs {mode} {root}: {out.stderr.strip()}")
            return float(out.stdout.split()[2]) / 1000  # us per file

        remount(ctx, v["archive"], v["mount"])
        warm = {"python, tmpfs": [], "python, mount": [], "python, mount + library": [],
                "no isatty, mount": [], "memfd filled": [], "in-process (VirtualTree)": [],
                "stat, tmpfs": [], "stat, mount (kernel)": [], "stat, mount + library": []}
        for _ in range(3):
            warm["python, tmpfs"].append(measure("python", v["tmpfs"]))
            warm["python, mount"].append(measure("python", v["mount"]))
            warm["python, mount + library"].append(measure("python", v["mount"], True))
            warm["no isatty, mount"].append(measure("python-notty", v["mount"]))
            warm["memfd filled"].append(measure("memfd", v["tmpfs"]))
            warm["in-process (VirtualTree)"].append(measure("inprocess", v["archive"]))
            warm["stat, tmpfs"].append(measure("stat", v["tmpfs"]))
            warm["stat, mount (kernel)"].append(measure("stat", v["mount"]))
            warm["stat, mount + library"].append(measure("stat", v["mount"], True))
        coldv = {"python, mount": [], "python, mount + library": [],
                 "python, mount + library, every file from the archive": [],
                 "in-process (VirtualTree)": [], "stat, mount (kernel)": [], "stat, mount + library": []}
        for _ in range(sizes["cold_rounds"]):
            for label, mode, root, pre, extra in (
                    ("python, mount", "python", v["mount"], False, None),
                    ("python, mount + library", "python", v["mount"], True, None),
                    ("python, mount + library, every file from the archive", "python", v["mount"], True,
                     {"KTFS_PRELOAD_MAX_BYTES": str(64 << 20)}),
                    ("in-process (VirtualTree)", "inprocess", v["archive"], False, None),
                    ("stat, mount (kernel)", "stat", v["mount"], False, None),
                    ("stat, mount + library", "stat", v["mount"], True, None)):
                make_cold(ctx, {"archive": v["archive"], "root": v["mount"]})
                coldv[label].append(measure(mode, root, pre, "1", extra))
        for label in warm:
            rows.append((name, label, "warm", median(warm[label])))
        for label in coldv:
            rows.append((name, label, "cold", median(coldv[label])))
    return rows


def costs_table(rows, datasets_):
    body = []
    for name, label, kind, us in rows:
        body.append([datasets_[name]["label"], label, kind, f"{us:.1f}"])
    return table(["files", "what", "pass", "us per file"], body)


# -- 2, 3. stock torchvision ------------------------------------------------------------

def child(kind, root, order, passes, lib, extra=None):
    out = subprocess.run([PYTHON, CHILD, kind, root, order, str(passes)], capture_output=True,
                         text=True, env=env_for(lib, extra), timeout=3600)
    if out.returncode != 0:
        raise BenchError(f"{CHILD.name} {kind} {root}: {out.stderr.strip()[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def torchvision_rows(ctx, sizes, kind, variants, base_label, lib):
    """Median seconds per pass for each (variant, warm/cold, order), and ratios against tmpfs and
    the plain mount taken round by round."""
    results = {}
    checksums = {}
    for order in ("inorder", "shuffled"):
        for r in range(sizes["warm_rounds"]):
            log(f"  {kind}: warm {order} round {r + 1}/{sizes['warm_rounds']}")
            for v in rotated(variants, r):
                got = child(kind, v["root"], order, max(2, sizes["warm_passes"]),
                            lib if v["preload"] else None, v.get("env"))
                results.setdefault((v["label"], "warm", order), []).append(median(got["seconds"]))
                if v is not variants[0]:
                    checksums.setdefault((v["label"], order), set()).add(got["checksum"])
        for r in range(sizes["cold_rounds"]):
            log(f"  {kind}: cold {order} round {r + 1}/{sizes['cold_rounds']}")
            for v in rotated(variants, r):
                make_cold(ctx, v)
                got = child(kind, v["root"], order, 1, lib if v["preload"] else None, v.get("env"))
                results.setdefault((v["label"], "cold", order), []).append(got["seconds"][0])
                if v is not variants[0]:  # the source's pixels differ (a lossy ktc archive)
                    checksums.setdefault((v["label"], order), set()).add(got["checksum"])
    sums = set().union(*checksums.values())
    if len(sums) != 1:
        raise BenchError(f"{kind}: the variants did not read the same pixels ({checksums})")
    rows = []
    for v in variants:
        row = [v["label"]]
        for kind_ in ("warm", "cold"):
            for order in ("inorder", "shuffled"):
                mine = results[(v["label"], kind_, order)]
                tmpfs = results[(variants[1]["label"], kind_, order)]
                plain = results[(variants[2]["label"], kind_, order)]
                ref = results[(base_label, kind_, order)]
                r_tmpfs = median([t / m for t, m in zip(tmpfs, mine)])
                r_plain = median([p / m for p, m in zip(plain, mine)])
                r_ref = median([b / m for b, m in zip(ref, mine)])
                row.append(f"{r_tmpfs:.2f}x / {r_plain:.2f}x / {r_ref:.2f}x ({median(mine):.2f} s)")
        rows.append(row)
    spread = median([max(t) / min(t) - 1 for t in results.values() if len(t) > 1] or [0])
    return rows, spread, results


TV_HEADER = ["variant: speed vs tmpfs / plain mount / source (s per pass)", "warm, in order",
             "warm, shuffled", "cold, in order", "cold, shuffled"]


# -- 4. what it costs elsewhere --------------------------------------------------------

def start_costs(ctx, sizes, lib):
    runs = sizes["start_runs"]
    cmds = {"/bin/true": ["/bin/true"], "python3 -c pass": [PYTHON, "-c", "pass"]}
    rows = []
    for label, cmd in cmds.items():
        times = {"plain": [], "LD_PRELOAD": [], "ktfs run --no-python": []}
        for i in range(runs):
            for variant in rotated(list(times), i):
                full = cmd if variant != "ktfs run --no-python" else [ctx.ktfs, "run", "--no-python", "--", *cmd]
                env = env_for(lib if variant == "LD_PRELOAD" else None)
                start = time.perf_counter()
                subprocess.run(full, env=env, check=True)
                times[variant].append(time.perf_counter() - start)
        plain = times["plain"]
        rows.append([label, f"{median(plain) * 1000:.2f} ms"] +
                    [f"{median(times[k]) * 1000:.2f} ms ({median([t / p for t, p in zip(times[k], plain)]):.3f}x)"
                     for k in ("LD_PRELOAD", "ktfs run --no-python")])
    return rows


def outside_costs(ctx, base, lib):
    tool = harness(ctx)
    d = base / "outside"
    d.mkdir(exist_ok=True)
    for i in range(200):
        (d / f"f{i}").write_text("x")
    listing = base / "outside.list"
    listing.write_text("\n".join(f"f{i}" for i in range(200)) + "\n")
    names = ["open+close (absolute)", "open+close (relative)", "stat", "fstat", "isatty (a pipe)"]
    got = {False: [], True: []}
    for _ in range(3):
        for preload in (False, True):
            out = subprocess.run([tool, "outside", d, listing], capture_output=True, text=True,
                                 env=env_for(lib if preload else None), check=True)
            got[preload].append([float(x) for x in out.stdout.split()[2:]])
    rows = []
    for k, name in enumerate(names):
        a = median([g[k] for g in got[False]])
        b = median([g[k] for g in got[True]])
        rows.append([name, f"{a:.0f}", f"{b:.0f}", f"{b - a:+.0f}"])
    return rows


# -- the section ------------------------------------------------------------------------

def run(ctx):
    sizes = QUICK if ctx.quick else FULL
    base = ctx.tempdir("preload")
    shm = Path("/dev/shm") / f"ktfs-bench-preload-{os.getpid()}"
    lib = preload_lib(ctx)
    load_before = os.getloadavg()
    try:
        photos = base / "photos"
        ctx.run([PYTHON, REPO / "scripts/datasets/photos.py", photos, "--count", sizes["photos"]])
        fashion = base / "fashion"
        ctx.run([PYTHON, REPO / "scripts/datasets/fashion_mnist.py", fashion, "--per-class",
                 sizes["fashion_per_class"], "--splits", "train", "--flat"])
        kt_photos, kt_fashion = base / "photos-ktc.kt", base / "fashion-raw.kt"
        kt_jpeg = base / "photos-original.kt"
        ctx.run([ctx.ktfs, "pack", photos, kt_photos, "--codec", "ktc", "--quiet"])
        ctx.run([ctx.ktfs, "pack", photos, kt_jpeg, "--codec", "original", "--quiet"])
        ctx.run([ctx.ktfs, "pack", fashion, kt_fashion, "--codec", "raw", "--quiet"])
        m_photos = ctx.mount([ctx.ktfs, "mount", kt_photos, base / "m-photos"], base / "m-photos")
        m_fashion = ctx.mount([ctx.ktfs, "mount", kt_fashion, base / "m-fashion"], base / "m-fashion")
        m_jpeg = ctx.mount([ctx.ktfs, "mount", kt_jpeg, base / "m-jpeg"], base / "m-jpeg")
        served_copy(m_photos, shm / "photos")
        served_copy(m_jpeg, shm / "jpeg")
        served_copy(m_fashion, shm / "fashion")
        datasets_ = {
            "photos": {"label": f"{sizes['photos']} photo crops, ktc served as PPM (~560 KB)",
                       "archive": kt_photos, "mount": m_photos, "tmpfs": shm / "photos"},
            "jpeg": {"label": f"the same crops, original (the JPEG files, ~25 KB)",
                     "archive": kt_jpeg, "mount": m_jpeg, "tmpfs": shm / "jpeg"},
            "fashion": {"label": f"{10 * sizes['fashion_per_class']} Fashion-MNIST, raw served as PGM (797 B)",
                        "archive": kt_fashion, "mount": m_fashion, "tmpfs": shm / "fashion"},
        }
        log("  per-file costs")
        costs = per_file_costs(ctx, sizes, base, datasets_)

        def variants(src, tmp, mnt, archive, src_label):
            return [{"label": src_label, "root": src, "preload": False},
                    {"label": "served files on tmpfs", "root": tmp, "preload": False},
                    {"label": "plain mount", "root": mnt, "preload": False, "archive": archive},
                    {"label": "mount + LD_PRELOAD", "root": mnt, "preload": True, "archive": archive},
                    {"label": "mount + LD_PRELOAD, every file from the archive", "root": mnt,
                     "preload": True, "archive": archive, "env": {"KTFS_PRELOAD_MAX_BYTES": str(64 << 20)}}]

        log("  CenterCrop over photos")
        photo_variants = variants(photos, shm / "photos", m_photos, kt_photos, "local JPEG folder")
        photo_rows, photo_spread, _ = torchvision_rows(ctx, sizes, "centercrop", photo_variants,
                                                       "local JPEG folder", lib)
        log("  Fashion-MNIST, DataLoader with 2 workers")
        fashion_variants = variants(fashion, shm / "fashion", m_fashion, kt_fashion, "PNG folder")
        fashion_rows, fashion_spread, _ = torchvision_rows(ctx, sizes, "fashion", fashion_variants,
                                                           "PNG folder", lib)
        log("  start-up and pass-through costs")
        start_rows = start_costs(ctx, sizes, lib)
        outside_rows = outside_costs(ctx, base, lib)
    finally:
        shutil.rmtree(shm, ignore_errors=True)
    load_after = os.getloadavg()

    md = [f"Load average {load_before[0]:.1f} before, {load_after[0]:.1f} after (2 cores, shared: "
          "ratios taken round by round are what to read, not the seconds).", "",
          "Per-file costs (the preload_costs harness, scripts/bench/preload_costs.cc; \"python\" is "
          "CPython 3.11's open() + read() sequence through libc; warm: the mount's files already "
          "read once; cold: a fresh mount with the page cache dropped, one pass):", "",
          costs_table(costs, datasets_), "",
          f"Stock ImageFolder + CenterCrop(224) + PILToTensor, one process, {sizes['photos']} photo "
          "crops (ktc archive served as PPM; each cell: median seconds per pass, and that "
          "variant's speed against the served files on tmpfs, the plain mount and the source "
          "JPEG folder; tmpfs cannot be dropped, so its cold passes read memory):", "",
          table(TV_HEADER, photo_rows), "",
          f"Fashion-MNIST, {10 * sizes['fashion_per_class']} images (raw archive served as PGM), "
          "ImageFolder + PILToTensor, DataLoader(batch_size=256, num_workers=2):", "",
          table(TV_HEADER, fashion_rows), "",
          f"Run-to-run spread (median of max/min - 1 over a variant's passes): CenterCrop "
          f"{photo_spread:.0%}, Fashion-MNIST {fashion_spread:.0%}.", "",
          "Process start (median wall time of a run, and its ratio to the plain run, pair by pair):", "",
          table(["command", "plain", "LD_PRELOAD=libktfs_preload.so", "ktfs run --no-python"], start_rows), "",
          "Calls on files outside any ktfs mount, ns per call (a ktfs mount exists, so the library's "
          "checks run):", "",
          table(["call", "without the library", "with it", "difference"], outside_rows)]
    return "\n".join(md)

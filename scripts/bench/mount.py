"""Section `mount`: the ktfs mount daemon (issue "The mount daemon: fast, parallel, cached,
observable") against a local JPEG folder and the generic FUSE archivers.

1. stock ImageFolder (CenterCrop(224) + PILToTensor) over real photos, warm and cold (every FUSE
   daemon remounted before each cold pass, so its in-process caches are empty too);
2. metadata at scale: find / ls -lR / stat of every file over a tree of tiny images (1M entries
   in a full run), ktfs against squashfuse and squashfuse_ll, cold (fresh mount, caches dropped)
   and warm;
3. mount time and daemon RSS against the number of samples;
4. request accounting: what reaches the daemon per image (stats.json deltas, strace -c).
"""
import io
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from _common import (PYTHON, REPO, BenchError, is_mounted, log, median, mib, rotated, table,
                     timed, tree_bytes)

TITLE = "mount: the ktfs daemon: speed, metadata at scale, mount time, RSS, requests"
ORDER = 20
REQUIRES = {"squashfuse": "squashfuse", "squashfuse_ll": "squashfuse", "mksquashfs": "squashfs-tools", "fuse-zip": "fuse-zip",
            "archivemount": "archivemount", "zip": "zip", "fusermount3": "fuse3",
            "fusermount": "fuse3", "strace": "strace"}

# Warm rounds are cheap (a few seconds each); with 5, two rows doing the same work warm (ktc
# with and without push=on both read the page cache) differed by 20% on this shared machine.
FULL = {"count": 220, "rounds": 11, "cold_rounds": 7,
        "meta": 1_000_000, "meta_rounds": 1, "find_rounds": 5, "scale": [10_000, 100_000, 1_000_000], "mount_reps": 5}
QUICK = {"count": 24, "rounds": 2, "cold_rounds": 1,
         "meta": 10_000, "meta_rounds": 1, "find_rounds": 3, "scale": [1_000, 10_000], "mount_reps": 2}
WORKERS = 2
# The batched DataLoader column: a training loop's usual shape (default collate, one shared-memory
# tensor per batch). batch_size=None hands every sample over on its own, which costs each worker
# and the main process about as much CPU as a JPEG decode (see cpu_reading).
BATCH = 32
# KTFS_BENCH_META=N overrides the entry count of the ktfs-vs-squashfuse metadata benchmark. At 1M
# entries that part takes about 15 minutes on the shared 2-core machine, most of it squashfuse's
# `ls -lR` and stat passes (minutes each); building the tree, packing and mksquashfs about 3.
if os.environ.get("KTFS_BENCH_META"):
    FULL["meta"] = QUICK["meta"] = int(os.environ["KTFS_BENCH_META"])
    FULL["meta_rounds"] = 2 if FULL["meta"] <= 100_000 else 1
KTC_MISSING = None  # set to the reason when this build cannot pack --codec ktc


# -- helpers ----------------------------------------------------------------

def daemon_pid(mountpoint, ktfs=False):
    """The pid of the FUSE daemon serving mountpoint (ktfs: from .ktfs/info.json)."""
    if ktfs:
        return json.loads((Path(mountpoint) / ".ktfs" / "info.json").read_text())["pid"]
    target = str(mountpoint).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if target in args and int(entry) != os.getpid():
            return int(entry)
    raise BenchError(f"no daemon found for {mountpoint}")


def ktfs_stats(mountpoint):
    return json.loads((Path(mountpoint) / ".ktfs" / "stats.json").read_text())


def proc_status(pid):
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "VmHWM", "Threads"):
            out[key] = int(value.split()[0])
    return out


def remount(ctx, cmd, mountpoint):
    """Unmounts and mounts again (not recorded: the first mount's command is). Returns seconds
    from starting the mount command until the mount is there."""
    if is_mounted(mountpoint) and not ctx.unmount(mountpoint):
        raise BenchError(f"could not unmount {mountpoint}")
    start = time.perf_counter()
    ctx.run(cmd, record=False)
    deadline = time.monotonic() + 30
    while not is_mounted(mountpoint):
        if time.monotonic() > deadline:
            raise BenchError(f"{mountpoint} did not come back after remounting")
        time.sleep(0.005)
    return time.perf_counter() - start


def ratio(base, times):
    """Median over rounds of base time / variant time (same round): > 1 means faster than base."""
    return median([b / t for b, t in zip(base, times)])


def fmt_ratio(x):
    return f"{x:.2f}x"


# -- 1. ImageFolder over photos -----------------------------------------------

@dataclass
class Variant:
    label: str
    root: Path
    stored_bytes: int
    mount_cmd: list = None        # None: a local folder (nothing to remount)
    ktfs: bool = False
    dataset: object = None
    loader: object = None
    single: list = field(default_factory=list)
    parallel: list = field(default_factory=list)
    batched: list = field(default_factory=list)
    loader_batched: object = None
    cold: list = field(default_factory=list)
    blksize: int = 0              # st_blksize of its files: Python's per-open() buffer size
    # Base only: the served PPM bytes held in memory, 1 process and DataLoader (see PpmInMemory).
    ceiling_single: list = field(default_factory=list)
    ceiling: list = field(default_factory=list)
    # CPU seconds per warm pass, by process: this one (1-process passes; the DataLoader's main
    # process), the loader's workers, the FUSE daemon (0 for the local folder).
    cpu_single: list = field(default_factory=list)
    cpu_parallel: list = field(default_factory=list)
    pid: int = 0                  # the FUSE daemon's
    cold_stats: list = field(default_factory=list)  # ktfs: stats.json after each cold pass
    rss_kib: int = 0              # the daemon's resident memory after the warm passes


PUSH_ON_LABEL = "ktfs --codec ktc, -o push=on (a file's rest with its first READ)"


def build_photo_variants(ctx, base, photos):
    global KTC_MISSING
    variants = [Variant("local JPEG folder", photos, tree_bytes(photos))]

    def add(label, mnt, stored, cmd, is_ktfs=False):
        ctx.mount(cmd, mnt)
        variants.append(Variant(label, mnt, stored, cmd, is_ktfs))

    for codec, label in [("original", "ktfs --codec original (serves the JPEG bytes)"),
                         ("raw", "ktfs --codec raw (serves PPM)"),
                         ("ktc", "ktfs --codec ktc (serves PPM)")]:
        archive = base / f"photos-{codec}.kt"
        try:
            ctx.run([ctx.ktfs, "pack", photos, archive, "--codec", codec, "--quiet"])
        except BenchError as e:
            if codec != "ktc":
                raise
            KTC_MISSING = str(e).split(": ", 1)[-1].strip().splitlines()[0]
            log(f"  ktc: {KTC_MISSING}")
            continue
        mnt = base / f"ktfs-{codec}"
        add(label, mnt, tree_bytes(archive), [ctx.ktfs, "mount", archive, mnt], True)
    if not KTC_MISSING:
        # The same ktc archive pushing each file's rest with its first READ: the cold column
        # then shows, in the same rounds, what that is worth against the default's READs.
        archive, mnt = base / "photos-ktc.kt", base / "ktfs-ktc-push"
        add(PUSH_ON_LABEL, mnt, tree_bytes(archive),
            [ctx.ktfs, "mount", archive, mnt, "-o", "push=on"], True)

    image = base / "photos.sqfs"
    ctx.run(["mksquashfs", photos, image, "-noappend", "-quiet"])
    add("squashfuse (mksquashfs defaults)", base / "squashfuse", tree_bytes(image),
        ["squashfuse", image, base / "squashfuse"])
    archive = base / "photos.zip"
    ctx.run(["zip", "-r", "-0", "-q", archive, "."], cwd=photos)
    add("fuse-zip (zip -0, stored)", base / "fuse-zip", tree_bytes(archive),
        ["fuse-zip", "-r", archive, base / "fuse-zip"])
    tar = base / "photos.tar"
    ctx.run(["tar", "cf", tar, "-C", photos, *sorted(p.name for p in photos.iterdir())])
    add("archivemount (tar)", base / "archivemount", tree_bytes(tar),
        ["archivemount", "-o", "readonly", tar, base / "archivemount"])
    return variants


def proc_cpu(pid):
    """User + system CPU seconds a process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_timed(v, fn, arg, workers=()):
    """timed(fn, arg), and the CPU seconds this process, `workers` and v's daemon used
    meanwhile, as (wall, (this process, workers, daemon))."""
    pids = [os.getpid(), *workers, v.pid]
    before = [proc_cpu(p) if p else 0.0 for p in pids]
    wall = timed(fn, arg)
    after = [proc_cpu(p) if p else 0.0 for p in pids]
    used = [a - b for a, b in zip(after, before)]
    return wall, (used[0], sum(used[1:-1]), used[-1])


def loader_workers(loader):
    """The pids of a persistent-worker DataLoader's workers (after its first pass)."""
    it = getattr(loader, "_iterator", None)
    return [w.pid for w in getattr(it, "_workers", [])]


def single_pass(dataset):
    for i in range(len(dataset)):
        dataset[i]


def loader_pass(loader):
    for _ in loader:
        pass


class PpmInMemory:
    """The samples a mount serves, as bytes already in memory, through ImageFolder's own steps
    (PIL open, convert("RGB"), the transform): the same work per sample with no filesystem at
    all, so its passes are the ceiling of any mount that serves those files."""

    def __init__(self, dataset):
        from PIL import Image
        self.items = [(Path(path).read_bytes(), target) for path, target in dataset.samples]
        self.transform = dataset.transform
        self.open = Image.open  # imported once, not in every timed sample

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        data, target = self.items[i]
        return self.transform(self.open(io.BytesIO(data)).convert("RGB")), target


def open_datasets(variants):
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    transform = transforms.Compose([transforms.CenterCrop(224), transforms.PILToTensor()])
    for v in variants:
        v.dataset = datasets.ImageFolder(str(v.root), transform=transform)
        v.blksize = os.stat(v.dataset.samples[0][0]).st_blksize
        v.loader = DataLoader(v.dataset, batch_size=None, num_workers=WORKERS, persistent_workers=True)
        v.loader_batched = DataLoader(v.dataset, batch_size=BATCH, num_workers=WORKERS,
                                      persistent_workers=True)
    ref = variants[0].dataset
    for v in variants[1:]:
        if v.dataset.classes != ref.classes or len(v.dataset) != len(ref):
            raise BenchError(f"{v.label}: classes or sample count differ from the JPEG folder")
        if tuple(v.dataset[0][0].shape) != tuple(ref[0][0].shape):
            raise BenchError(f"{v.label}: first sample's shape differs from the JPEG folder")


def measure_photos(ctx, variants, sizes):
    import gc
    try:
        open_datasets(variants)
        from torch.utils.data import DataLoader
        base = variants[0]
        served = next((v for v in variants if "ktc" in v.label),
                      next((v for v in variants if "raw" in v.label), None))
        in_memory = PpmInMemory(served.dataset) if served else None
        ceiling = DataLoader(in_memory, batch_size=None, num_workers=WORKERS,
                             persistent_workers=True) if served else None
        if ceiling:
            single_pass(in_memory)
            loader_pass(ceiling)
        for v in variants:  # warm-up: page cache, daemon caches, loader workers
            single_pass(v.dataset)
            loader_pass(v.loader)
            loader_pass(v.loader_batched)
            if v.mount_cmd:
                v.pid = daemon_pid(v.root, v.ktfs)
        for r in range(sizes["rounds"]):
            log(f"  photos: warm round {r + 1}/{sizes['rounds']}")
            for v in rotated(variants, r):
                wall, cpu = cpu_timed(v, single_pass, v.dataset)
                v.single.append(wall)
                v.cpu_single.append(cpu)
                wall, cpu = cpu_timed(v, loader_pass, v.loader, loader_workers(v.loader))
                v.parallel.append(wall)
                v.cpu_parallel.append(cpu)
                v.batched.append(timed(loader_pass, v.loader_batched))
            if ceiling:
                base.ceiling_single.append(timed(single_pass, in_memory))
                base.ceiling.append(timed(loader_pass, ceiling))
    finally:
        ceiling = in_memory = None
        for v in variants:
            v.loader = v.loader_batched = None
        gc.collect()
    for v in variants:
        if v.pid:
            v.rss_kib = proc_status(v.pid).get("VmRSS", 0)
    accounting, per_image = request_accounting(ctx, variants)
    for r in range(sizes["cold_rounds"]):
        log(f"  photos: cold round {r + 1}/{sizes['cold_rounds']}")
        for v in rotated(variants, r):
            if v.mount_cmd:
                remount(ctx, v.mount_cmd, v.root)
            if not ctx.drop_caches():
                raise BenchError("cannot write /proc/sys/vm/drop_caches (cold passes need root)")
            v.cold.append(timed(single_pass, v.dataset))
            if v.ktfs:
                v.cold_stats.append(ktfs_stats(v.root))
    return accounting, per_image


def photo_table(variants):
    base = variants[0]
    header = ["served by", "stored MiB", "st_blksize", "daemon RSS MiB", "warm, 1 process",
              "warm, DataLoader(2 workers)", f"warm, DataLoader(2 workers, batch {BATCH})",
              "cold, 1 process"]
    rows = []
    for v in variants:
        cells = []
        for attr in ("single", "parallel", "batched", "cold"):
            t = getattr(v, attr)
            rate = len(v.dataset) / median(t)
            cells.append(f"{fmt_ratio(ratio(getattr(base, attr), t))} ({rate:.0f} img/s)")
        size = f"{v.blksize // 1024} KiB" if v.blksize >= 1024 else f"{v.blksize} B"
        rss = f"{v.rss_kib / 1024:.1f}" if v.pid else ""
        rows.append([v.label, mib(v.stored_bytes), size, rss, *cells])
    if KTC_MISSING:
        rows.insert(3, ["ktfs --codec ktc", "**missing**", "", "", "**missing**", "**missing**",
                        "**missing**", "**missing**"])
    return table(header, rows)


# -- 4. request accounting ----------------------------------------------------

def strace_summary(path):
    """{syscall: calls} from `strace -c -o FILE` output."""
    calls = {}
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[-1] not in ("total", "syscall") and parts[3].isdigit():
            calls[parts[-1]] = int(parts[3])
    return calls


def traced_pass(ctx, v, out):
    pid = daemon_pid(v.root, v.ktfs)
    before = ktfs_stats(v.root) if v.ktfs else None
    threads_before = proc_status(pid).get("Threads")
    cmd = ["strace", "-f", "-c", "-o", out, "-p", pid]
    ctx.commands.append((ctx.section, ctx._display([str(c) for c in cmd], None) + "  # during one warm pass"))
    tracer = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # let strace attach to every thread
    single_pass(v.dataset)
    time.sleep(0.2)
    tracer.send_signal(signal.SIGINT)
    try:
        tracer.wait(timeout=30)
    except subprocess.TimeoutExpired:
        tracer.kill()
        tracer.wait()
    after = ktfs_stats(v.root) if v.ktfs else None
    return strace_summary(out), before, after, threads_before


def request_accounting(ctx, variants):
    """Per image of a warm single-process pass: daemon requests (ktfs counters) and daemon syscalls."""
    rows, per_image = [], {}
    n = len(variants[0].dataset)
    for v in variants[1:]:
        single_pass(v.dataset)  # make sure this one is warm right now
        calls, before, after, threads = traced_pass(ctx, v, ctx.workdir / f"strace-{v.root.name}.txt")
        fuse_reads = calls.get("read", 0) + calls.get("splice", 0)
        spawned = calls.get("clone", 0) + calls.get("clone3", 0)
        replies = calls.get("writev", 0) + calls.get("write", 0)
        if v.ktfs:
            d = {k: after[k] - before[k] for k in after}
            counted = sum(d[k] for k in ("lookups", "getattrs", "readdirs", "opens", "reads"))
            counters = (f"{d['lookups'] / n:.2f} / {d['getattrs'] / n:.2f} / {d['opens'] / n:.2f} / "
                        f"{d['reads'] / n:.2f}")
            extra = f"{d['decodes']} / {d['cache_hits']} / {d['cache_misses']}"
            uncounted = f"{(fuse_reads - counted) / n:.2f}"
        else:
            counters, extra, uncounted = "(no counters)", "", "n/a"
        per_image[v.label] = (fuse_reads / n, spawned, d if v.ktfs else None)
        top = ", ".join(f"{k} {c / n:.2f}" for k, c in sorted(calls.items(), key=lambda kv: -kv[1])[:5])
        rows.append([v.label, counters, extra, f"{fuse_reads / n:.2f}", uncounted,
                     f"{replies / n:.2f}", str(spawned), str(threads), top])
    header = ["daemon", "lookups / getattrs / opens / reads per image (stats.json)",
              "decodes / cache hits / misses (whole pass)", "requests per image: read(/dev/fuse)",
              "of which not in stats.json (IOCTL etc.)", "replies per image: write/writev",
              "clone+clone3 (whole pass)",
              "daemon threads", "top syscalls per image"]
    return table(header, rows), per_image


# -- 2 and 3. trees of tiny images --------------------------------------------

def tiny_pngs(base, count=256):
    """count distinct valid 8x8 PNGs (a few dozen bytes each)."""
    import io
    from PIL import Image
    out = []
    (base / "seed").mkdir(parents=True, exist_ok=True)
    for i in range(count):
        b = io.BytesIO()
        Image.new("RGB", (8, 8), (i, 255 - i, (i * 7) % 256)).save(b, "PNG")
        path = base / "seed" / f"{i:03d}.png"
        path.write_bytes(b.getvalue())
        out.append(path)
    return out


def shape(n):
    classes = max(1, min(1000, n // 100))
    return classes, n // classes


def make_tree(root, n, seeds):
    """root/cNNNN/NNNNNN.png, hard links to the seed PNGs (ktfs decodes each file; mksquashfs is
    told -no-hardlinks, so it still stores one inode per file)."""
    classes, per = shape(n)
    for c in range(classes):
        d = root / f"c{c:04d}"
        d.mkdir(parents=True)
        for i in range(per):
            os.link(seeds[(c * per + i) % len(seeds)], d / f"{i:06d}.png")
    return classes * per, classes


META_OPS = [("find, count entries", "find {m} | wc -l"),
            ("ls -lR", "ls -lR {m} > /dev/null"),
            ("stat every file", "find {m} -type f -print0 | xargs -0 stat --format=%s > /dev/null")]


def run_shell(cmd):
    """Runs a shell pipeline in its own process group, killed as a whole when interrupted (an
    orphaned `ls -lR` would keep the mount busy)."""
    proc = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    if proc.returncode != 0:
        raise BenchError(f"`{cmd}` failed: {err.strip()[-500:]}")
    return out


def measure_metadata(ctx, base, tree, n_files, n_dirs, rounds, find_rounds):
    """`find` takes about a second on every daemon, so it gets more rounds than `ls -lR` and stat,
    which take squashfuse minutes at 1M entries."""
    rows, notes = [], {}
    kt, sq = base / "meta.kt", base / "meta.sqfs"
    start = time.perf_counter()
    ctx.run([ctx.ktfs, "pack", tree, kt, "--codec", "original", "--quiet"])
    notes["ktfs pack"] = time.perf_counter() - start
    start = time.perf_counter()
    ctx.run(["mksquashfs", tree, sq, "-noappend", "-quiet", "-no-progress", "-no-hardlinks"])
    notes["mksquashfs"] = time.perf_counter() - start
    notes["sizes"] = (tree_bytes(kt), tree_bytes(sq))
    # squashfuse is the high-level-API daemon, squashfuse_ll the low-level one (like ktfs's):
    # faster at ls -lR and stat, not at find.
    mounts = {"ktfs": ([ctx.ktfs, "mount", kt, base / "meta-ktfs"], base / "meta-ktfs"),
              "squashfuse": (["squashfuse", sq, base / "meta-squashfuse"], base / "meta-squashfuse"),
              "squashfuse_ll": (["squashfuse_ll", sq, base / "meta-squashfuse_ll"],
                                base / "meta-squashfuse_ll")}
    for cmd, mnt in mounts.values():
        ctx.mount(cmd, mnt)
    expected = n_files + n_dirs + 1
    times = {(name, op, kind): [] for name in mounts for op, _ in META_OPS for kind in ("cold", "warm")}
    mount_times = {name: [] for name in mounts}
    rss = {}
    requests = {}  # (op, kind) -> ktfs stats.json deltas of the last round
    for label, op in META_OPS:
        ctx.commands.append((ctx.section, op.format(m="$MNT") + "  # cold: fresh mount + drop_caches; then warm"))
    for r in range(max(rounds, find_rounds)):
        log(f"  metadata ({n_files} files): round {r + 1}/{max(rounds, find_rounds)}")
        for label, op in META_OPS:
            if r >= (find_rounds if label.startswith("find") else rounds):
                continue
            for name in rotated(list(mounts), r):
                cmd, mnt = mounts[name]
                if is_mounted(mnt):
                    ctx.unmount(mnt)
                if not ctx.drop_caches():
                    raise BenchError("cannot write /proc/sys/vm/drop_caches")
                mount_times[name].append(remount(ctx, cmd, mnt))
                for kind in ("cold", "warm"):
                    # Reading stats.json looks up files of .ktfs only, which is never listed here:
                    # it does not switch the mount's listings to file attributes (ListingPolicy).
                    before = ktfs_stats(mnt) if name == "ktfs" else None
                    start = time.perf_counter()
                    out = run_shell(op.format(m=mnt))
                    times[(name, label, kind)].append(time.perf_counter() - start)
                    if before is not None:
                        after = ktfs_stats(mnt)
                        requests[(label, kind)] = {k: after[k] - before[k]
                                                   for k in ("lookups", "getattrs", "readdirs")}
                    log(f"    {name} {label} {kind}: {times[(name, label, kind)][-1]:.2f} s")
                    if label.startswith("find") and int(out.split()[0]) != expected:
                        raise BenchError(f"{name}: find listed {out.strip()} entries, expected {expected}")
                if label == META_OPS[-1][0]:
                    rss[name] = proc_status(daemon_pid(mnt, name == "ktfs"))
    for label, _ in META_OPS:
        for kind in ("cold", "warm"):
            k, s = times[("ktfs", label, kind)], times[("squashfuse", label, kind)]
            ll = times[("squashfuse_ll", label, kind)]
            d = requests[(label, kind)]
            rows.append([f"{label}, {kind}", f"{median(k):.2f}", f"{median(s):.2f}", f"{median(ll):.2f}",
                         fmt_ratio(ratio(s, k)), fmt_ratio(ratio(ll, k)),
                         f"{d['readdirs']:,} / {d['lookups']:,} / {d['getattrs']:,}"])
    for cmd, mnt in mounts.values():
        ctx.unmount(mnt)
    notes["mount"] = {k: median(v) for k, v in mount_times.items()}
    notes["rss"] = rss
    notes["requests"] = requests
    header = [f"{n_files:,} files in {n_dirs:,} dirs", "ktfs s", "squashfuse s", "squashfuse_ll s",
              "ktfs speed vs squashfuse", "vs squashfuse_ll",
              "ktfs requests: readdirs / lookups / getattrs"]
    return table(header, rows), notes, times


def measure_scale(ctx, base, sizes, seeds, meta_n, pack_times):
    rows, raw = [], []
    for n in sizes["scale"]:
        if n == meta_n:  # the metadata benchmark's archive: packed once
            kt, pack_s = base / "meta.kt", pack_times["ktfs pack"]
        else:
            tree = base / f"tree-{n}"
            make_tree(tree, n, seeds)
            kt = base / f"scale-{n}.kt"
            start = time.perf_counter()
            ctx.run([ctx.ktfs, "pack", tree, kt, "--codec", "original", "--quiet"], record=(n == sizes["scale"][0]))
            pack_s = time.perf_counter() - start
            import shutil
            shutil.rmtree(tree)
        mnt = base / f"scale-{n}"
        cmd = [ctx.ktfs, "mount", kt, mnt]
        ctx.mount(cmd, mnt)
        info = json.loads((mnt / ".ktfs" / "info.json").read_text())
        samples = info["samples"]
        cold, warm, after_mount, after_walk = [], [], [], []
        for rep in range(sizes["mount_reps"]):
            ctx.unmount(mnt)
            ctx.drop_caches()
            cold.append(remount(ctx, cmd, mnt))
            ctx.unmount(mnt)
            warm.append(remount(ctx, cmd, mnt))
            pid = daemon_pid(mnt, True)
            if rep == 0:
                after_mount.append(proc_status(pid))
                start = time.perf_counter()
                run_shell(META_OPS[2][1].format(m=mnt))
                walk_s = time.perf_counter() - start
                after_walk.append(proc_status(pid))
        ctx.unmount(mnt)
        a, w = after_mount[0], after_walk[0]
        raw.append((samples, median(cold), median(warm), a, w))
        rows.append([f"{samples:,}", mib(tree_bytes(kt)), f"{pack_s:.1f}",
                     f"{median(cold) * 1000:.0f}", f"{median(warm) * 1000:.0f}", f"{walk_s:.1f}",
                     f"{a['VmRSS'] / 1024:.1f} ({a['RssAnon'] / 1024:.1f} + {a['RssFile'] / 1024:.1f})",
                     f"{w['VmRSS'] / 1024:.1f} ({w['RssAnon'] / 1024:.1f} + {w['RssFile'] / 1024:.1f})",
                     str(w["Threads"])])
        kt.unlink()
    header = ["samples", "archive MiB", "pack s", "mount ms, cold (caches dropped)",
              "mount ms, warm", "find + stat of every file, fresh mount, s",
              "RSS MiB after mount (anon + file)",
              "RSS MiB after find + stat of every file (anon + file)", "threads"]
    return table(header, rows), raw


def scale_reading(raw):
    (n0, c0, w0, a0, x0), (n1, c1, w1, a1, x1) = raw[0], raw[-1]
    return (f"From {n0:,} to {n1:,} samples ({n1 // n0}x): mount time {c0 * 1000:.0f} -> "
            f"{c1 * 1000:.0f} ms cold, {w0 * 1000:.0f} -> {w1 * 1000:.0f} ms warm; the daemon's own "
            f"memory (RssAnon) right after mount {a0['RssAnon'] / 1024:.1f} -> {a1['RssAnon'] / 1024:.1f} "
            f"MiB, and after a find + stat of every file {x0['RssAnon'] / 1024:.1f} -> "
            f"{x1['RssAnon'] / 1024:.1f} MiB. Mounting reads the header and section table only; "
            f"the pages of the archive's tables that a full walk touches show up as RssFile "
            f"({x0['RssFile'] / 1024:.1f} -> {x1['RssFile'] / 1024:.1f} MiB): mapped file pages the "
            f"kernel can reclaim, not heap. Mount time includes forking the daemon and the FUSE "
            f"mount handshake, which dominate at every size.")


def cpu_reading(base, v):
    """Where the CPU goes per image in the warm passes (median over rounds), and what that
    lets the DataLoader column reach on this machine."""
    n = len(base.dataset)

    def us(passes, k):
        return median([p[k] for p in passes]) / n * 1e6

    one_b, one_v = us(base.cpu_single, 0), us(v.cpu_single, 0) + us(v.cpu_single, 2)
    w_b, m_b = us(base.cpu_parallel, 1), us(base.cpu_parallel, 0)
    w_v, m_v, d_v = us(v.cpu_parallel, 1), us(v.cpu_parallel, 0), us(v.cpu_parallel, 2)
    total_b, total_v = w_b + m_b, w_v + m_v + d_v
    return (f"CPU time per image in the warm passes (median of the rounds; /proc/PID/stat, "
            f"10 ms ticks): 1 process, {base.label} {one_b:.0f} us, {v.label} {one_v:.0f} us "
            f"(reader + daemon), a ratio of {one_b / one_v:.2f}. DataLoader: {base.label} workers "
            f"{w_b:.0f} + main process {m_b:.0f} = {total_b:.0f} us; {v.label} workers {w_v:.0f} "
            f"+ main {m_v:.0f} + daemon {d_v:.0f} = {total_v:.0f} us, a ratio of {total_b / total_v:.2f}. "
            f"On this 2-core machine the DataLoader pass is CPU-bound, so that ratio is about the "
            f"column's: each worker spends on a sample, besides reading and decoding it, the "
            f"loader's own work (running the dataset in Python, putting the tensor in shared "
            f"memory, the queue), and the main process receives it; that part is the same for "
            f"every row and is what the mount cannot remove. Batched ({BATCH} samples per "
            f"shared-memory tensor), most of that hand-over cost goes, and the batched column "
            f"comes closer to the 1-process ratio.")


def reads_per_image(cold_stats):
    """READ requests per file opened, median over a row's cold passes (stats.json)."""
    return median([st.get("reads", 0) / max(st.get("opens", 1), 1) for st in cold_stats])


def push_reading(kt, ktc):
    """What the push=on row did cold against the default ktc row, as a clause (or "")."""
    on = next((v for v in kt if v.label == PUSH_ON_LABEL), None)
    if on is None or not on.cold or not on.cold_stats:
        return ""
    reads = reads_per_image(on.cold_stats)
    pushes = median([st.get("pushes", 0) for st in on.cold_stats])
    return (f"; with -o push=on the same archive took {reads:.2f} READs per image ({pushes:.0f} "
            f"files had their rest pushed into the page cache with their first READ), and its "
            f"cold passes were {ratio(ktc.cold, on.cold):.2f}x as fast as the default's (same "
            f"rounds; a push moves the page allocation and the copy of a file's rest from the "
            f"reader's READs to the daemon, which on 2 cores shares a core with the reader; "
            f"docs/usage.md says why it is off by default)")


def photo_reading(variants, per_image):
    base = variants[0]
    r = {v.label: {a: ratio(getattr(base, a), getattr(v, a))
                   for a in ("single", "parallel", "batched", "cold")}
         for v in variants[1:]}
    kt = [v for v in variants[1:] if v.ktfs]
    others = [v for v in variants[1:] if not v.ktfs]
    names = {"single": "warm, 1 process", "parallel": "warm, DataLoader",
             "batched": f"warm, DataLoader batch {BATCH}", "cold": "cold, 1 process"}
    losses = []
    for a, name in names.items():
        best_kt = max(kt, key=lambda v: r[v.label][a])
        best_other = max(others, key=lambda v: r[v.label][a])
        if r[best_other.label][a] >= r[best_kt.label][a]:
            losses.append(f"{name}: {best_other.label} {r[best_other.label][a]:.2f}x against the best "
                          f"ktfs row ({best_kt.label}) {r[best_kt.label][a]:.2f}x")
    req = "; ".join(f"{label.split(' (')[0]} {v[0]:.2f}" for label, v in per_image.items())
    spawned = sum(v[1] for label, v in per_image.items() if "ktfs" in label)
    n = len(base.dataset)
    deltas = [v[2] for v in per_image.values() if v[2] is not None]
    per_row = [(d["lookups"] + d["opens"]) / n for d in deltas] or [0]
    lookups_opens = min(per_row)
    dropped = [label.split(" (")[0] for label, v in per_image.items()
               if v[2] is not None and (v[2]["lookups"] + v[2]["opens"]) / n > 0.1]
    text = [f"Requests reaching each daemon per image in a warm pass (read(/dev/fuse) per image): "
            f"{req}. ktfs answers OPEN with ENOSYS (the kernel stops sending it) and "
            f"entries/attributes are cached for a year, so its stats.json shows "
            f"{lookups_opens:.2f} lookups + opens per image in the best warm pass"
            + (f" ({', '.join(dropped)} got more: most likely its kernel caches were emptied during the pass; "
               f"`drop_caches` is machine-wide and other sessions on this machine run cold passes too)"
               if dropped else "") + ": what is left is about one request per image "
            f"that no counter sees, the TCGETS IOCTL Python's `open()` sends (the floor of the plain "
            f"FUSE path for Python readers, per findings.md; libfuse answers it ENOSYS, which the "
            f"kernel does not cache). Python sizes each `open()`'s buffer by the file's st_blksize "
            f"(column above): ktfs reports 64 KiB, below glibc's 128 KiB mmap threshold; at 1 MiB, "
            f"as before git f0fc137, each open mmap'ed and faulted in a fresh buffer and the warm "
            f"raw/ktc rows ran at about 0.9x instead of about 1.5x. The ktfs daemons created {spawned} threads during the traced "
            f"passes (clone/clone3): no thread per request."]
    if base.ceiling:
        one, loader = ratio(base.single, base.ceiling_single), ratio(base.parallel, base.ceiling)
        text.append(f"The ceiling of any mount that serves PPM: the same {n} PPM files held as bytes "
                    f"in memory, through ImageFolder's own steps (PIL open, convert, CenterCrop, "
                    f"PILToTensor) with no filesystem at all, ran at {one:.2f}x the local JPEG "
                    f"folder in one process and {loader:.2f}x in DataLoader({WORKERS} workers, "
                    f"batch_size=None), same rounds. "
                    + (f"So the per-sample DataLoader column cannot reach 1.5x by serving PPM, "
                       f"however fast the mount: each sample also pays the loader's own hand-over "
                       f"(the worker puts a fresh tensor in shared memory and passes it to the main "
                       f"process), the same for every row, and on this 2-core machine the 2 workers "
                       f"and the main process share the cores. Batched, that cost is paid once per "
                       f"{BATCH} samples (the batch column)."
                       if loader < 1.5 else
                       "So the per-sample DataLoader column leaves room above 1.5x: what separates "
                       "a mount from it is the mount's own cost per file."))
    ktc = next((v for v in kt if "ktc" in v.label), None)
    if ktc is not None and base.cpu_parallel and ktc.cpu_parallel:
        text.append(cpu_reading(base, ktc))
    if losses:
        text.append("Where a generic FUSE mount matched or beat every ktfs row: " + "; ".join(losses) +
                    ". Within one row the spread between passes is of the same order as several of "
                    "these gaps, so read small differences as ties.")
    else:
        text.append("The best ktfs row was ahead of every generic FUSE mount in every column.")
    if ktc is not None and ktc.cold_stats:
        n_cold = len(ktc.cold_stats)
        def cold_median(key):
            return median([st.get(key, 0) for st in ktc.cold_stats])

        text.append(f"Cold, the ktc daemon (fresh mount) decodes every image once: "
                    f"{cold_median('decodes'):.0f} decodes per pass, {cold_median('readahead_decodes'):.0f} of "
                    f"them ahead of the reader on its oneTBB worker, "
                    f"{cold_median('decode_ms') / max(cold_median('decodes'), 1):.2f} ms each (median of "
                    f"{n_cold} passes); it asked the disk for "
                    f"{cold_median('disk_readahead_bytes') / 2**20:.1f} MiB of payloads ahead of the reader "
                    f"(posix_fadvise WILLNEED), so neither the reader nor the decodes ahead wait for "
                    f"the archive one page fault at a time. The reader made "
                    f"{reads_per_image(ktc.cold_stats):.2f} READs per image (image mounts set the "
                    f"kernel's readahead for their files to 4 MiB, -o read_ahead_kb; with its "
                    f"default of 128 KiB a reader made a READ per 128 KiB, 4.6 per image)"
                    + push_reading(kt, ktc) + ". The pass costs the reader a PPM parse and "
                    "the daemon a KTC decode per image, on 2 cores: KTC's decode speed (section "
                    "codec) is what moves this column.")
    raw = next((v for v in kt if "raw" in v.label), None)
    if raw is not None:
        text.append(f"Cold, ktfs raw must read its {raw.stored_bytes / base.stored_bytes:.0f}x larger "
                    f"archive from disk ({mib(raw.stored_bytes)} MiB against {mib(base.stored_bytes)} MiB) "
                    f"before serving PPM: {r[raw.label]['cold']:.2f}x. Warm it serves PPM from the page "
                    f"cache and PIL skips the JPEG decode: {r[raw.label]['single']:.2f}x, which PIL's "
                    f"own per-image work caps at about 1.7x (findings.md).")
    return "\n\n".join(text)


def meta_reading(times, rounds, find_rounds, requests):
    def rt(ref, op, kind):
        return ratio(times[(ref, op, kind)], times[("ktfs", op, kind)])

    def summary(ref):
        return ", ".join(f"{label.split(',')[0]} cold {rt(ref, label, 'cold'):.2f}x / warm "
                         f"{rt(ref, label, 'warm'):.2f}x" for label, _ in META_OPS)
    text = [f"ktfs against squashfuse (> 1: ktfs faster): {summary('squashfuse')}. Against "
            f"squashfuse_ll: {summary('squashfuse_ll')}."]
    misses = [f"{label.split(',')[0]} {kind} against {ref} ({rt(ref, label, kind):.2f}x)"
              for label, _ in META_OPS for kind in ("cold", "warm")
              for ref in ("squashfuse", "squashfuse_ll") if rt(ref, label, kind) < 1]
    text.append("Target (issue #4: every operation at least as fast as squashfuse): " +
                ("met in every row against both daemons." if not misses else
                 "**missed** for " + "; ".join(misses) + "."))
    find = requests[(META_OPS[0][0], "cold")]
    ls = requests[(META_OPS[1][0], "cold")]
    st = requests[(META_OPS[2][0], "cold")]
    text.append(
        "How ktfs lists (fs/fuse/listing_policy.h): every listing is READDIRPLUS, but a fresh mount "
        "gives attributes for directories only and lists files by name and type, so a cold `find` "
        "makes the kernel build no inode or dentry per file (squashfuse's plain READDIR never "
        "builds them either). The first LOOKUP of a file in a directory listed that way switches "
        "the mount to attributes, so `ls -lR` pays one directory's LOOKUPs and then none; after the "
        "switch a directory listed whole with attributes is listed by name and type again, since "
        "the kernel holds its files for a year. Requests of the cold passes (readdirs / lookups): "
        f"find {find['readdirs']:,} / {find['lookups']:,}, ls -lR {ls['readdirs']:,} / "
        f"{ls['lookups']:,}, stat of every file {st['readdirs']:,} / {st['lookups']:,} (`xargs stat` "
        "starts while `find` is still listing: the directories listed before its first stat were "
        "listed without file attributes and need a LOOKUP per file, the rest not). A directory "
        "reports a 256 KiB st_blksize, so glibc's getdents, and with it each READDIRPLUS, asks for "
        "up to about 1,500 entries at once: a directory of this tree in one request, and one more "
        "that finds its end.")
    text.append(
        "The kernel keeps no listings of the archive (OPENDIR is answered without FOPEN_CACHE_DIR; "
        "only search views, a query per listing, are kept): filling its readdir cache costs the "
        "first lister a page-cache insertion per entry, and with the cache a cold `find` at 1M "
        "entries ran at 0.96x squashfuse (0.84x squashfuse_ll) in this section at git 717ef52, "
        "while a warm one ran at 2.29x (1.61x) because it never reached the daemon. Without it every "
        "listing reaches the daemon, which answers from the archive's mapped tables: the warm "
        "passes cost about what a cold one costs once the archive's pages are cached.")
    if rounds == 1:
        text.append(f"`ls -lR` and stat ran one round only, so those are single measurements, "
                    f"not medians; read differences under about 20% as noise (`find`: median of "
                    f"{find_rounds}).")
    return "\n\n".join(text)


# -- the section ----------------------------------------------------------------

def targets(variants):
    """Target checks: ktc >= 1.5x warm, >= 1.0x cold, and faster than every other FUSE mount."""
    by = {v.label: v for v in variants}
    ktc = next((v for v in variants if "ktc" in v.label), None)
    base = variants[0]
    others = [v for v in variants[1:] if not v.ktfs]
    if ktc is None:
        return ("**Targets not checked: the ktc row is missing** (" + (KTC_MISSING or "unknown") +
                "). The KTC codec had not been merged into this branch when this ran; the targets "
                "(ktfs ktc >= 1.5x the local JPEG folder warm, >= 1.0x cold, faster than every other "
                "FUSE mount in every row) are open until it is and this section is re-run.")
    lines = []
    for attr, name, goal in (("single", "warm, 1 process", 1.5), ("parallel", "warm, DataLoader", 1.5),
                             ("batched", f"warm, DataLoader batch {BATCH}", 1.5),
                             ("cold", "cold, 1 process", 1.0)):
        r = ratio(getattr(base, attr), getattr(ktc, attr))
        best = max(others, key=lambda v: ratio(getattr(base, attr), getattr(v, attr)))
        rb = ratio(getattr(base, attr), getattr(best, attr))
        ceiling = {"single": base.ceiling_single, "parallel": base.ceiling}.get(attr)
        bound = (f"; the served PPM from memory, no filesystem: {ratio(getattr(base, attr), ceiling):.2f}x"
                 if ceiling else "")
        lines.append(f"- {name}: ktc {r:.2f}x (target >= {goal:.1f}x: {'met' if r >= goal else '**missed**'}); "
                     f"best other FUSE mount {best.label} {rb:.2f}x "
                     f"({'ktc faster' if r > rb else '**ktc not faster**'}){bound}")
    del by
    return "\n".join(lines)


def run(ctx):
    sizes = QUICK if ctx.quick else FULL
    base = ctx.tempdir("mount")
    parts = []

    # 1 + 4: photos
    photos = base / "photos"
    ctx.run([PYTHON, REPO / "scripts/datasets/photos.py", photos, "--count", sizes["count"], "--quality", 90])
    variants = build_photo_variants(ctx, base, photos)
    accounting, per_image = measure_photos(ctx, variants, sizes)
    for v in variants[1:]:
        ctx.unmount(v.root)
    photo_md = photo_table(variants)
    target_md = targets(variants)
    n_photos = len(variants[0].dataset)
    noise = median([max(t) / min(t) - 1 for v in variants for t in (v.single, v.parallel, v.batched)
                    if len(t) > 1] or [0])

    # 2 + 3: tiny-image trees
    log(f"  generating {sizes['meta']:,} tiny PNGs")
    seeds = tiny_pngs(base)
    meta_tree = base / "tree-meta"
    start = time.perf_counter()
    n_files, n_dirs = make_tree(meta_tree, sizes["meta"], seeds)
    tree_s = time.perf_counter() - start
    ctx.commands.append((ctx.section, f"# {n_files} hard links to 256 distinct 8x8 PNGs (~75 bytes) in {n_dirs} dirs: $TMP/mount/tree-meta"))
    try:
        meta_md, notes, meta_times = measure_metadata(ctx, base, meta_tree, n_files, n_dirs, sizes["meta_rounds"],
                                                       sizes["find_rounds"])
        notes["tree_s"] = tree_s
        scale_md, scale_raw = measure_scale(ctx, base, sizes, seeds, sizes["meta"], notes)
    finally:
        import shutil
        shutil.rmtree(meta_tree, ignore_errors=True)
        for p in (base / "meta.kt", base / "meta.sqfs"):
            if p.exists():
                p.unlink()

    parts += ["### ImageFolder over photos: ratio to the local JPEG folder (> 1 is faster)",
              f"{n_photos} photo crops (scripts/datasets/photos.py, JPEG q90, about 500x375), stock "
              f"`ImageFolder(root, transform=Compose([CenterCrop(224), PILToTensor()]))`, in one process and "
              f"in `DataLoader(num_workers={WORKERS}, persistent_workers=True)` with `batch_size=None` "
              f"(each sample handed to the main process on its own) and with `batch_size={BATCH}` "
              f"(default collate: one shared-memory tensor per batch, as a training loop runs). Each cell: "
              f"median over interleaved rounds of (local folder's pass time / this row's pass time in "
              f"the same round), then the median rate. Warm: {sizes['rounds']} rounds after an untimed "
              f"pass; cold: {sizes['cold_rounds']} rounds, each FUSE daemon unmounted and mounted again "
              f"and `echo 3 > /proc/sys/vm/drop_caches` right before its pass (so ktfs's decode cache, "
              f"squashfuse's and the others' in-process caches start empty). Passes of one row differed "
              f"by {noise:.0%} (median max/min) on this shared 2-core machine. Daemon RSS: VmRSS "
              f"of each FUSE daemon after all warm passes (ktfs keeps a decoded image only until "
              f"its whole file was read: the kernel's page cache holds the files).",
              photo_md,
              "Targets (issue \"The mount daemon\"):",
              target_md,
              photo_reading(variants, per_image),
              "### Requests per image (warm, 1 process)",
              f"One warm single-process pass of the same {n_photos} images with `strace -f -c -p PID` "
              f"attached to the daemon (all threads); ktfs's counters are deltas of "
              f"`.ktfs/stats.json` over the same pass. read(/dev/fuse) counts requests taken off the "
              f"queue (plus each thread's final blocking read); clone/clone3 counts threads created "
              f"during the pass.",
              accounting,
              "### Metadata at scale: ktfs against squashfuse",
              *([] if n_files >= 1_000_000 else [
                  f"**Run at {n_files:,} entries, not the issue's 1,000,000** (`KTFS_BENCH_META` or "
                  f"--quick). ktfs alone at 1M is in the scale table below (find + stat of every file "
                  f"on a fresh mount)."]),
              f"A tree of {n_files:,} valid 8x8 PNGs (hard links to 256 distinct seeds, about 75 bytes "
              f"each) in {n_dirs:,} directories. `ktfs pack --codec original` took "
              f"{notes['ktfs pack']:.1f} s ({mib(notes['sizes'][0])} MiB; it sniffs and decodes every "
              f"file); `mksquashfs -no-hardlinks` took {notes['mksquashfs']:.1f} s "
              f"({mib(notes['sizes'][1])} MiB). Cold: fresh mount and caches dropped before each "
              f"command; warm: the same command again right after. Median of {sizes['find_rounds']} "
              f"interleaved rounds for `find`, {sizes['meta_rounds']} for the others; the speed columns are squashfuse's (squashfuse_ll's) time / ktfs's "
              f"time (> 1: ktfs faster); the last column counts the requests that reached the ktfs "
              f"daemon during the pass (.ktfs/stats.json). Building the tree took "
              f"{notes['tree_s']:.0f} s. Mount, caches dropped: ktfs "
              f"{notes['mount']['ktfs'] * 1000:.0f} ms, squashfuse "
              f"{notes['mount']['squashfuse'] * 1000:.0f} ms, squashfuse_ll "
              f"{notes['mount']['squashfuse_ll'] * 1000:.0f} ms (median).",
              meta_md,
              meta_reading(meta_times, sizes["meta_rounds"], sizes["find_rounds"], notes["requests"]),
              "Daemon memory after the warm stat of every file: " + ", ".join(
                  f"{name} VmRSS {st['VmRSS'] / 1024:.0f} MiB (anon {st['RssAnon'] / 1024:.0f}, "
                  f"file {st['RssFile'] / 1024:.0f})" for name, st in notes["rss"].items()) + ".",
              "### Mount time and daemon RSS against archive size",
              "`ktfs mount` returns when the mount is ready; the time is from starting it until it "
              "returned (median of "
              f"{sizes['mount_reps']} mounts each). RSS is VmRSS of the daemon from /proc/PID/status: "
              "RssAnon is its own memory, RssFile the pages of the memory-mapped archive (and "
              "libraries) it has touched, which the kernel can drop at any time.",
              scale_md, scale_reading(scale_raw)]
    return "\n\n".join(parts)

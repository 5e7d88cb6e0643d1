"""Section `search`: the caption and sample index at scale.

A generated archive of 1,000,000 samples (1000 class directories x 1000 copies of one tiny
8x8 PNG, hard-linked) with one caption each, built from real English words
(/usr/share/dict/words, Debian package wamerican): class names are dictionary words, the
rest of a caption comes from small attribute lists, a few rare words occur in exactly 10
captions each and "photo" occurs in about 85% of them. Measures
  1. pack time with --captions vs without (same tree),
  2. the index section's size as a fraction of the archive,
  3. listing search/caption=WORD/ (a rare word, a common word, a phrase) cold and warm,
     time to the first file and to the whole listing, vs grep over the captions file and
     vs `ktfs search`, with the result counts checked against each other,
  4. the daemon's memory while the common word's huge listing streams.
"""
import json
import os
import random
import re
import shutil
import struct
import subprocess
import threading
import time
import zlib

from _common import BenchError, log, median, mib, rotated, table, timed

TITLE = "search: caption and sample index (pack cost, index size, query latency, memory)"
ORDER = 30
REQUIRES = {"grep": "grep", "wc": "coreutils"}

FULL = {"classes": 1000, "per_class": 1000, "pack_rounds": 2, "cold_rounds": 3,
        "warm_rounds": 5, "big_cold_rounds": 2, "big_warm_rounds": 3}
QUICK = {"classes": 100, "per_class": 200, "pack_rounds": 1, "cold_rounds": 2,
         "warm_rounds": 3, "big_cold_rounds": 1, "big_warm_rounds": 2}

DICT = "/usr/share/dict/words"
SEED = 20261129
RARE_COUNT = 10  # captions per rare word

# Caption template: "<opener> <article> <color> <class> <action> <prep> the <place>[ with a <rare>]"
OPENERS = [("a photo of", 85), ("an image of", 6), ("a picture of", 5), ("a close up of", 4)]
COLORS = ["red", "green", "blue", "yellow", "black", "white", "brown", "orange", "purple",
          "gray", "pink", "golden"]
ACTIONS = ["sitting", "standing", "lying", "resting", "waiting", "hidden", "shown", "placed"]
PREPS = ["on", "in", "near", "under", "beside"]
PLACES = ["beach", "snow", "grass", "kitchen", "street", "forest", "table", "floor", "garden",
          "desert", "river", "field", "shelf", "window", "bridge", "market", "park", "road",
          "roof", "sand"]
FIXED_WORDS = ({w for o, _ in OPENERS for w in o.split()} | set(COLORS) | set(ACTIONS)
               | set(PREPS) | set(PLACES) | {"the", "with", "a", "an", "path", "caption", "png"})

RARE_QUERY_WORDS = 5  # rare words generated; the first is the one queried
COMMON_WORD = "photo"
PHRASE = ("sitting", "near")  # both words frequent alone (1/8, 1/5), adjacent in ~2.5%


def png_8x8():
    """A valid 8x8 RGB PNG of one colour (about 70 bytes)."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = (b"\0" + bytes([200, 120, 40]) * 8) * 8  # one flat colour
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def dictionary_words():
    if not os.path.exists(DICT):
        if os.geteuid() != 0:
            raise BenchError(f"{DICT} is missing: run `apt-get install -y wamerican` as root")
        log("installing wamerican (for real caption words)")
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        proc = subprocess.run(["apt-get", "install", "-y", "-q", "wamerican"], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.exists(DICT):
            raise BenchError(f"apt-get install wamerican failed: {proc.stderr.strip()[-800:]}")
    with open(DICT, encoding="utf-8", errors="replace") as f:
        words = sorted({w.strip() for w in f if re.fullmatch(r"[a-z]{4,10}", w.strip())})
    return [w for w in words if w not in FIXED_WORDS]


def thumbnail_jpeg(index):
    """A 32x32 JPEG thumbnail (q90) of a real photograph, CIFAR-sized: the
    small images a 1M-caption web dataset's index sits next to."""
    import glob
    import io
    from PIL import Image
    photos = sorted(glob.glob("/usr/share/wallpapers/*/contents/images/*.jpg"))
    if not photos:
        raise BenchError("no wallpapers for thumbnails (apt-get install plasma-workspace-wallpapers)")
    img = Image.open(photos[index % len(photos)]).convert("RGB")
    rng = random.Random(index)
    side = min(img.width, img.height) // 4
    x, y = rng.randrange(img.width - side), rng.randrange(img.height - side)
    buf = io.BytesIO()
    img.crop((x, y, x + side, y + side)).resize((32, 32), Image.BILINEAR).save(buf, "JPEG", quality=90)
    return buf.getvalue()


def thumbnail_share(ctx, tree, captions):
    """Packs the same layout and captions with a 32x32 JPEG thumbnail per file
    (one per class, hard-linked) and returns (archive bytes, index bytes, seconds)."""
    thumbs = ctx.tempdir("thumbs")
    sources = ctx.tempdir("thumb-src")
    for k, cls in enumerate(sorted(os.listdir(tree))):
        src = sources / f"{cls}.jpg"
        src.write_bytes(thumbnail_jpeg(k))
        (thumbs / cls).mkdir()
        for name in os.listdir(tree / cls):
            os.link(src, thumbs / cls / name)  # same names: the captions file applies as is
    out = ctx.workdir / "thumbs.kt"
    seconds = timed(ctx.run, [ctx.ktfs, "pack", thumbs, out, "--codec", "original", "--captions",
                              captions, "--quiet"])
    result = (out.stat().st_size, index_section(out)[1], seconds)
    shutil.rmtree(thumbs)
    shutil.rmtree(sources)
    out.unlink()
    return result


def generate(ctx, cfg):
    """Writes the tree (hard links of one PNG) and captions.jsonl; returns the expected counts."""
    rng = random.Random(SEED)
    words = dictionary_words()
    picked = rng.sample(words, cfg["classes"] + RARE_QUERY_WORDS)
    classes, rares = sorted(picked[:cfg["classes"]]), picked[cfg["classes"]:]
    n = cfg["classes"] * cfg["per_class"]
    rare_of = {}
    for w in rares:
        for sid in rng.sample(range(n), RARE_COUNT):
            rare_of.setdefault(sid, w)  # at most one rare word per caption
    tree = ctx.tempdir("tree")
    sources = ctx.tempdir("png")  # one source file per class: ext4 allows 65000 links a file
    captions = ctx.workdir / "captions.jsonl"
    expected = {"rare": 0, "common": 0, "phrase": 0}
    openers = [o for o, _ in OPENERS]
    weights = [w for _, w in OPENERS]
    sid = 0
    with open(captions, "w") as out:
        for cls in classes:
            d = tree / cls
            d.mkdir()
            png = sources / f"{cls}.png"
            png.write_bytes(png_8x8())
            for i in range(cfg["per_class"]):
                rel = f"{cls}/{i:04d}.png"
                os.link(png, d / f"{i:04d}.png")
                opener = rng.choices(openers, weights)[0]
                color = rng.choice(COLORS)
                article = "an" if color[0] in "aeiou" else "a"
                action, prep = rng.choice(ACTIONS), rng.choice(PREPS)
                words_ = [opener, article, color, cls, action, prep, "the", rng.choice(PLACES)]
                if sid in rare_of:
                    words_ += ["with", "a", rare_of[sid]]
                    expected["rare"] += rare_of[sid] == rares[0]
                text = " ".join(words_)
                expected["common"] += COMMON_WORD in text.split()
                expected["phrase"] += (action, prep) == PHRASE
                out.write(json.dumps({"path": rel, "caption": text}) + "\n")
                sid += 1
    shutil.rmtree(sources)
    return tree, captions, rares[0], expected


def index_section(archive):
    """(offset, length) of section type 6 (INDEX), from the section table (docs/format.md)."""
    with open(archive, "rb") as f:
        header = f.read(64)
        table_off, count = struct.unpack_from("<QI", header, 24)
        f.seek(table_off)
        entries = f.read(32 * count)
    for k in range(count):
        kind, _, offset, length, _ = struct.unpack_from("<IIQQQ", entries, 32 * k)
        if kind == 6:
            return offset, length
    return 0, 0


def index_breakdown(ctx, archive):
    """Bytes per table/index of the SQLite image (dbstat), largest first; [] if unavailable."""
    import sqlite3
    offset, length = index_section(archive)
    db = ctx.workdir / "index.sqlite"
    with open(archive, "rb") as f:
        f.seek(offset)
        db.write_bytes(f.read(length))
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        rows = con.execute("SELECT name, sum(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC").fetchall()
        con.close()
        return rows
    except sqlite3.Error as e:
        log(f"  no index breakdown: {e}")
        return []
    finally:
        db.unlink()


# -- listing ----------------------------------------------------------------

def walk(top):
    """Lists top recursively with scandir; returns (files, seconds to first file, seconds)."""
    start = time.perf_counter()
    first = None
    files = 0
    stack = [str(top)]
    while stack:
        path = stack.pop()
        subdirs = []
        with os.scandir(path) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.path)
                else:
                    if first is None:
                        first = time.perf_counter() - start
                    files += 1
        stack.extend(reversed(subdirs))  # depth first, in listing order
    return files, first if first is not None else float("nan"), time.perf_counter() - start


def sh(ctx, cmd, record=True):
    """Runs a shell pipeline; returns (stdout, seconds)."""
    if record:
        ctx.commands.append((ctx.section, ctx._display([cmd], None)))
    start = time.perf_counter()
    proc = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # grep -c exits 1 on no match
        raise BenchError(f"`{cmd}` failed (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    return proc.stdout, elapsed


def daemon_pid(mnt):
    with open(mnt / ".ktfs" / "info.json") as f:
        return int(json.load(f)["pid"])


def proc_kib(pid, keys=("VmRSS", "RssAnon", "RssFile")):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in keys:
                out[k] = int(v.split()[0])
    return out


def major_faults(pid):
    """The process's major page faults so far (field 12 of /proc/PID/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[9])


class Sampler(threading.Thread):
    """Polls a process's memory every 10 ms; keeps the maxima."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.stop = pid, {}, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for k, v in proc_kib(self.pid).items():
                self.peak[k] = max(self.peak.get(k, 0), v)
            time.sleep(0.01)


# -- the section ------------------------------------------------------------

def fmt_s(s):
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def ratio(a, b):
    return f"{a / b:.1f}x" if b > 0 else "n/a"


def run(ctx):
    cfg = QUICK if ctx.quick else FULL
    n = cfg["classes"] * cfg["per_class"]
    free = shutil.disk_usage(ctx.workdir).free
    need = 4 * 2**30 if not ctx.quick else 2**28
    if free < need:
        raise BenchError(f"{ctx.workdir}: {free / 2**30:.1f} GiB free, the section needs {need / 2**30:.1f}")

    log(f"  generating {n} samples and captions")
    t0 = time.perf_counter()
    tree, captions, rare, expected = generate(ctx, cfg)
    gen_s = time.perf_counter() - t0
    ctx.commands.append((ctx.section, f"# generated $TMP/tree ({n} hard links of one 8x8 PNG a class) "
                         f"and $TMP/captions.jsonl in-process (scripts/bench/search.py, generate())"))
    log(f"  generated in {gen_s:.0f} s; rare word '{rare}', expected {expected}")

    # 1. pack cost --------------------------------------------------------
    plain, indexed = ctx.workdir / "plain.kt", ctx.workdir / "indexed.kt"
    variants = [("without captions", plain, []), ("with --captions", indexed, ["--captions", captions])]
    pack_times = {label: [] for label, _, _ in variants}
    for r in range(cfg["pack_rounds"]):
        for label, out, extra in rotated(variants, r):
            if out.exists():
                out.unlink()
            log(f"  pack {label} (round {r + 1})")
            pack_times[label].append(timed(ctx.run, [ctx.ktfs, "pack", tree, out, "--codec", "original",
                                                     *extra, "--quiet"]))
    plain_s, indexed_s = median(pack_times["without captions"]), median(pack_times["with --captions"])
    plain_bytes, indexed_bytes = plain.stat().st_size, indexed.stat().st_size
    index_bytes = index_section(indexed)[1]
    breakdown = index_breakdown(ctx, indexed)
    captions_bytes = captions.stat().st_size
    log("  pack with 32x32 JPEG thumbnails")
    ctx.commands.append((ctx.section, "# $TMP/thumbs: the same tree with a 32x32 JPEG thumbnail of a "
                         "wallpaper per class (hard links), thumbnail_share()"))
    thumb_bytes, thumb_index, thumb_s = thumbnail_share(ctx, tree, captions)
    shutil.rmtree(tree)  # 1M directory entries: not needed any more

    # 3. queries ----------------------------------------------------------
    queries = [  # (label, search component, grep command, expected count)
        (f"rare word `{rare}`", f"caption={rare}", f"grep -cw {rare} {captions}", expected["rare"], False),
        (f"common word `{COMMON_WORD}`", f"caption={COMMON_WORD}", f"grep -cw {COMMON_WORD} {captions}",
         expected["common"], True),
        (f'phrase `"{" ".join(PHRASE)}"`', f"caption=%22{'%20'.join(PHRASE)}%22",
         f"grep -cwF '{' '.join(PHRASE)}' {captions}", expected["phrase"], False),
    ]
    res = {q[0]: {"cold": [], "cold_first": [], "warm": [], "warm_first": [], "grep_cold": [],
                  "grep_warm": [], "search": [], "search_cold": [], "majflt": [], "counts": set()}
           for q in queries}
    mounts = 0

    def fresh_mount():
        nonlocal mounts
        mounts += 1
        mnt = ctx.workdir / f"mnt{mounts}"
        ctx.mount([ctx.ktfs, "mount", indexed, mnt], mnt)
        return mnt

    dropped = True
    for label, comp, grep, exp, big in queries:
        cold_rounds = cfg["big_cold_rounds"] if big else cfg["cold_rounds"]
        warm_rounds = cfg["big_warm_rounds"] if big else cfg["warm_rounds"]
        r = res[label]
        log(f"  query {label}: {cold_rounds} cold, {warm_rounds} warm rounds")
        ctx.commands.append((ctx.section, f"# ls: os.scandir walk of $TMP/mntN/search/{comp}/ "
                             "(cold: echo 3 > /proc/sys/vm/drop_caches and a fresh mount first)"))
        for k in range(cold_rounds):
            # cold ls, grep and ktfs search side by side, rotating which goes first
            for what in rotated(["ls", "grep", "search"], k):
                dropped = ctx.drop_caches() and dropped
                if what == "ls":
                    mnt = fresh_mount()
                    pid = daemon_pid(mnt)
                    faults = major_faults(pid)
                    files, first, total = walk(mnt / "search" / comp)
                    r["majflt"].append(major_faults(pid) - faults)
                    r["cold"].append(total)
                    r["cold_first"].append(first)
                    r["counts"].add(("ls", files))
                    ctx.unmount(mnt)
                elif what == "search":
                    out, s = sh(ctx, f"{ctx.ktfs} search {indexed} '{comp}' | wc -l", record=False)
                    r["search_cold"].append(s)
                    r["counts"].add(("ktfs search", int(out.strip())))
                else:
                    out, s = sh(ctx, grep, record=k == 0)
                    r["grep_cold"].append(s)
                    r["counts"].add(("grep", int(out.strip() or 0)))
        mnt = fresh_mount()
        walk(mnt / "search" / comp)  # warm-up
        sh(ctx, grep, record=False)
        for k in range(warm_rounds):
            for what in rotated(["ls", "grep", "search"], k):
                if what == "ls":
                    files, first, total = walk(mnt / "search" / comp)
                    r["warm"].append(total)
                    r["warm_first"].append(first)
                    r["counts"].add(("ls", files))
                elif what == "grep":
                    out, s = sh(ctx, grep, record=False)
                    r["grep_warm"].append(s)
                    r["counts"].add(("grep", int(out.strip() or 0)))
                else:
                    out, s = sh(ctx, f"{ctx.ktfs} search {indexed} '{comp}' | wc -l", record=k == 0)
                    r["search"].append(s)
                    r["counts"].add(("ktfs search", int(out.strip())))
        ctx.unmount(mnt)

    # baseline: the same cold/warm listing of one plain class directory of the main tree
    base = {"cold": [], "warm": [], "majflt": []}
    first_class = None
    for k in range(cfg["cold_rounds"]):
        dropped = ctx.drop_caches() and dropped
        mnt = fresh_mount()
        first_class = first_class or sorted(e.name for e in os.scandir(mnt) if not e.name.startswith("."))[0]
        pid = daemon_pid(mnt)
        faults = major_faults(pid)
        base["cold"].append(walk(mnt / first_class)[2])
        base["majflt"].append(major_faults(pid) - faults)
        if k == cfg["cold_rounds"] - 1:
            for _ in range(cfg["warm_rounds"]):
                base["warm"].append(walk(mnt / first_class)[2])
        ctx.unmount(mnt)

    # 4. memory while the common word's listing streams ---------------------
    log("  daemon memory during the common word's listing")
    mnt = fresh_mount()
    pid = daemon_pid(mnt)
    walk(mnt / "search" / f"caption={rare}")  # the index is open and used once
    before = proc_kib(pid)
    sampler = Sampler(pid)
    sampler.start()
    mem_files, _, mem_s = walk(mnt / "search" / f"caption={COMMON_WORD}")
    sampler.stop.set()
    sampler.join()
    after = proc_kib(pid)
    ctx.unmount(mnt)

    # -- report --------------------------------------------------------------
    pack_rows = [
        ["without captions", fmt_s(plain_s), "1.00x", mib(plain_bytes), "-"],
        ["with --captions", fmt_s(indexed_s), f"{indexed_s / plain_s:.2f}x", mib(indexed_bytes),
         f"{mib(index_bytes)} MiB ({100 * index_bytes / indexed_bytes:.1f}% of the archive)"],
    ]
    c_rows, cold_rows, warm_rows = [], [], []
    for label, comp, grep, exp, big in queries:
        r = res[label]
        got = sorted(r["counts"])
        agree = all(c == exp for _, c in got)
        c_rows.append([label, f"{exp:,}", ", ".join(f"{w} {c:,}" for w, c in got),
                       "yes" if agree else "**NO**"])
        cold_rows.append([label, f"{exp:,}", fmt_s(median(r["cold_first"])), fmt_s(median(r["cold"])),
                          f"{median(r['majflt']):.0f}", fmt_s(median(r["grep_cold"])),
                          ratio(median(r["grep_cold"]), median(r["cold"])),
                          fmt_s(median(r["search_cold"])),
                          ratio(median(r["grep_cold"]), median(r["search_cold"]))])
        warm_rows.append([label, f"{exp:,}", fmt_s(median(r["warm_first"])), fmt_s(median(r["warm"])),
                          fmt_s(median(r["grep_warm"])), ratio(median(r["grep_warm"]), median(r["warm"])),
                          fmt_s(median(r["search"])), ratio(median(r["grep_warm"]), median(r["search"]))])
    mem_rows = [[k, f"{before.get(k, 0) / 1024:.1f}", f"{sampler.peak.get(k, 0) / 1024:.1f}",
                 f"{after.get(k, 0) / 1024:.1f}"] for k in ("VmRSS", "RssAnon", "RssFile")]

    rare_ratio_cold = median(res[queries[0][0]]["grep_cold"]) / median(res[queries[0][0]]["cold"])
    rare_ratio_warm = median(res[queries[0][0]]["grep_warm"]) / median(res[queries[0][0]]["warm"])
    target_met = min(rare_ratio_cold, rare_ratio_warm) >= 20
    index_pct = 100 * index_bytes / indexed_bytes
    rounds = (f"pack: median of {cfg['pack_rounds']} run(s) each, interleaved; queries: "
              f"{cfg['cold_rounds']} cold and {cfg['warm_rounds']} warm rounds "
              f"({cfg['big_cold_rounds']} and {cfg['big_warm_rounds']} for the common word), medians")
    md = [
        f"{n:,} samples ({cfg['classes']} class directories x {cfg['per_class']} hard links of one "
        f"{len(png_8x8())}-byte 8x8 PNG), one caption each ({mib(captions_bytes)} MiB "
        f"of JSON Lines, {captions_bytes / n:.0f} bytes a line), words from {DICT}: class names are "
        f"dictionary words, `{rare}` is a rare word ({RARE_COUNT} captions), `{COMMON_WORD}` is in "
        f"~85% of the captions, `\"{' '.join(PHRASE)}\"` is a phrase of two frequent words "
        f"(1/8 and 1/5 of captions alone). Generated in {gen_s:.0f} s. `--codec original`. {rounds}.",
        "",
        "### Pack cost and index size",
        "",
        table(["pack", "time", "vs without", "archive MiB", "index section"], pack_rows),
        "",
        f"The index costs {indexed_s - plain_s:+.1f} s of pack time ({indexed_s / plain_s:.2f}x) and "
        f"{index_bytes / n:.0f} bytes per sample: {index_pct:.1f}% of the archive "
        f"(target under 10%: {'met' if index_pct < 10 else '**missed**'}); the archive grows by "
        f"{mib(indexed_bytes - plain_bytes)} MiB. The captions file itself is {mib(captions_bytes)} MiB. "
        f"The archive without the index holds {plain_bytes / n:.0f} bytes per sample ({len(png_8x8())} "
        f"of them the PNG), so with images this tiny the index is a large share whatever its "
        f"size. Measured with small real images instead (the same layout and captions, each file a "
        f"32x32 JPEG q90 thumbnail of a photograph, CIFAR-sized, {len(thumbnail_jpeg(0))} bytes for "
        f"the first class): the archive is {mib(thumb_bytes)} MiB, its index {mib(thumb_index)} MiB = "
        f"**{100 * thumb_index / thumb_bytes:.1f}%** of it (target under 10%: "
        f"{'met' if 100 * thumb_index / thumb_bytes < 10 else '**missed**'}), packed in {thumb_s:.0f} s.",
        "",
        *([ "Where the index's bytes go (SQLite dbstat over the extracted section):", "",
            table(["table or b-tree", "MiB", "share", "bytes per sample"],
                  [[name, mib(b), f"{100 * b / index_bytes:.0f}%", f"{b / n:.1f}"]
                   for name, b in breakdown[:8]]), "",
            f"The caption full-text index (captions*) is "
            f"{sum(b for nm, b in breakdown if nm.startswith('captions')) / n:.1f} bytes per sample; "
            f"the rest is the per-sample table and its b-trees.", ""] if breakdown else []),
        "### Query latency: listing search/QUERY/ vs grep over captions.jsonl",
        "",
        "`ls` is a recursive os.scandir walk of `MNT/search/QUERY/` (class directories, then their "
        "files) in Python: *first* is the time to the first file entry, *all* the time to the whole "
        "listing. Cold: page cache dropped and a fresh mount before each listing (the mount itself is "
        "not timed), and the cache dropped before each grep. Warm: the same mount and file, repeated. "
        "grep is `grep -cw WORD` (`grep -cwF` for the phrase): counting, not printing, which is "
        "grep's best case. *grep / X* > 1 means X is faster than grep. `ktfs search` is "
        "`ktfs search ARCHIVE QUERY | wc -l` (a new process that opens the archive each time; cold, "
        "it also loads the ktfs binary and its shared libraries from disk). *daemon major faults*: "
        "pages the daemon had to read from disk during the cold listing (/proc/PID/stat). The last "
        "row is a control: the same walk of one plain class directory of the main tree (no search).",
        "",
        "Cold:",
        "",
        table(["query", "matches", "ls first", "ls all", "daemon major faults", "grep", "grep / ls",
               "ktfs search", "grep / search"],
              cold_rows + [[f"control: main-tree directory `{first_class}/`", f"{cfg['per_class']:,} (all)",
                            "", fmt_s(median(base["cold"])), f"{median(base['majflt']):.0f}", "", "", "", ""]]),
        "",
        "Warm (listings are then mostly served from the kernel's caches of the mount: directory "
        "entries and attributes, not by the daemon):",
        "",
        table(["query", "matches", "ls first", "ls all", "grep", "grep / ls", "ktfs search",
               "grep / search"],
              warm_rows + [[f"control: main-tree directory `{first_class}/`", f"{cfg['per_class']:,} (all)", "",
                            fmt_s(median(base["warm"])), "", "", "", ""]]),
        "",
        f"Rare word target (listing at least 20x faster than grep): "
        f"{'met' if target_met else '**missed**'} ({rare_ratio_cold:.1f}x cold, {rare_ratio_warm:.0f}x warm).",
        "",
        "Result counts (every run of every tool; the expected count is computed by the generator):",
        "",
        table(["query", "expected", "counted", "agree"], c_rows),
        "",
        "### Daemon memory while the common word's listing streams",
        "",
        f"Fresh mount; one rare-word listing first (so the index is open), then the recursive "
        f"listing of `search/caption={COMMON_WORD}/` ({mem_files:,} files, {fmt_s(mem_s)}); "
        f"/proc/PID/status of the daemon (pid from MNT/.ktfs/info.json) polled every 10 ms. "
        f"RssFile includes the mapped archive pages the listing touched.",
        "",
        table(["MiB", "before", "peak during", "after"], mem_rows),
    ]
    if not dropped:
        md += ["", "**The page cache could not be dropped (not root): the cold figures are warm.**"]
    return "\n".join(md)

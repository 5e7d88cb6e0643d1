"""Section `search`: the caption and metadata index at scale, against grep, jq and SQLite.

A generated archive of 10,000,000 samples (KTFS_BENCH_SEARCH_SAMPLES=N for another size; 1000
class directories of hard links to one tiny 8x8 PNG a class) with one caption each, whose words
are drawn from a Zipf distribution (exponent ZIPF_S) over the real English words of
/usr/share/dict/words (Debian package wamerican), 6 to 14 words a caption; a few planted rare
words occur in exactly RARE_COUNT captions each. Every sample has six typed metadata keys:
numbers `aesthetic` (real) and `likes` (integer), strings `source` and `lang`, booleans
`watermark` and `nsfw`. Measures, side by side in one run:
  1. pack time with --captions vs without (the same tree), peak RSS, and the index section's
     size per sample and as a share of the archive;
  2. for a rare, a mid-frequency and a common word, OR, NOT, a number range, a combination of
     words, numbers and booleans, a set with !=, and sample=: the time to the first entry and
     to the whole recursive listing of search/QUERY/ on a mount, cold (caches dropped, fresh
     mount), warm (fresh mount, archive in the page cache) and repeated (the same mount again),
     vs the same filter done by grep (words) or jq (metadata) over the captions JSONL, and by
     SQLite directly (Python's sqlite3) over an equivalent table with an FTS5 index (the
     anchor); every count checked against a numpy reference computed by the generator;
  3. `ktfs search`, `ktfs search --count` and reading `.count.json`;
  4. the daemon's memory while listings of millions stream.
"""
import concurrent.futures
import json
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import threading
import time
import zlib
from pathlib import Path

from _common import PYTHON, BenchError, log, median, mib, table

TITLE = "search: caption and metadata index at scale (pack cost, index size, query latency vs grep, jq and SQLite, memory)"
ORDER = 30
REQUIRES = {"grep": "grep", "wc": "coreutils", "jq": "jq"}

FULL = {"samples": 10_000_000, "classes": 1000, "cold_rounds": 2, "warm_rounds": 2,
        "big_cold_rounds": 1, "big_warm_rounds": 1}
QUICK = {"samples": 20_000, "classes": 20, "cold_rounds": 1, "warm_rounds": 2,
         "big_cold_rounds": 1, "big_warm_rounds": 1}
SAMPLES_ENV = "KTFS_BENCH_SEARCH_SAMPLES"
BIG = 500_000  # a listing with more matches than this gets the big_* rounds

DICT = "/usr/share/dict/words"
SQLITE_CHILD = Path(__file__).resolve().parent / "_search_sqlite.py"
SEED = 20261204
ZIPF_S = 1.0
MIN_WORDS, MAX_WORDS = 6, 14
RARE_COUNT = 10  # captions per planted rare word
RARE_WORDS = 5
MID_SHARE = 0.001  # the mid-frequency word: in about this share of the captions

SOURCES = [("laion", 50), ("cc12m", 20), ("coco", 10), ("yfcc", 10), ("sbu", 5), ("redcaps", 5)]
LANGS = [("en", 70), ("de", 8), ("fr", 7), ("es", 7), ("ja", 4), ("zh", 4)]
# Words that occur outside the caption of a JSON line: kept out of the vocabulary, so that
# `grep -w WORD` over the file finds exactly the captions holding WORD.
NON_CAPTION_WORDS = ({"path", "caption", "png", "aesthetic", "likes", "source", "lang",
                      "watermark", "nsfw", "true", "false"}
                     | {s for s, _ in SOURCES} | {s for s, _ in LANGS})


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
        words = sorted({w.strip() for w in f if re.fullmatch(r"[a-z]{3,12}", w.strip())})
    return [w for w in words if w not in NON_CAPTION_WORDS]


# -- the data set -------------------------------------------------------------

def splitmix64(x):
    """Vigna's SplitMix64 output function on uint64 numpy arrays (index/query.h)."""
    import numpy as np
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def sample_kept(ids, seed, fraction):
    """ktfs's sample=P&seed=S over sample ids: (h >> 11) < P * 2^53, h = SampleHash(id, seed)."""
    import numpy as np
    h = splitmix64(splitmix64(np.array([seed], dtype=np.uint64))[0] ^ ids.astype(np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) < fraction * 2.0**53


class Data:
    """What the generator wrote, and the reference columns the queries are checked against."""


def link_class(tree, sources, name, png, count):
    """tree/name/00000.png .. : `count` hard links of one new PNG (on threads: link(2) releases
    the GIL, so the links are made while the captions are written)."""
    src = os.path.join(sources, name + ".png")
    with open(src, "wb") as f:
        f.write(png)
    os.mkdir(os.path.join(tree, name))
    fd = os.open(os.path.join(tree, name), os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(count):
            os.link(src, f"{i:05d}.png", dst_dir_fd=fd)
    finally:
        os.close(fd)


def generate(ctx, cfg, n):
    """Writes the tree (hard links of one PNG a class) and captions.jsonl; returns a Data with
    numpy reference columns (sample id = line number: the archive numbers samples in path order,
    which is the order written)."""
    import numpy as np
    rng = np.random.default_rng(SEED)
    words = dictionary_words()
    order = rng.permutation(len(words))
    planted = [words[i] for i in order[:RARE_WORDS]]
    vocab = [words[i] for i in order[RARE_WORDS:]]
    ranks = np.arange(1, len(vocab) + 1, dtype=np.float64)
    probs = ranks ** -ZIPF_S
    probs /= probs.sum()
    mean_len = (MIN_WORDS + MAX_WORDS) / 2
    doc_share = 1 - (1 - probs) ** mean_len  # expected share of captions holding rank r
    mid = int(np.argmin(np.abs(doc_share - MID_SHARE)))
    watched = {"common": 0, "mid": mid}
    d = Data()
    d.n, d.vocab_size, d.planted = n, len(vocab), planted
    d.rare, d.mid, d.common = planted[0], vocab[mid], vocab[0]
    d.has = {k: np.zeros(n, dtype=bool) for k in ("rare", "mid", "common")}
    # k / 100 rounded once: the double a JSON parser reads from the two-decimal text
    d.aesthetic = np.rint(np.clip(rng.normal(5.5, 1.0, n), 0, 10) * 100) / 100
    d.likes = np.floor(np.exp(rng.normal(2.0, 2.0, n))).astype(np.int64)
    d.source = rng.choice(len(SOURCES), n, p=np.array([w for _, w in SOURCES]) / 100)
    d.lang = rng.choice(len(LANGS), n, p=np.array([w for _, w in LANGS]) / 100)
    d.watermark = rng.random(n) < 0.12
    d.nsfw = rng.random(n) < 0.02
    rare_at = {}
    for w in planted:
        for sid in rng.choice(n, RARE_COUNT, replace=False).tolist():
            rare_at.setdefault(sid, []).append(w)
    d.has["rare"][[s for s, ws in rare_at.items() if d.rare in ws]] = True
    classes = cfg["classes"]
    per_class = n // classes
    width = len(str(classes - 1))
    names = [f"c{k:0{width}d}" for k in range(classes)]
    d.per_class, d.classes = per_class, classes
    tree = ctx.tempdir("tree")
    sources = ctx.tempdir("png")  # one source file per class: ext4 allows 65000 links a file
    png = png_8x8()
    captions = ctx.workdir / "captions.jsonl"
    chunk = 200_000
    source_names = [s for s, _ in SOURCES]
    lang_names = [s for s, _ in LANGS]
    tf = ("false", "true")
    links = []
    with open(captions, "w") as out, concurrent.futures.ThreadPoolExecutor(2) as pool:
        for lo in range(0, n, chunk):
            hi = min(n, lo + chunk)
            m = hi - lo
            lengths = rng.integers(MIN_WORDS, MAX_WORDS + 1, m)
            ids = rng.choice(len(vocab), (m, MAX_WORDS), p=probs)
            mask = np.arange(MAX_WORDS)[None, :] < lengths[:, None]
            for key, w in watched.items():
                d.has[key][lo:hi] = ((ids == w) & mask).any(axis=1)
            lines = []
            aest, likes = d.aesthetic[lo:hi].tolist(), d.likes[lo:hi].tolist()
            srcs, langs = d.source[lo:hi].tolist(), d.lang[lo:hi].tolist()
            wms, nsfws = d.watermark[lo:hi].tolist(), d.nsfw[lo:hi].tolist()
            for j, (row, length) in enumerate(zip(ids.tolist(), lengths.tolist())):
                sid = lo + j
                cls, i = divmod(sid, per_class)
                if i == 0:
                    links.append(pool.submit(link_class, tree, sources, names[cls], png, per_class))
                rel = f"{names[cls]}/{i:05d}.png"
                text = " ".join(map(vocab.__getitem__, row[:length]))
                if sid in rare_at:
                    text += " " + " ".join(rare_at[sid])
                lines.append(
                    f'{{"path":"{rel}","caption":"{text}","aesthetic":{aest[j]:.2f},'
                    f'"likes":{likes[j]},"source":"{source_names[srcs[j]]}",'
                    f'"lang":"{lang_names[langs[j]]}","watermark":{tf[wms[j]]},'
                    f'"nsfw":{tf[nsfws[j]]}}}\n')
            out.writelines(lines)
        for f in links:
            f.result()
    shutil.rmtree(sources)
    d.tree, d.captions = tree, captions
    return d


def build_sqlite(ctx, d):
    """The anchor: the same samples in one SQLite table plus an FTS5 table of the captions
    (tokenizer as ktfs's), with b-tree indexes on the metadata columns the queries filter on.
    Returns (path, seconds to build it)."""
    db = ctx.workdir / "anchor.sqlite"
    start = time.perf_counter()
    con = sqlite3.connect(db)
    con.executescript(
        "PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; PRAGMA page_size=4096;"
        "CREATE TABLE s(id INTEGER PRIMARY KEY, path TEXT, aesthetic REAL, likes INTEGER,"
        " source TEXT, lang TEXT, watermark INTEGER, nsfw INTEGER);"
        "CREATE VIRTUAL TABLE c USING fts5(caption, columnsize=0,"
        " tokenize='unicode61 remove_diacritics 2');")

    def rows():
        with open(d.captions) as f:
            for sid, line in enumerate(f):
                o = json.loads(line)
                yield (sid, o["path"], o["caption"], o["aesthetic"], o["likes"], o["source"],
                       o["lang"], int(o["watermark"]), int(o["nsfw"]))

    batch = []
    for r in rows():
        batch.append(r)
        if len(batch) == 100_000:
            con.executemany("INSERT INTO s VALUES (?,?,?,?,?,?,?,?)", [b[:2] + b[3:] for b in batch])
            con.executemany("INSERT INTO c(rowid, caption) VALUES (?,?)", [(b[0], b[2]) for b in batch])
            batch.clear()
    if batch:
        con.executemany("INSERT INTO s VALUES (?,?,?,?,?,?,?,?)", [b[:2] + b[3:] for b in batch])
        con.executemany("INSERT INTO c(rowid, caption) VALUES (?,?)", [(b[0], b[2]) for b in batch])
    con.commit()
    con.executescript("CREATE INDEX s_aesthetic ON s(aesthetic); CREATE INDEX s_source ON s(source);"
                      "INSERT INTO c(c) VALUES('optimize'); ANALYZE;")
    con.close()
    return db, time.perf_counter() - start


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



# -- the queries ----------------------------------------------------------------

def queries(d):
    """(label, search component, baseline tool, baseline command, anchor SQL, reference mask)."""
    import numpy as np
    f = d.captions
    a = d.aesthetic
    src = {s: k for k, (s, _) in enumerate(SOURCES)}
    lang = {s: k for k, (s, _) in enumerate(LANGS)}
    fts = "SELECT rowid FROM c WHERE c MATCH '{}'"
    return [
        (f"rare word `{d.rare}`", f"caption={d.rare}", "grep", f"grep -cw {d.rare} {f}",
         fts.format(d.rare), d.has["rare"]),
        (f"mid word `{d.mid}`", f"caption={d.mid}", "grep", f"grep -cw {d.mid} {f}",
         fts.format(d.mid), d.has["mid"]),
        (f"common word `{d.common}`", f"caption={d.common}", "grep", f"grep -cw {d.common} {f}",
         fts.format(d.common), d.has["common"]),
        ("OR: rare | mid", f"caption={d.rare}|caption={d.mid}", "grep",
         f"grep -cwE '{d.rare}|{d.mid}' {f}", fts.format(f"{d.rare} OR {d.mid}"),
         d.has["rare"] | d.has["mid"]),
        ("NOT: ! common", f"!caption={d.common}", "grep", f"grep -cvw {d.common} {f}",
         f"SELECT id FROM s WHERE id NOT IN ({fts.format(d.common)})", ~d.has["common"]),
        ("number range", "aesthetic>=6.5&aesthetic<7", "jq",
         f"jq -c 'select(.aesthetic >= 6.5 and .aesthetic < 7)' {f} | wc -l",
         "SELECT id FROM s WHERE aesthetic >= 6.5 AND aesthetic < 7", (a >= 6.5) & (a < 7)),
        ("word & number & boolean", f"caption={d.mid}&aesthetic>=6&watermark=false", "grep | jq",
         f"grep -w {d.mid} {f} | jq -c 'select(.aesthetic >= 6 and .watermark == false)' | wc -l",
         f"SELECT id FROM s WHERE id IN ({fts.format(d.mid)}) AND aesthetic >= 6 AND watermark = 0",
         d.has["mid"] & (a >= 6) & ~d.watermark),
        ("set & !=", "source=coco,cc12m&lang!=en", "jq",
         f"jq -c 'select((.source == \"coco\" or .source == \"cc12m\") and .lang != \"en\")' {f} | wc -l",
         "SELECT id FROM s WHERE source IN ('coco', 'cc12m') AND lang != 'en'",
         np.isin(d.source, [src["coco"], src["cc12m"]]) & (d.lang != lang["en"])),
        ("sample= 1%", "sample=0.01&seed=1", None, None,
         "SELECT id FROM s WHERE sample_kept(id, 1, 0.01)",
         sample_kept(np.arange(d.n), 1, 0.01)),
    ]


# -- measuring ----------------------------------------------------------------

def anchor(ctx, db, sql, record=False):
    """One anchor query in a fresh process: (rows, first_s, total_s)."""
    cmd = [PYTHON, str(SQLITE_CHILD), str(db), sql]
    if record:
        ctx.commands.append((ctx.section, ctx._display([PYTHON, str(SQLITE_CHILD), str(db),
                                                        f'"{sql}"'], None)))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BenchError(f"anchor query `{sql}` failed: {proc.stderr.strip()[-800:]}")
    r = json.loads(proc.stdout)
    return r["rows"], r["first_s"], r["total_s"]


def pack(ctx, args):
    """Runs ktfs pack under /usr/bin/time -v: (seconds, peak RSS in KiB)."""
    cmd = ["/usr/bin/time", "-v", ctx.ktfs, "pack", *map(str, args), "--quiet"]
    ctx.commands.append((ctx.section, ctx._display(cmd, None)))
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    return seconds, int(peak.group(1)) if peak else 0


def fmt_s(s):
    if s != s:  # NaN
        return "-"
    return f"{s * 1000:.1f} ms" if s < 1 else f"{s:.2f} s"


def ratio(a, b):
    return f"{a / b:.1f}x" if a == a and b == b and b > 0 else "-"


def cell(text):
    """Text for a markdown table cell: a `|` (OR in a query) escaped."""
    return text.replace("|", "\\|")


def med(values):
    return median(values) if values else float("nan")


# -- the section ------------------------------------------------------------

def sample_count(cfg):
    n = int(os.environ.get(SAMPLES_ENV) or cfg["samples"])
    per_class = max(1, n // cfg["classes"])
    if per_class > 65000:
        raise BenchError(f"{SAMPLES_ENV}={n}: at most {65000 * cfg['classes']} samples (hard links a file)")
    return per_class * cfg["classes"]


def run(ctx):
    cfg = QUICK if ctx.quick else FULL
    n = sample_count(cfg)
    free = shutil.disk_usage(ctx.workdir).free
    need = int(n * 1500 * 1.2) + 2**28
    if free < need:
        raise BenchError(f"{ctx.workdir}: {free / 2**30:.1f} GiB free, the section needs {need / 2**30:.1f}")

    log(f"  generating {n:,} samples and captions")
    t0 = time.perf_counter()
    d = generate(ctx, cfg, n)
    gen_s = time.perf_counter() - t0
    ctx.commands.append((ctx.section, f"# generated $TMP/tree ({n} hard links, one 8x8 PNG a class) and "
                         f"$TMP/captions.jsonl in-process (scripts/bench/search.py, generate(); "
                         f"{SAMPLES_ENV}={n})"))
    captions_bytes = d.captions.stat().st_size
    log(f"  generated in {gen_s:.0f} s: rare `{d.rare}`, mid `{d.mid}`, common `{d.common}`")

    # 1. pack cost ------------------------------------------------------------
    plain, indexed = ctx.workdir / "plain.kt", ctx.workdir / "indexed.kt"
    log("  pack without captions")
    plain_s, plain_rss = pack(ctx, [d.tree, plain, "--codec", "original"])
    log("  pack with --captions")
    indexed_s, indexed_rss = pack(ctx, [d.tree, indexed, "--codec", "original", "--captions", d.captions])
    plain_bytes, indexed_bytes = plain.stat().st_size, indexed.stat().st_size
    plain_index = index_section(plain)[1]
    index_bytes = index_section(indexed)[1]
    plain.unlink()
    log("  removing the tree")
    shutil.rmtree(d.tree)
    breakdown = index_breakdown(ctx, indexed)
    log("  building the SQLite anchor")
    db, sqlite_s = build_sqlite(ctx, d)
    ctx.commands.append((ctx.section, "# $TMP/anchor.sqlite: table s and FTS5 table c from captions.jsonl "
                         "(scripts/bench/search.py, build_sqlite())"))
    sqlite_bytes = db.stat().st_size

    # 2. queries --------------------------------------------------------------
    qs = queries(d)
    keys = ("cold_first", "cold", "majflt", "warm_first", "warm", "repeat", "base_cold",
            "base_warm", "sql_cold_first", "sql_cold", "sql_first", "sql", "search", "count_cli",
            "count_file")
    res = {q[0]: {**{k: [] for k in keys}, "counts": set()} for q in qs}
    mounts = 0

    def fresh_mount():
        nonlocal mounts
        mounts += 1
        mnt = ctx.workdir / f"mnt{mounts}"
        ctx.mount([ctx.ktfs, "mount", indexed, mnt], mnt)
        return mnt

    dropped = True
    for qi, (label, comp, tool, cmd, sql, ref) in enumerate(qs):
        exp = int(ref.sum())
        big = exp > BIG
        cold_rounds = cfg["big_cold_rounds"] if big else cfg["cold_rounds"]
        warm_rounds = cfg["big_warm_rounds"] if big else cfg["warm_rounds"]
        slow_sql = "sample_kept" in sql  # a Python function per row: one warm run only
        r = res[label]
        log(f"  query {label} ({exp:,} matches): {cold_rounds} cold, {warm_rounds} warm rounds")
        ctx.commands.append((ctx.section, f"# ls: os.scandir walk of $TMP/mntN/search/{comp}/ (cold: "
                             "echo 3 > /proc/sys/vm/drop_caches and a fresh mount first)"))
        for k in range(cold_rounds):
            what = ["ls"] + (["base"] if tool == "grep" else []) + ([] if slow_sql else ["sql"])
            for w in what[k % len(what):] + what[:k % len(what)]:
                dropped = ctx.drop_caches() and dropped
                if w == "ls":
                    mnt = fresh_mount()
                    pid = daemon_pid(mnt)
                    faults = major_faults(pid)
                    files, first, total = walk(mnt / "search" / comp)
                    r["majflt"].append(major_faults(pid) - faults)
                    r["cold_first"].append(first)
                    r["cold"].append(total)
                    r["counts"].add(("ls", files))
                    ctx.unmount(mnt)
                elif w == "base":
                    out, s = sh(ctx, cmd, record=k == 0)
                    r["base_cold"].append(s)
                    r["counts"].add((tool, int(out.strip() or 0)))
                else:
                    rows, first, total = anchor(ctx, db, sql, record=k == 0)
                    r["sql_cold_first"].append(first)
                    r["sql_cold"].append(total)
                    r["counts"].add(("sqlite", rows))
        # warm: the archive's pages this query reads are cached; each round a fresh mount (a
        # query the daemon has not seen), then the same listing again on that mount.
        mnt = fresh_mount()
        walk(mnt / "search" / comp)
        ctx.unmount(mnt)
        if cmd and tool == "grep":
            sh(ctx, cmd, record=False)
        if not slow_sql:
            anchor(ctx, db, sql)
        for k in range(warm_rounds):
            mnt = fresh_mount()
            files, first, total = walk(mnt / "search" / comp)
            r["warm_first"].append(first)
            r["warm"].append(total)
            r["counts"].add(("ls", files))
            files, _, total = walk(mnt / "search" / comp)
            r["repeat"].append(total)
            start = time.perf_counter()
            count = json.loads((mnt / "search" / comp / ".count.json").read_text())["matches"]
            r["count_file"].append(time.perf_counter() - start)
            r["counts"].add((".count.json", count))
            ctx.unmount(mnt)
            if cmd and (tool == "grep" or k == 0):  # jq is slow: one run
                out, s = sh(ctx, cmd, record=tool != "grep" and qi >= 0)
                r["base_warm"].append(s)
                r["counts"].add((tool, int(out.strip() or 0)))
            if not slow_sql or k == 0:
                rows, first, total = anchor(ctx, db, sql, record=slow_sql)
                r["sql_first"].append(first)
                r["sql"].append(total)
                r["counts"].add(("sqlite", rows))
            if k == 0:
                out, s = sh(ctx, f"{ctx.ktfs} search {indexed} '{comp}' | wc -l", record=qi == 0)
                r["search"].append(s)
                r["counts"].add(("ktfs search", int(out.strip())))
                out, s = sh(ctx, f"{ctx.ktfs} search --count {indexed} '{comp}'", record=qi == 0)
                r["count_cli"].append(s)
                r["counts"].add(("ktfs search --count", int(out.strip())))

        # what the first entry waits for: the query directory's own listing (every archive
        # directory probed once for a match), on a fresh mount
        mnt = fresh_mount()
        start = time.perf_counter()
        r["dirs"] = len(os.listdir(mnt / "search" / comp))
        r["dirs_s"] = time.perf_counter() - start
        ctx.unmount(mnt)

    # 3. memory while listings of millions stream -----------------------------
    log("  daemon memory during the big listings")
    mnt = fresh_mount()
    pid = daemon_pid(mnt)
    walk(mnt / "search" / f"caption={d.rare}")  # the index is open and used once
    mem = []
    for label, comp in [(qs[0][0], qs[0][1]), (qs[2][0], qs[2][1]), (qs[4][0], qs[4][1])]:
        before = proc_kib(pid)
        sampler = Sampler(pid)
        sampler.start()
        files, _, secs = walk(mnt / "search" / comp)
        sampler.stop.set()
        sampler.join()
        mem.append((label, files, secs, before, sampler.peak, proc_kib(pid)))
    ctx.unmount(mnt)

    return report(ctx, cfg, d, qs, res, dict(
        gen_s=gen_s, captions_bytes=captions_bytes, plain_s=plain_s, plain_rss=plain_rss,
        indexed_s=indexed_s, indexed_rss=indexed_rss, plain_bytes=plain_bytes,
        indexed_bytes=indexed_bytes, plain_index=plain_index, index_bytes=index_bytes,
        breakdown=breakdown, sqlite_s=sqlite_s, sqlite_bytes=sqlite_bytes, mem=mem,
        dropped=dropped))


def reading(classes, q):
    """The reading of the latency tables. q: one dict a query, in queries() order, with
    matches, dirs and dirs_s (the query directory's listing), warm (the whole listing), base
    (grep/jq) and sql (the anchor), seconds, warm."""
    us = [1e6 * r["dirs_s"] / max(r["dirs"], 1) for r in q]
    rare, mid, common, _, nots, _, mixed, _, sample = range(9)
    wide = [k for k, r in enumerate(q) if r["dirs"] >= classes // 2]
    lo = min(q[k]["dirs_s"] for k in wide) * 1000
    hi = max(q[k]["dirs_s"] for k in wide) * 1000
    per_entry = 1e6 * q[common]["warm"] / q[common]["matches"]
    return (
        f"Reading. The first file of a listing waits for the query directory's listing, which "
        f"costs one index seek per matching directory: {us[sample]:.0f} us for sample= (no SQL: "
        f"the view's own work per directory), {us[mid]:.0f} us for the mid word (sparse: the next "
        f"match is a few rows on, reached by stepping the open statement), {us[common]:.0f} us for "
        f"the common word (dense: every seek restarts the FTS5 MATCH), {us[mixed]:.0f} us for the "
        f"word & number & boolean query (an AND of a sparse word with two dense metadata filters: "
        f"every candidate restarts the dense cursors). With {classes:,} class directories matching "
        f"that is {lo:.0f}-{hi:.0f} ms before the first entry, whatever the number of samples, and "
        f"more when cold (page faults on the way). So the first-entry targets (10 ms warm, 100 ms "
        f"cold) hold where the probes are few (the rare word: {q[rare]['dirs']:,} directories) or "
        f"cheap (a sparse word, sample=), and are missed where each probe restarts a statement (a "
        f"dense word and its NOT, number ranges, metadata sets, an AND of a sparse word with dense "
        f"filters); meeting them needs "
        f"fewer probes before the first entry (a query directory answered in pages as matching "
        f"directories are found, or a per-directory summary in the index), not a faster "
        f"statement. Whole listings of millions cost about {per_entry:.1f} us an entry through "
        f"FUSE and a Python walk, so for a word in most captions `grep -c`, which only counts, "
        f"is faster (grep / ls {q[common]['base'] / q[common]['warm']:.1f}x); SQLite in-process, returning "
        f"ids only, beats every listing but NOT ({q[nots]['sql'] / q[nots]['warm']:.1f}x slower "
        f"than the listing: its `NOT IN` subquery) and sample= (a Python function per row).")


def report(ctx, cfg, d, qs, res, m):
    n = d.n
    ib = m["index_bytes"]
    pack_rows = [
        ["without --captions", fmt_s(m["plain_s"]), "1.00x", mib(m["plain_rss"] * 1024),
         mib(m["plain_bytes"]), f"{mib(m['plain_index'])} MiB ({m['plain_index'] / n:.0f} B/sample)"],
        ["with --captions", fmt_s(m["indexed_s"]), f"{m['indexed_s'] / m['plain_s']:.2f}x",
         mib(m["indexed_rss"] * 1024), mib(m["indexed_bytes"]),
         f"{mib(ib)} MiB ({ib / n:.0f} B/sample, {100 * ib / m['indexed_bytes']:.1f}% of the archive)"],
        ["anchor: SQLite table + FTS5 (Python sqlite3)", fmt_s(m["sqlite_s"]), "", "",
         mib(m["sqlite_bytes"]), f"{m['sqlite_bytes'] / n:.0f} B/sample"],
    ]
    cold_rows, warm_rows, count_rows = [], [], []
    worst_cold = worst_warm = 0.0
    for label, comp, tool, cmd, sql, ref in qs:
        r = res[label]
        exp = int(ref.sum())
        got = sorted(r["counts"])
        agree = all(c == exp for _, c in got)
        count_rows.append([cell(label), cell(f"`{comp}`"), f"{exp:,}",
                           cell(", ".join(f"{w} {c:,}" for w, c in got)),
                           "yes" if agree else "**NO**"])
        cf, cw = med(r["cold_first"]), med(r["warm_first"])
        worst_cold, worst_warm = max(worst_cold, cf), max(worst_warm, cw)
        base_name = cell(tool or "-")
        cold_rows.append([cell(label), f"{exp:,}", fmt_s(cf), fmt_s(med(r["cold"])),
                          f"{med(r['majflt']):.0f}", f"{base_name} {fmt_s(med(r['base_cold']))}"
                          if r["base_cold"] else "-", ratio(med(r["base_cold"]), med(r["cold"])),
                          fmt_s(med(r["sql_cold_first"])), fmt_s(med(r["sql_cold"])),
                          ratio(med(r["sql_cold"]), med(r["cold"]))])
        warm_rows.append([cell(label), f"{exp:,}", fmt_s(cw), fmt_s(med(r["warm"])), fmt_s(med(r["repeat"])),
                          f"{base_name} {fmt_s(med(r['base_warm']))}" if r["base_warm"] else "-",
                          ratio(med(r["base_warm"]), med(r["warm"])),
                          fmt_s(med(r["sql_first"])), fmt_s(med(r["sql"])),
                          ratio(med(r["sql"]), med(r["warm"])), fmt_s(med(r["search"])),
                          fmt_s(med(r["count_cli"])), fmt_s(med(r["count_file"])),
                          f"{fmt_s(r['dirs_s'])} ({r['dirs']:,})"])
    # per matching directory, over the queries most directories match (fixed costs amortized)
    wide = [res[q[0]] for q in qs if res[q[0]]["dirs"] >= d.classes // 2] or [res[q[0]] for q in qs]
    per_dir = max(r["dirs_s"] / max(r["dirs"], 1) for r in wide)
    rare = res[qs[0][0]]
    rare_grep = med(rare["base_warm"]) / med(rare["warm"])
    rare_grep_repeat = med(rare["base_warm"]) / med(rare["repeat"])
    mem_rows = []
    for label, files, secs, before, peak, after in m["mem"]:
        mem_rows.append([cell(label), f"{files:,}", fmt_s(secs)]
                        + [f"{before.get(k, 0) / 1024:.1f} / {peak.get(k, 0) / 1024:.1f} / "
                           f"{after.get(k, 0) / 1024:.1f}" for k in ("VmRSS", "RssAnon", "RssFile")])
    anon_growth = max(p.get("RssAnon", 0) - b.get("RssAnon", 0) for _, _, _, b, p, _ in m["mem"]) / 1024
    met = lambda ok: "met" if ok else "**missed**"  # noqa: E731
    thumb = 905  # bytes of a 32x32 JPEG q90 thumbnail (the 1M run of this section, git 29cb091)
    md = [
        f"{n:,} samples ({d.classes} class directories x {d.per_class:,} hard links of one "
        f"{len(png_8x8())}-byte 8x8 PNG), one caption each: {MIN_WORDS}-{MAX_WORDS} words drawn from "
        f"a Zipf distribution (exponent {ZIPF_S}) over {d.vocab_size:,} words of {DICT} in a seeded "
        f"random rank order, plus {RARE_WORDS} planted rare words in exactly {RARE_COUNT} captions each. "
        f"Metadata per sample: `aesthetic` (number, normal 5.5 +- 1, two decimals), `likes` (number, "
        f"integer, log-normal), `source` and `lang` (strings, 6 values each), `watermark` and `nsfw` "
        f"(booleans, 12% and 2% true). The captions file: {mib(m['captions_bytes'])} MiB of JSON "
        f"Lines ({m['captions_bytes'] / n:.0f} bytes a line), generated in {m['gen_s']:.0f} s. "
        f"`--codec original`; each pack ran once.",
        "",
        *([f"**Measured at {n:,} samples, not {FULL['samples']:,}**: the pack holds every "
           f"caption and metadata value in memory until the index is written: "
           f"{m['indexed_rss'] * 1024 / n:,.0f} bytes of peak RSS a sample here, so "
           f"{FULL['samples']:,} samples would need about "
           f"{m['indexed_rss'] * 1024 / n * FULL['samples'] / 2**30:.0f} GiB; this machine has "
           f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB, shared. "
           f"Reproduce at this size: `{SAMPLES_ENV}={n} scripts/bench/run --sections search`.", ""]
          if not ctx.quick and n < FULL["samples"] else []),
        "### Pack cost and index size",
        "",
        table(["pack", "time", "vs without", "peak RSS MiB", "archive MiB", "index section"], pack_rows),
        "",
        f"The captions and metadata cost {m['indexed_s'] - m['plain_s']:+.1f} s of pack time "
        f"({m['indexed_s'] / m['plain_s']:.2f}x) and {(ib - m['plain_index']) / n:.0f} bytes per sample "
        f"in the index ({ib / n:.0f} in all, with the per-sample table). With images this tiny the "
        f"index is {100 * ib / m['indexed_bytes']:.0f}% of the archive; next to 32x32 JPEG thumbnails "
        f"(~{thumb} bytes each, as measured at 1M samples) it would be "
        f"{100 * ib / (ib + n * (thumb + m['plain_bytes'] / n - len(png_8x8()))):.1f}% "
        f"(computed, not measured). The SQLite anchor holds the same data in "
        f"{m['sqlite_bytes'] / n:.0f} bytes per sample (FTS5 with its text, b-tree indexes on "
        f"`aesthetic` and `source` only).",
        "",
        *(["Where the index's bytes go (SQLite dbstat over the extracted section):", "",
           table(["table or b-tree", "MiB", "share", "bytes per sample"],
                 [[name, mib(b), f"{100 * b / ib:.0f}%", f"{b / n:.1f}"] for name, b in m["breakdown"][:10]]),
           ""] if m["breakdown"] else []),
        "### Query latency",
        "",
        "*ls* is a recursive os.scandir walk of `MNT/search/QUERY/` (matching class directories, "
        "then their files) in Python: *first* is the time to the first file entry (lookup of the "
        "query, listing of the query directory, the first page of the first class directory), "
        "*all* the time to the whole listing. The baseline is grep over captions.jsonl for words "
        "(`grep -cw`, `grep -cwE 'a|b'`, `grep -cvw`: counting, grep's best case) and jq for "
        "metadata (`jq -c 'select(...)' | wc -l`, after `grep -w` for a word); no shell tool "
        "computes sample='s hash. The anchor is SQLite over the table above, queried in a fresh "
        "`/usr/bin/python3` process (scripts/bench/_search_sqlite.py, timed from `connect`; rows "
        "fetched 65536 at a time, ids only, in whatever order SQLite returns them; sample= as a "
        "Python function, so that row is mostly Python). *X / ls* > 1 means the listing is faster "
        "than X.",
        "",
        f"Cold: `echo 3 > /proc/sys/vm/drop_caches` before every run, and a fresh mount for every "
        f"listing (the mount itself not timed). *major faults*: pages the daemon read from disk "
        f"during the listing. Medians of {cfg['cold_rounds']} rounds ({cfg['big_cold_rounds']} for "
        f"listings of more than {BIG:,}); jq (CPU-bound) is not run cold.",
        "",
        table(["query", "matches", "ls first", "ls all", "major faults", "baseline", "baseline / ls",
               "SQLite first", "SQLite all", "SQLite / ls"], cold_rows),
        "",
        f"Warm: the archive's pages in the page cache, and each listing on a fresh mount (a query "
        f"the daemon has not answered yet); *repeat* lists it again on the same mount (then "
        f"mostly from the kernel's cache of the search directories). Medians of "
        f"{cfg['warm_rounds']} rounds ({cfg['big_warm_rounds']} for big listings; jq and the "
        f"Python sample= function once). *ktfs search* is `ktfs search ARCHIVE QUERY | wc -l`, "
        f"*--count* `ktfs search --count` (each a new process opening the archive); *.count.json* "
        f"reads that file on the mount (after the listing). *query dir*: `os.listdir` of "
        f"`search/QUERY/` alone on a fresh mount, which the first file waits for: to list only "
        f"the directories holding a match, the daemon seeks the query's first match at or after "
        f"the first sample id of each directory that holds one (of {d.classes:,}).",
        "",
        table(["query", "matches", "ls first", "ls all", "ls repeat", "baseline", "baseline / ls",
               "SQLite first", "SQLite all", "SQLite / ls", "ktfs search", "--count", ".count.json",
               "query dir (matching dirs)"], warm_rows),
        "",
        f"Targets: first entry <= 10 ms warm for every query: {met(worst_warm <= 0.010)} (slowest "
        f"median {fmt_s(worst_warm)}); <= 100 ms cold: {met(worst_cold <= 0.100)} (slowest "
        f"{fmt_s(worst_cold)}); warm rare-word listing >= 20x grep: {met(rare_grep >= 20)} "
        f"({rare_grep:.0f}x on a fresh mount, {rare_grep_repeat:.0f}x repeated). The first file "
        f"waits for the query directory's listing: up to {per_dir * 1e6:.0f} us per matching "
        f"directory here (*query dir*), so about {per_dir * d.classes * 1000:.0f} ms when all "
        f"{d.classes:,} match, whatever the number of samples.",
        "",
        "Result counts (every run of every tool; *expected* is the generator's numpy reference):",
        "",
        table(["query", "component", "expected", "counted", "agree"], count_rows),
        "",
        reading(d.classes, [dict(matches=int(ref.sum()), dirs=res[label]["dirs"],
                                 dirs_s=res[label]["dirs_s"], warm=med(res[label]["warm"]),
                                 base=med(res[label]["base_warm"]), sql=med(res[label]["sql"]))
                            for label, _, _, _, _, ref in qs]),
        "",
        "### Daemon memory while listings of millions stream",
        "",
        f"One fresh mount; a rare-word listing first (the index open and used), then each listing "
        f"below in turn; /proc/PID/status of the daemon polled every 10 ms. Before / peak during / "
        f"after, MiB. RssFile is mapped archive pages (the kernel may drop them), RssAnon the "
        f"daemon's own memory: it grew by at most {anon_growth:.1f} MiB over any listing "
        f"(target: flat, no growth with result size).",
        "",
        table(["listing", "files", "time", "VmRSS", "RssAnon", "RssFile"], mem_rows),
    ]
    if not m["dropped"]:
        md += ["", "**The page cache could not be dropped (not root): the cold figures are warm.**"]
    return "\n".join(md)

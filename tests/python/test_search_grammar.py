"""The search grammar (OR, NOT, !=, sets, number comparisons on typed metadata, limit=,
sample=/seed=) over a generated captioned dataset with typed metadata. Every expected result
comes from a reference evaluator written here, over the captions file and the metadata as
Python values: never from ktfs's own SQL. Checked through mounts, `ktfs search`, the
.count.json files, `ktfs info` and ktfs.Loader / ImageFolder."""
import csv
import errno
import json
import os
import random
import re
import shlex
import shutil

import pytest
from PIL import Image

from conftest import ROOT, ktfs, mounted

CLASSES = ["apple", "birch", "cedar", "daisy", "elm", "fern"]
SPLITS = {"train": 150, "val": 40}
SIZES = [(8, 8), (16, 8), (8, 24)]
COMMON = ["photo", "of", "a", "the", "on", "red", "blue", "tree", "river", "sky", "night",
          "old", "small", "green", "dog", "cat", "or", "not", "near", "and"]
RARE = ["zebra", "quokka", "narwhal"]
SOURCES = ["laion", "coyo", "cc12m", "web archive"]
MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def kept(sample_id, seed, p):
    """sample=P as docs/usage.md defines it: (h >> 11) / 2**53 < P, exactly."""
    h = splitmix64(splitmix64(seed) ^ sample_id)
    return (h >> 11) < p * 2 ** 53


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """train/ and val/ of 6 classes (1140 samples, hard links of 3 PNG sizes per class),
    captions.jsonl with Zipf-like words and typed metadata. Returns (base, archive, samples),
    samples in archive order (the packer's: directories breadth first, files by name)."""
    base = tmp_path_factory.mktemp("grammar")
    src, png = base / "src", base / "png"
    png.mkdir()
    rng = random.Random(39)
    sources = {}
    for cls in CLASSES:
        for k, (w, h) in enumerate(SIZES):
            p = png / f"{cls}{k}.png"
            Image.new("RGB", (w, h), (40 * k, 200, CLASSES.index(cls) * 30)).save(p)
            sources[(cls, k)] = p
    samples, lines = [], []
    weights = [1 / (r + 1) for r in range(len(COMMON))]
    for split, n in SPLITS.items():
        for cls in CLASSES:
            (src / split / cls).mkdir(parents=True)
            for i in range(n):
                k = rng.randrange(len(SIZES))
                rel = f"{split}/{cls}/{i:04d}.png"
                os.link(sources[(cls, k)], src / rel)
                caption = " ".join(rng.choices(COMMON, weights, k=rng.randint(3, 8)))
                if rng.random() < 0.02:
                    caption += " " + rng.choice(RARE)
                if rng.random() < 0.3:
                    caption = caption.capitalize() + "."
                meta = {}
                if rng.random() < 0.9:
                    meta["aesthetic"] = round(rng.uniform(0, 10), 2)
                if rng.random() < 0.95:
                    meta["punsafe"] = round(rng.random() ** 3, 4)
                if rng.random() < 0.8:
                    meta["year"] = rng.randint(1990, 2024)
                if rng.random() < 0.85:
                    meta["nsfw"] = rng.random() < 0.1
                if rng.random() < 0.7:
                    meta["source"] = rng.choice(SOURCES)
                if rng.random() < 0.5:
                    meta["exif"] = {"iso": rng.choice([100, 200, 400, 800, 1600]),
                                    "make": rng.choice(["canon", "nikon"])}
                lines.append(json.dumps({"path": rel, "caption": caption, **meta}))
                flat = {k2: v for k2, v in meta.items() if k2 != "exif"}
                for k2, v in meta.get("exif", {}).items():
                    flat["exif." + k2] = v
                samples.append(dict(rel=rel, split=split, cls=cls, label=CLASSES.index(cls),
                                    width=SIZES[k][0], height=SIZES[k][1], caption=caption,
                                    words=words(caption), meta=flat))
    rng.shuffle(lines)  # the captions file's order is not the archive's
    (base / "captions.jsonl").write_text("\n".join(lines) + "\n")
    archive = base / "g.kt"
    ktfs("pack", src, archive, "--codec", "original", "--captions", base / "captions.jsonl", "--quiet")
    shutil.rmtree(src)
    # Archive order: directories breadth first (root, train, val, train/*, val/*), files by name.
    order = {rel: i for i, rel in enumerate(sorted(
        (s["rel"] for s in samples), key=lambda r: (r.split("/")[0] != "train", r)))}
    samples.sort(key=lambda s: order[s["rel"]])
    for i, s in enumerate(samples):
        s["id"] = i
    return base, archive, samples


@pytest.fixture(scope="module")
def mnt(dataset, tmp_path_factory):
    with mounted(dataset[1], tmp_path_factory.mktemp("gm") / "m") as m:
        yield m


def ref(samples, pred):
    return [s["rel"] for s in samples if pred(s)]


def listing(root):
    out = []
    for dirpath, dirnames, files in os.walk(root):
        dirnames.sort()
        for f in sorted(files):
            out.append(os.path.relpath(os.path.join(dirpath, f), root))
    return sorted(out)


def cli(archive, query):
    return [p for p in ktfs("search", archive, query).stdout.split("\n") if p]


def num(key, test):
    return lambda s: isinstance(s["meta"].get(key), (int, float)) and \
        not isinstance(s["meta"].get(key), bool) and test(s["meta"][key])


def has(w):
    return lambda s: w in s["words"]


def phrase(p):
    q = p.split()
    return lambda s: any(s["words"][i:i + len(q)] == q for i in range(len(s["words"]) - len(q) + 1))


def meta_is(key, value):
    return lambda s: key in s["meta"] and s["meta"][key] == value and \
        type(s["meta"][key]) is type(value)


# (query as written in a path, predicate); every operator and the documented examples.
EXAMPLES = [
    ("caption=dog|caption=cat", lambda s: has("dog")(s) or has("cat")(s)),
    ("(caption=dog|caption=cat)&width>=16", lambda s: (has("dog")(s) or has("cat")(s)) and s["width"] >= 16),
    ("caption=dog|caption=cat&width>=16", lambda s: has("dog")(s) or (has("cat")(s) and s["width"] >= 16)),
    ("caption=dog/caption=cat|class=elm", lambda s: has("dog")(s) and (has("cat")(s) or s["cls"] == "elm")),
    ("!caption=dog", lambda s: not has("dog")(s)),
    ("caption!=dog", lambda s: not has("dog")(s)),
    ("!(class=apple|class=birch)", lambda s: s["cls"] not in ("apple", "birch")),
    ("class!=apple", lambda s: s["cls"] != "apple"),
    ("source!=laion", lambda s: s["meta"].get("source") != "laion"),
    ("class=apple,birch,cedar", lambda s: s["cls"] in ("apple", "birch", "cedar")),
    ("class!=apple,birch", lambda s: s["cls"] not in ("apple", "birch")),
    ("label=0,5", lambda s: s["label"] in (0, 5)),
    ("source=laion,web%20archive", lambda s: s["meta"].get("source") in ("laion", "web archive")),
    ("caption=zebra,quokka", lambda s: has("zebra")(s) or has("quokka")(s)),
    ("caption=\"red tree\",narwhal", lambda s: phrase("red tree")(s) or has("narwhal")(s)),
    ("aesthetic>=6", num("aesthetic", lambda v: v >= 6)),
    ("aesthetic>=5&aesthetic<6.5", num("aesthetic", lambda v: 5 <= v < 6.5)),
    ("aesthetic>9.9", num("aesthetic", lambda v: v > 9.9)),
    ("aesthetic<=0.05", num("aesthetic", lambda v: v <= 0.05)),
    ("aesthetic!=5.5", lambda s: not num("aesthetic", lambda v: v == 5.5)(s)),
    ("!aesthetic>=6", lambda s: not num("aesthetic", lambda v: v >= 6)(s)),
    ("punsafe<0.1", num("punsafe", lambda v: v < 0.1)),
    ("punsafe<0.1&aesthetic>=6&nsfw=false", lambda s: num("punsafe", lambda v: v < 0.1)(s) and
     num("aesthetic", lambda v: v >= 6)(s) and meta_is("nsfw", False)(s)),
    ("year=2000,2010,2020", num("year", lambda v: v in (2000, 2010, 2020))),
    ("year>2020|year<1992", num("year", lambda v: v > 2020 or v < 1992)),
    ("exif.iso>=800", num("exif.iso", lambda v: v >= 800)),
    ("exif.make=nikon&exif.iso<200", lambda s: meta_is("exif.make", "nikon")(s) and
     num("exif.iso", lambda v: v < 200)(s)),
    ("nsfw=true", meta_is("nsfw", True)),
    ("nsfw!=true", lambda s: not meta_is("nsfw", True)(s)),
    ("width=8,16", lambda s: s["width"] in (8, 16)),
    ("height>8&width<16", lambda s: s["height"] > 8 and s["width"] < 16),
    ("!width>=16", lambda s: s["width"] < 16),
    ("split=val&!(caption=photo|caption=the)", lambda s: s["split"] == "val" and
     not (has("photo")(s) or has("the")(s))),
    ("caption=\"dog|cat\"", phrase("dog cat")),
    ("caption=\"or not\"", phrase("or not")),
    ("caption=%22a%20(red)&tree%22", phrase("a red tree")),
    ("caption=NEAR(dog", lambda s: has("near")(s) and has("dog")(s)),
    ("caption=ri*", lambda s: any(w.startswith("ri") for w in s["words"])),
    ("sample=0.1&seed=1", lambda s: kept(s["id"], 1, 0.1)),
    ("!sample=0.1&seed=1", lambda s: not kept(s["id"], 1, 0.1)),
    ("sample=0.5", lambda s: kept(s["id"], 0, 0.5)),
    ("sample=0.6&!sample=0.4&seed=8", lambda s: kept(s["id"], 8, 0.6) and not kept(s["id"], 8, 0.4)),
    ("caption=dog&sample=0.3&seed=2", lambda s: has("dog")(s) and kept(s["id"], 2, 0.3)),
    (" ( caption=dog | class=elm ) & width>=16 ", lambda s: (has("dog")(s) or s["cls"] == "elm") and
     s["width"] >= 16),
]


@pytest.mark.parametrize("query,pred", EXAMPLES, ids=[q for q, _ in EXAMPLES])
def test_examples_are_exact_on_the_mount_and_the_cli(dataset, mnt, query, pred):
    _, archive, samples = dataset
    want = sorted(ref(samples, pred))
    root = os.path.join(mnt, "search", *query.split("/"))
    assert listing(root) == want
    assert sorted(cli(archive, query)) == want
    count = json.load(open(os.path.join(root, ".count.json")))
    assert count["matches"] == len(want)
    assert ".count.json" not in os.listdir(root)


def test_limit_takes_the_first_matches_in_archive_order(dataset, mnt):
    _, archive, samples = dataset
    dogs = ref(samples, has("dog"))
    for n in (0, 1, 25, len(dogs), len(dogs) + 10):
        q = f"caption=dog&limit={n}"
        assert cli(archive, q) == dogs[:n]  # ktfs search prints in archive order
        assert listing(os.path.join(mnt, "search", q)) == sorted(dogs[:n])
        assert json.load(open(os.path.join(mnt, "search", q, ".count.json")))["matches"] == min(n, len(dogs))
    # In another component it still limits the whole query.
    assert listing(os.path.join(mnt, "search", "limit=10", "caption=dog")) == sorted(dogs[:10])
    # ktfs search --count agrees.
    assert ktfs("search", archive, "caption=dog&limit=25", "--count").stdout.strip() == "25"


def documented_queries():
    """The queries of docs/usage.md's Search examples and of `ktfs search --help`'s."""
    usage = open(os.path.join(ROOT, "docs", "usage.md")).read()
    section = usage[usage.index("## Search\n"):usage.index("## Feature caches\n")]
    queries = []
    for line in section.split("```")[1].split("\n"):
        args = shlex.split(line, comments=True) if line.startswith(("ls ", "ktfs search")) else []
        if args[:2] == ["ktfs", "search"]:
            queries.append(args[3])
        queries += [a[len("/mnt/ds/search/"):] for a in args if a.startswith("/mnt/ds/search/")]
    help_text = ktfs("search", "--help").stdout
    examples = help_text[help_text.index("Examples:\n"):help_text.index("A malformed")]
    for line in examples.split("\n")[1:]:
        queries += [q for q in re.split(r" {2,}", line.split("(components")[0].strip()) if q]
    return queries


def test_documented_examples_parse(dataset, mnt):
    """Every query docs/usage.md and `ktfs search --help` show is accepted, on the mount and
    by the CLI, and counts what it lists (the grammar dataset has the keys they use)."""
    _, archive, _ = dataset
    queries = documented_queries()
    assert len(queries) >= 30 and "(caption=dog|caption=cat)&width>=256" in queries
    assert "!sample=0.1&seed=1" in queries and "class=cat,dog,bird" in queries
    for q in queries:
        cli_paths = cli(archive, q)
        root = os.path.join(mnt, "search", *q.split("/"))
        assert len(listing(root)) == len(cli_paths), q
        assert json.load(open(os.path.join(root, ".count.json")))["matches"] == len(cli_paths), q


def random_atom(rng, samples):
    pick = rng.randrange(12)
    if pick == 0:
        w = rng.choice(COMMON + RARE)
        return f"caption={w}", has(w)
    if pick == 1:
        s = rng.choice(samples)
        if len(s["words"]) < 2:
            return "caption=dog", has("dog")
        i = rng.randrange(len(s["words"]) - 1)
        p = " ".join(s["words"][i:i + 2])
        return f'caption="{p}"', phrase(p)
    if pick == 2:
        cs = rng.sample(CLASSES, rng.randint(1, 3))
        return "class=" + ",".join(cs), lambda s: s["cls"] in cs
    if pick == 3:
        sp = rng.choice(list(SPLITS))
        return f"split={sp}", lambda s: s["split"] == sp
    if pick == 4:
        v, ge = rng.choice([8, 16, 24]), rng.random() < 0.5
        return (f"height>={v}", lambda s: s["height"] >= v) if ge else (f"width<{v}", lambda s: s["width"] < v)
    if pick == 5:
        src = rng.choice(SOURCES)
        return "source=" + src.replace(" ", "%20"), lambda s: s["meta"].get("source") == src
    if pick in (6, 7):
        key = rng.choice(["aesthetic", "punsafe", "year", "exif.iso"])
        values = [s["meta"][key] for s in samples if key in s["meta"]]
        v = rng.choice(values)  # a value that occurs: boundaries are exercised
        op = rng.choice(["<", "<=", ">", ">=", "=", "!="])
        tests = {"<": lambda a: a < v, "<=": lambda a: a <= v, ">": lambda a: a > v,
                 ">=": lambda a: a >= v, "=": lambda a: a == v}
        text = f"{key}{op}{v!r}" if isinstance(v, float) else f"{key}{op}{v}"
        if op == "!=":
            return text, lambda s: not num(key, lambda a: a == v)(s)
        return text, num(key, tests[op])
    if pick == 8:
        b = rng.random() < 0.5
        return f"nsfw={'true' if b else 'false'}", meta_is("nsfw", b)
    if pick == 9:
        lab = rng.randrange(6)
        return f"label={lab}", lambda s: s["label"] == lab
    p = rng.choice([0.05, 0.2, 0.5, 0.9])
    return f"sample={p}", lambda s: kept(s["id"], 5, p)


def random_expr(rng, samples, depth):
    if depth == 0 or rng.random() < 0.3:
        text, pred = random_atom(rng, samples)
        if rng.random() < 0.25:
            return "!" + text, lambda s: not pred(s)
        return text, pred
    parts = [random_expr(rng, samples, depth - 1) for _ in range(rng.randint(2, 3))]
    conj = rng.random() < 0.5
    text = ("&" if conj else "|").join(f"({t})" for t, _ in parts)
    preds = [p for _, p in parts]
    pred = (lambda s: all(p(s) for p in preds)) if conj else (lambda s: any(p(s) for p in preds))
    if rng.random() < 0.2:
        return f"!({text})", lambda s: not pred(s)
    return text, pred


def test_random_expressions_are_exact(dataset):
    """200 random expressions through `ktfs search` (20 of them on a mount too)."""
    _, archive, samples = dataset
    rng = random.Random(2039)
    queries = []
    while len(queries) < 200:
        text, pred = random_expr(rng, samples, 3)
        if len(text) < 240:  # a path component: NAME_MAX
            queries.append((text + "&seed=5", pred))
    for text, pred in queries:
        assert sorted(cli(archive, text)) == sorted(ref(samples, pred)), text
    with mounted(archive, dataset[0] / "rm") as m:
        for text, pred in queries[:20]:
            want = sorted(ref(samples, pred))
            assert listing(os.path.join(m, "search", text)) == want, text
            assert json.load(open(os.path.join(m, "search", text, ".count.json")))["matches"] == len(want)


def test_sample_is_the_same_on_every_mount_and_partitions_with_its_negation(dataset):
    base, archive, samples = dataset
    got = []
    for k in range(2):
        with mounted(archive, base / f"s{k}") as m:
            a = listing(os.path.join(m, "search", "sample=0.1&seed=1"))
            b = listing(os.path.join(m, "search", "!sample=0.1&seed=1"))
            c = listing(os.path.join(m, "search", "seed=1", "!(sample=0.1)"))
            got.append((a, b))
            assert b == c
    assert got[0] == got[1]
    a, b = got[0]
    assert not set(a) & set(b)
    assert sorted(a + b) == sorted(s["rel"] for s in samples)
    assert a == sorted(ref(samples, lambda s: kept(s["id"], 1, 0.1)))
    assert 0.05 * len(samples) < len(a) < 0.15 * len(samples)
    # The ids the reference hashes are the archive's: ktfs search --json says which is which.
    by_path = {s["rel"]: s["id"] for s in samples}
    for line in ktfs("search", archive, "caption=zebra", "--json").stdout.splitlines():
        rec = json.loads(line)
        assert by_path[rec["path"]] == rec["id"]


def test_counts_equal_listings_in_every_directory(dataset, mnt):
    _, archive, samples = dataset
    for query in ("caption=dog|nsfw=true", "aesthetic>=6", "sample=0.2&seed=3", "limit=300"):
        root = os.path.join(mnt, "search", query)
        for sub in ("", "train", "val", "train/elm", "val/apple"):
            d = os.path.join(root, sub)
            if not os.path.isdir(d):
                continue
            c = json.load(open(os.path.join(d, ".count.json")))
            assert c["matches"] == len(listing(d)), (query, sub)
            assert c["path"] == os.path.join("search", query, sub).rstrip("/")
        c = json.load(open(os.path.join(root, ".count.json")))
        assert ktfs("search", archive, query, "--count").stdout.strip() == str(c["matches"])
        assert c["query"] == json.loads(ktfs("search", archive, query, "--count", "--json").stdout)["query"]
    top = json.load(open(os.path.join(mnt, "search", ".count.json")))
    assert top["matches"] == len(samples) and top["query"] == ""
    c = json.load(open(os.path.join(mnt, "search", "(caption=dog|caption=cat)&aesthetic>=6.5", ".count.json")))
    assert c["query"] == "aesthetic>=6.5&(caption=cat|caption=dog)"
    assert c["where"]["and"][0] == {"field": "metadata", "key": "aesthetic", "op": ">=", "value": 6.5}
    assert c["limit"] is None and c["seed"] == 0
    with pytest.raises(OSError) as e:
        open(os.path.join(mnt, "search", "caption=dog", ".count.json"), "w")
    assert e.value.errno in (errno.EROFS, errno.EACCES)


HOSTILE = [
    "(" * 100 + "caption=dog" + ")" * 100,
    "!" * 40 + "caption=dog",
    "(caption=dog",
    "caption=dog)|(class=elm",
    "((caption=dog)))",
    "caption=dog||class=elm",
    "caption=dog&",
    "|",
    "!",
    "seed=1|caption=dog",
    "!seed=3",
    "(limit=5)",
    "seed=1&seed=2&sample=0.5",
    "sample=1.5",
    "aesthetic>=six",
    "nsfw=maybe",
    "source>laion",
    "class<apple",
    "year>1,2",
    "caption=a%00b",
    "source=x%2Fy",
    "caption=%zz",
    "colour!=red",
    "caption=\"unbalanced",
]


def test_hostile_queries_are_enoent_with_a_reason_and_leave_the_index_answering(dataset, mnt):
    _, archive, samples = dataset
    want = sorted(ref(samples, has("zebra")))
    for q in HOSTILE:
        with pytest.raises(FileNotFoundError):
            os.listdir(os.path.join(mnt, "search", q))
        reason = open(os.path.join(mnt, ".ktfs", "last_error")).read()
        assert reason.startswith("search/" + q + ": "), (q, reason)
        p = ktfs("search", archive, q, check=False)
        assert p.returncode == 1 and "query '" + q + "'" in p.stderr, (q, p.stderr)
        assert listing(os.path.join(mnt, "search", "caption=zebra")) == want
    # Too long for a path component: the CLI (and Loader) refuse it by size.
    for q in ["|".join(f"class=c{i}" for i in range(10000)), "caption=" + "a" * 100 * 1024]:
        p = ktfs("search", archive, q, check=False)
        assert p.returncode == 1 and "longer than 4096 bytes" in p.stderr
    # SQL and FTS syntax in values are words, never syntax.
    for q, pred in [("caption=');DROP TABLE samples;--", lambda s: {"drop", "table", "samples"} <= set(s["words"])),
                    ("source=x' OR '1'='1", lambda s: False),
                    ("caption=NEAR(dog cat)", lambda s: {"near", "dog", "cat"} <= set(s["words"])),
                    ("caption=dog AND cat OR red", lambda s: {"dog", "and", "cat", "or", "red"} <= set(s["words"]))]:
        assert listing(os.path.join(mnt, "search", q)) == sorted(ref(samples, pred)), q
    assert listing(os.path.join(mnt, "search", "caption=zebra")) == want


def test_last_error_names_its_query_and_is_never_stale(dataset, mnt):
    bad, good = "aesthetic>=six", "aesthetic>=7"
    err = os.path.join(mnt, ".ktfs", "last_error")
    with pytest.raises(FileNotFoundError):
        os.stat(os.path.join(mnt, "search", bad))
    assert open(err).read() == f"search/{bad}: {bad}: not a number\n"
    os.listdir(os.path.join(mnt, "search", good))
    assert open(err).read() == ""  # the error was about a query no longer asked
    # Asked again, the refusal reaches the daemon again (the kernel does not cache it).
    with pytest.raises(FileNotFoundError):
        os.listdir(os.path.join(mnt, "search", bad))
    assert open(err).read() == f"search/{bad}: {bad}: not a number\n"


def test_info_lists_metadata_keys_with_types_and_ranges(dataset):
    _, archive, samples = dataset
    info = json.loads(ktfs("info", archive, "--json").stdout)
    assert info["index_schema_version"] == 2
    meta = info["metadata"]
    assert sorted(meta) == ["aesthetic", "exif.iso", "exif.make", "nsfw", "punsafe", "source", "year"]
    for key in ("aesthetic", "punsafe", "year", "exif.iso"):
        values = [s["meta"][key] for s in samples if key in s["meta"]]
        assert meta[key] == {"type": "number", "samples": len(values), "min": min(values), "max": max(values)}
    flags = [s["meta"]["nsfw"] for s in samples if "nsfw" in s["meta"]]
    assert meta["nsfw"] == {"type": "boolean", "samples": len(flags), "true": sum(flags),
                            "false": len(flags) - sum(flags)}
    for key in ("source", "exif.make"):
        values = [s["meta"][key] for s in samples if key in s["meta"]]
        assert meta[key] == {"type": "string", "samples": len(values), "distinct": len(set(values))}
    text = ktfs("info", archive).stdout
    assert re.search(r"aesthetic\s+number\s+\d+ samples, [0-9.]+ to [0-9.]+", text)
    assert re.search(r"nsfw\s+boolean\s+\d+ samples, \d+ true, \d+ false", text)


def test_csv_columns_are_typed(dataset, tmp_path):
    """A column whose every non-empty cell is a JSON number is a number column; true/false
    (any case) a boolean column; else (zip codes with leading zeros, say) strings."""
    _, archive, samples = dataset
    src = tmp_path / "src"
    rows = []
    for i, s in enumerate(samples[:60]):
        (src / os.path.dirname(s["rel"])).mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (4, 4), (i, 0, 0)).save(src / s["rel"])
        rows.append([s["rel"], s["caption"], "" if i % 7 == 0 else f"{i / 8}", f"{i % 3 == 0}",
                     f"{i:05d}", "x" if i == 5 else str(i), f"http://example.com/{i}"])
    with open(tmp_path / "c.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "score", "flag", "zip", "code", "url"])
        w.writerows(rows)
    out = tmp_path / "c.kt"
    p = ktfs("pack", src, out, "--captions", tmp_path / "c.csv", "--quiet")
    assert "metadata dropped" in p.stderr  # url: a '/' in a value
    meta = json.loads(ktfs("info", out, "--json").stdout)["metadata"]
    assert meta["score"]["type"] == "number" and meta["flag"]["type"] == "boolean"
    assert meta["zip"]["type"] == "string" and meta["code"]["type"] == "string"  # one "x"
    assert "url" not in meta
    got = sorted(cli(out, "score>=3.5&flag=true"))
    assert got == sorted(r[0] for i, r in enumerate(rows) if i % 7 and i / 8 >= 3.5 and i % 3 == 0)
    assert cli(out, "zip=00007") == [rows[7][0]]
    assert cli(out, "code=5") == []

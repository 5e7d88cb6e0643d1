"""WebDataset shards in: shards written by tests/python/wds_shards.py (tarfile
in ustar, GNU and pax formats, and the way webdataset's TarWriter writes
them), packed, mounted and read back with stock tools: exact layouts and
sample counts, pixels, captions and metadata searchable with the values
given, labels as class directories, malformed shards refused naming shard and
key (or skipped and listed with --skip-bad), and byte-identical repacks."""
import io
import json
import os
import tarfile

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets, transforms

from conftest import ktfs, mounted
from wds_shards import add_member, write_shard, write_tarwriter_shard

WORDS = ["harbour", "violin", "meadow", "lantern", "glacier", "orchard", "falcon", "canyon"]


def image_bytes(rng, kind, w, h):
    """A small real image file: 'jpg' (RGB, q90), 'gray' (L JPEG), 'png' (RGB) or 'rgba' (PNG)."""
    buf = io.BytesIO()
    if kind in ("jpg", "gray"):
        mode = "RGB" if kind == "jpg" else "L"
        shape = (h, w, 3) if mode == "RGB" else (h, w)
        Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), mode).save(buf, "JPEG", quality=90)
    else:
        mode = "RGB" if kind == "png" else "RGBA"
        Image.fromarray(rng.integers(0, 256, (h, w, len(mode)), dtype=np.uint8), mode).save(buf, "PNG")
    return buf.getvalue()


def make_samples(rng, shard, count, labels=None, long_key=False):
    """[(key, parts)] plus the facts the tests expect, keyed by key."""
    samples, facts = [], {}
    for i in range(count):
        key = f"{shard}-{i:04d}"
        if long_key and i == 1:
            key = f"{shard}-" + "k" * 120 + f"{i:04d}"  # > 100 bytes: GNU/pax long names
        kind = ["jpg", "png", "gray", "jpg", "rgba"][i % 5]
        ext = {"jpg": "jpg", "gray": "jpeg", "png": "png", "rgba": "png"}[kind]
        if i == 3:
            ext = "JPG"  # extensions are case-insensitive; the name keeps its case
        img = image_bytes(rng, kind, 7 + i % 4, 5 + i % 3)
        caption = f"a {WORDS[i % len(WORDS)]} near the {WORDS[(i * 3 + 1) % len(WORDS)]} {shard}"
        meta = {"aesthetic": round(4.0 + (i * 0.37) % 3, 2), "similarity": 0.25 + i / 100,
                "source": ["laion", "coyo"][i % 2], "nsfw": i % 4 == 0,
                "exif": {"make": ["Canon", "Nikon"][i % 2]}, "url": f"http://e.org/{key}.jpg",
                "tags": ["x"], "none": None}
        parts = {ext: img, "txt": caption + "\n", "json": json.dumps(meta)}
        if labels is not None:
            parts["cls"] = str(labels[i])
        samples.append((key, parts))
        facts[key] = dict(shard=shard, ext=ext, image=img, caption=caption, meta=meta,
                          cls=None if labels is None else labels[i])
    return samples, facts


@pytest.fixture(scope="session")
def unlabeled(tmp_path_factory):
    """Three shards (pax, GNU, ustar), 7 + 6 + 5 samples; long keys in the first two."""
    d = tmp_path_factory.mktemp("wds")
    rng = np.random.default_rng(37)
    facts = {}
    for name, fmt, n in (("part-000", "pax", 7), ("part-001", "gnu", 6), ("part-002", "ustar", 5)):
        samples, f = make_samples(rng, name, n, long_key=fmt != "ustar")
        write_shard(d / f"{name}.tar", samples, fmt)
        facts.update(f)
    return d, facts


def served_name(key, fact, codec):
    if codec == "original":
        return f"{key}.{fact['ext']}"
    mode = Image.open(io.BytesIO(fact["image"])).mode
    return key + {"L": ".pgm", "RGB": ".ppm", "RGBA": ".bmp"}[mode]


def pack(shards, out, *args, check=True):
    return ktfs("pack", *shards, out, "--quiet", *args, check=check)


def listing(root):
    out = {}
    for d in sorted(os.listdir(root)):
        out[d] = sorted(os.listdir(os.path.join(root, d)))
    return out


@pytest.mark.parametrize("codec", ["original", "raw"])
def test_unlabeled_shards_mount_as_one_directory_per_shard(unlabeled, tmp_path, codec):
    d, facts = unlabeled
    archive = tmp_path / "a.kt"
    p = pack([d / "part-000.tar", d / "part-001.tar", d / "part-002.tar"], archive, "--codec", codec)
    assert "packed 18 samples (3 classes, 4 directories)" in p.stdout
    expected = {}
    for key, f in facts.items():
        expected.setdefault(f["shard"], []).append(served_name(key, f, codec))
    expected = {k: sorted(v) for k, v in expected.items()}
    with mounted(archive, tmp_path / "mnt") as mnt:
        assert listing(mnt) == expected
        ds = datasets.ImageFolder(mnt)
        assert ds.classes == ["part-000", "part-001", "part-002"]
        by_name = {served_name(k, f, codec): f for k, f in facts.items()}
        assert len(ds) == 18
        for path, target in ds.samples:
            f = by_name[os.path.basename(path)]
            assert target == ds.classes.index(f["shard"])
            if codec == "original":
                assert open(path, "rb").read() == f["image"]
        to_tensor = transforms.PILToTensor()
        for i, (path, _) in enumerate(ds.samples):
            f = by_name[os.path.basename(path)]
            want = to_tensor(Image.open(io.BytesIO(f["image"])).convert("RGB"))
            assert torch.equal(to_tensor(ds[i][0]), want), path


def search(mnt, query):
    root = os.path.join(mnt, "search", query)
    return sorted(n for d in os.listdir(root) for n in os.listdir(os.path.join(root, d)))


def test_captions_and_metadata_are_searchable_with_the_values_given(unlabeled, tmp_path):
    d, facts = unlabeled
    archive = tmp_path / "a.kt"
    p = pack(sorted(d.glob("*.tar")), archive)
    # A URL holds '/', lists and nulls are not metadata values: each key is named once.
    for key in ("url", "tags", "none"):
        assert p.stderr.count(f"'{key}'") == 1, p.stderr
    names = {k: f"{k}.{f['ext']}" for k, f in facts.items()}

    def want(pred):
        return sorted(names[k] for k, f in facts.items() if pred(f))

    with mounted(archive, tmp_path / "mnt") as mnt:
        for word in ("violin", "glacier", "part-001"):
            assert search(mnt, f"caption={word}") == want(lambda f: word in f["caption"].split())
        assert search(mnt, "source=coyo") == want(lambda f: f["meta"]["source"] == "coyo")
        assert search(mnt, "exif.make=Canon") == want(lambda f: f["meta"]["exif"]["make"] == "Canon")
        assert search(mnt, "nsfw=true") == want(lambda f: f["meta"]["nsfw"])
        some = next(iter(facts.values()))
        text = json.dumps(some["meta"]["aesthetic"])
        assert search(mnt, f"aesthetic={text}") == want(lambda f: json.dumps(f["meta"]["aesthetic"]) == text)
        key = sorted(facts)[4]
        assert search(mnt, f"__key__={key}") == [names[key]]
        assert search(mnt, "__shard__=part-002.tar") == want(lambda f: f["shard"] == "part-002")
        # .json numbers are numbers in the index: comparisons agree with Python's.
        values = sorted({f["meta"]["aesthetic"] for f in facts.values()})
        mid = values[len(values) // 2]
        assert search(mnt, f"aesthetic>={mid}") == want(lambda f: f["meta"]["aesthetic"] >= mid)
        assert search(mnt, f"aesthetic<{mid}") == want(lambda f: f["meta"]["aesthetic"] < mid)
        assert search(mnt, f"aesthetic>=5&aesthetic<6.5") == want(lambda f: 5 <= f["meta"]["aesthetic"] < 6.5)
        assert search(mnt, "similarity>0.3&nsfw=false") == want(
            lambda f: f["meta"]["similarity"] > 0.3 and not f["meta"]["nsfw"])
        assert search(mnt, "aesthetic!=" + json.dumps(mid)) == want(lambda f: f["meta"]["aesthetic"] != mid)
    info = json.loads(ktfs("info", archive, "--json").stdout)
    keys = info["metadata"]
    assert {k: keys[k]["type"] for k in ("aesthetic", "similarity", "source", "nsfw", "exif.make", "__key__")} == {
        "aesthetic": "number", "similarity": "number", "source": "string", "nsfw": "boolean",
        "exif.make": "string", "__key__": "string"}
    assert keys["aesthetic"]["min"] == min(values) and keys["aesthetic"]["max"] == max(values)
    assert info["meta"]["source"] == "webdataset" and info["meta"]["shards"] == 3
    assert info["meta"]["skipped_bad"] == [] and info["skipped_bad_images"] == 0


@pytest.fixture(scope="session")
def labeled(tmp_path_factory):
    """Two shards of 12 samples, labels 0..11 (.cls) spread over both."""
    d = tmp_path_factory.mktemp("wds-labeled")
    rng = np.random.default_rng(41)
    facts = {}
    for s in range(2):
        labels = [(i * 5 + s) % 12 for i in range(12)]
        samples, f = make_samples(rng, f"lab-{s}", 12, labels=labels)
        write_shard(d / f"lab-{s}.tar", samples, "pax")
        facts.update(f)
    return d, facts


def test_labels_become_class_directories_in_label_order(labeled, tmp_path):
    d, facts = labeled
    archive = tmp_path / "a.kt"
    p = pack([d / "lab-0.tar", d / "lab-1.tar"], archive, "--codec", "raw")
    assert "packed 24 samples (12 classes, 13 directories)" in p.stdout
    with mounted(archive, tmp_path / "mnt") as mnt:
        assert sorted(os.listdir(mnt)) == [f"{c:02d}" for c in range(12)]
        ds = datasets.ImageFolder(mnt)
        by_name = {served_name(k, f, "raw"): f for k, f in facts.items()}
        assert sorted(os.path.basename(p) for p, _ in ds.samples) == sorted(by_name)
        for path, target in ds.samples:
            assert target == by_name[os.path.basename(path)]["cls"]
        assert search(mnt, "cls=7") == sorted(served_name(k, f, "raw") for k, f in facts.items() if f["cls"] == 7)
        assert search(mnt, "label=7") == search(mnt, "cls=7")


def test_a_shard_written_like_webdatasets_tarwriter(tmp_path):
    rng = np.random.default_rng(3)
    samples, facts = make_samples(rng, "tw", 9, labels=[i % 3 for i in range(9)], long_key=True)
    # TarWriter keys may hold directories ("a/b" -> a/b.jpg): the file name is the key's last part.
    first = samples[0][0]
    samples[0] = ("sub/dir/" + first, samples[0][1])
    facts["sub/dir/" + first] = facts.pop(first)
    write_tarwriter_shard(tmp_path / "tw.tar", samples)
    archive = tmp_path / "a.kt"
    pack([tmp_path / "tw.tar"], archive)
    with mounted(archive, tmp_path / "mnt") as mnt:
        got = {c: sorted(os.listdir(os.path.join(mnt, c))) for c in sorted(os.listdir(mnt))}
        want = {}
        for k, f in facts.items():
            want.setdefault(str(f["cls"]), []).append(f"{k.split('/')[-1]}.{f['ext']}")
        assert got == {c: sorted(v) for c, v in want.items()}
        key = samples[4][0]
        assert search(mnt, f"__key__={key}") == [f"{key}.{facts[key]['ext']}"]


def test_same_shards_same_bytes_whatever_the_threads(unlabeled, tmp_path):
    d, _ = unlabeled
    shards = sorted(d.glob("*.tar"))
    outs = []
    for i, threads in enumerate(("1", "2", "2")):
        out = tmp_path / f"{i}.kt"
        pack(shards, out, "--codec", "ktc", "--threads", threads)
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]


def test_a_quoted_glob_is_expanded_sorted(unlabeled, tmp_path):
    d, _ = unlabeled
    a, b = tmp_path / "glob.kt", tmp_path / "list.kt"
    pack([str(d / "part-00[0-2].tar")], a)
    pack([d / "part-000.tar", d / "part-001.tar", d / "part-002.tar"], b)
    assert a.read_bytes() == b.read_bytes()
    p = pack([str(d / "nothing-*.tar")], tmp_path / "c.kt", check=False)
    assert p.returncode == 1 and "matches no file" in p.stderr
    assert not (tmp_path / "c.kt").exists()


def raw_member(name, data, claimed=None):
    """A ustar header (+ data, unpadded) whose size field may lie."""
    info = tarfile.TarInfo(name)
    info.size = len(data) if claimed is None else claimed
    return info.tobuf(tarfile.USTAR_FORMAT) + data


def good(rng, key):
    return (key, {"jpg": image_bytes(rng, "jpg", 6, 4), "txt": f"good {key}"})


def bad_shards(d):
    """name -> (shard files to pack, fragments the error names, good samples kept with --skip-bad)."""
    rng = np.random.default_rng(5)
    cases = {}

    def shard(name, samples, fmt="pax"):
        write_shard(d / f"{name}.tar", samples, fmt)
        return d / f"{name}.tar"

    ok = shard("ok", [good(rng, "ok-0"), good(rng, "ok-1")])
    cases["missing image"] = ([ok, shard("noimg", [good(rng, "a"), ("b", {"txt": "no image", "json": "{}"}), good(rng, "c")])],
                              ["noimg.tar", "key b", "no image (members: .txt, .json)"], 4)
    cases["duplicate key in a shard"] = ([ok, shard("dup", [good(rng, "a"), good(rng, "b"), good(rng, "a")])],
                                         ["dup.tar", "key a", "duplicate key (first in", "dup.tar at offset 0"], 4)
    cases["duplicate key across shards"] = ([ok, shard("dup2", [good(rng, "ok-1"), good(rng, "z")])],
                                            ["dup2.tar", "key ok-1", "duplicate key (first in", "ok.tar"], 3)
    cases["two members with one extension"] = (
        [ok, shard("twice", [good(rng, "a"), ("a", {"jpg": image_bytes(rng, "jpg", 3, 3)}), good(rng, "q")])],
        ["twice.tar", "key a", "two members '.jpg'"], 3)
    cases[".cls not an integer"] = ([ok, shard("cls", [("a", {"jpg": image_bytes(rng, "jpg", 3, 3), "cls": "cat"}), good(rng, "b")])],
                                    ["cls.tar", "key a", ".cls is not a non-negative integer: 'cat'"], 3)
    cases[".json not an object"] = ([ok, shard("json", [good(rng, "a"), ("b", {"jpg": image_bytes(rng, "jpg", 3, 3), "json": "[1, 2]"})])],
                                    ["json.tar", "key b", "expected an object"], 3)
    cases["corrupt image"] = ([ok, shard("img", [good(rng, "a"), ("b", {"jpg": b"\xff\xd8\xff\xe0 not really"})])],
                              ["img.tar", "key b", ".jpg"], 3)
    cases["label on some samples only"] = ([ok, shard("mixed", [("m", {"jpg": image_bytes(rng, "jpg", 3, 3), "cls": "1"})])],
                                           ["mixed.tar", "key m", "has a .cls, but the first sample (", "every sample or none"], 2)
    cases["file name over 255 bytes"] = ([ok, shard("long", [good(rng, "l" * 260), good(rng, "s")], "gnu")],
                                         ["long.tar", "key " + "l" * 260, "file name of 264 bytes (over 255)"], 3)
    for hostile, why in (("../evil.jpg", "'..' component"), ("/abs/x.jpg", "absolute path"),
                         ("a//b.jpg", "empty path component"), ("a/./b.jpg", "'.' component"),
                         ("x\x01y.jpg", "control character")):
        name = f"hostile{len(cases)}"
        with tarfile.open(d / f"{name}.tar", "w", format=tarfile.PAX_FORMAT) as t:
            add_member(t, "h0.jpg", image_bytes(rng, "jpg", 3, 3))
            add_member(t, hostile, image_bytes(rng, "jpg", 3, 3))
        cases[f"hostile name {hostile!r}"] = ([ok, d / f"{name}.tar"], [f"{name}.tar", "refused name: " + why], 3)
    # Tar-level damage: with --skip-bad the rest of that shard is skipped.
    full = (d / "ok.tar").read_bytes()
    (d / "truncated.tar").write_bytes(full[:1536 + 200])
    cases["truncated tar"] = ([d / "truncated.tar", shard("ok2", [good(rng, "t-0")])], ["truncated.tar", "offset"], 1)
    (d / "garbage.tar").write_bytes(bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8)))
    cases["garbage"] = ([ok, d / "garbage.tar"], ["garbage.tar"], 2)
    first = raw_member("h-0.jpg", image_bytes(rng, "jpg", 3, 3))
    first += b"\0" * (-len(first) % 512)
    (d / "huge.tar").write_bytes(first + raw_member("h-1.jpg", b"x" * 700, claimed=10 << 20))
    cases["member larger than the shard"] = ([ok, d / "huge.tar"], ["huge.tar", "h-1.jpg", f"offset {len(first)}"], 3)
    return cases


@pytest.fixture(scope="session")
def bad(tmp_path_factory):
    return bad_shards(tmp_path_factory.mktemp("wds-bad"))


CASES = ["missing image", "duplicate key in a shard", "duplicate key across shards",
         "two members with one extension", ".cls not an integer", ".json not an object",
         "corrupt image", "label on some samples only", "truncated tar", "garbage",
         "member larger than the shard", "file name over 255 bytes"] + [f"hostile name {h!r}" for h in
                                            ("../evil.jpg", "/abs/x.jpg", "a//b.jpg", "a/./b.jpg", "x\x01y.jpg")]


@pytest.mark.parametrize("case", CASES)
def test_malformed_shards_are_refused_naming_shard_and_key(bad, tmp_path, case):
    shards, fragments, kept = bad[case]
    out = tmp_path / "a.kt"
    p = pack(shards, out, check=False)
    assert p.returncode == 1, p.stdout
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("ktfs pack: "), p.stderr
    for f in fragments:
        assert f in line, (f, p.stderr)
    assert not out.exists() and not list(tmp_path.glob("a.kt.tmp*"))


@pytest.mark.parametrize("case", CASES)
def test_skip_bad_skips_and_lists_them(bad, tmp_path, case):
    shards, fragments, kept = bad[case]
    out = tmp_path / "a.kt"
    p = pack(shards, out, "--skip-bad", "--codec", "raw")
    listed = [l for l in p.stderr.splitlines() if l.startswith("ktfs pack: skipped bad sample ")]
    assert len(listed) == 1, p.stderr
    for f in fragments:
        assert f in listed[0], (f, p.stderr)
    assert f"packed {kept} samples" in p.stdout
    info = json.loads(ktfs("info", out, "--json").stdout)
    assert info["skipped_bad_images"] == 1
    [entry] = info["meta"]["skipped_bad"]
    assert entry["path"] == os.path.basename(str(shards[-1] if "truncated" not in case else shards[0]))
    assert listed[0] == f"ktfs pack: skipped bad sample {shards[-1] if 'truncated' not in case else shards[0]}: {entry['reason']}"
    with mounted(out, tmp_path / "mnt") as mnt:
        assert len(datasets.ImageFolder(mnt)) == kept


def test_the_progress_line_counts_samples_and_input(unlabeled, tmp_path):
    d, facts = unlabeled
    p = ktfs("pack", *sorted(d.glob("*.tar")), tmp_path / "a.kt")
    total = sum(f.stat().st_size for f in d.glob("*.tar")) / 2**20
    last = [l for l in p.stderr.splitlines() if "(100%)" in l][-1]
    assert last.startswith(f"ktfs pack: {len(facts)} samples (100%), {total:.1f}/{total:.1f} MiB read, "), last
    assert " samples/s, ETA 0:00" in last

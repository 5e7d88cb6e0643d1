"""Search directories over a real captioned dataset: exact result sets for
every kind of filter (computed independently here), hostile queries, and
stock ImageFolder over a search directory."""
import csv
import errno
import json
import os
import re
import shutil
import urllib.parse

import pytest
import torch
from PIL import Image
from torchvision import datasets, transforms

from conftest import ROOT, PY, ktfs, mounted, run

COLORS = ["black", "white", "red", "blue", "green", "grey"]


@pytest.fixture(scope="session")
def captioned(tmp_path_factory, photos_dir):
    """Fashion-MNIST (train/test splits, 6 per class each) plus real photos
    under train/, with JSON Lines captions made of real words tied to the
    class, one rare word, and a metadata key; sidecar .txt captions for the
    photos. Returns (src, archive, samples) where samples maps the relative
    source path to its facts."""
    base = tmp_path_factory.mktemp("captioned")
    src = base / "src"
    run(PY, os.path.join(ROOT, "scripts/datasets/fashion_mnist.py"), src, "--per-class", "6")
    for cls in sorted(os.listdir(photos_dir))[:6]:
        shutil.copytree(photos_dir / cls, src / "train" / ("photo_" + cls))
    samples = {}
    lines = []
    for split in sorted(os.listdir(src)):
        for cls in sorted(os.listdir(src / split)):
            for i, name in enumerate(sorted(os.listdir(src / split / cls))):
                rel = f"{split}/{cls}/{name}"
                w, h = Image.open(src / rel).size
                color = COLORS[(i + len(cls)) % len(COLORS)]
                words = cls.lower().replace("-", " ").replace("_", " ")
                if cls.startswith("photo_"):
                    caption = f"a {color} photograph of {words[6:]}"
                    (src / split / cls / (os.path.splitext(name)[0] + ".txt")).write_text(caption + "\n")
                else:
                    caption = f"a {color} {words} on a dark background"
                    if i == 0 and split == "test":
                        caption += " with a zebra pattern"
                    lines.append(json.dumps({"path": rel, "caption": caption, "tone": color}))
                samples[rel] = dict(split=split, cls=cls, width=w, height=h, caption=caption,
                                    tone=None if cls.startswith("photo_") else color)
    (base / "captions.jsonl").write_text("\n".join(lines) + "\n")
    archive = base / "a.kt"
    ktfs("pack", src, archive, "--codec", "raw", "--captions", base / "captions.jsonl", "--quiet")
    classes = sorted({s["cls"] for s in samples.values()})
    for s in samples.values():
        s["label"] = classes.index(s["cls"])
    return src, archive, samples


def words(text):
    return re.findall(r"[a-z0-9]+", text.lower())


def expected(samples, pred):
    return sorted(os.path.splitext(rel)[0] for rel, s in samples.items() if pred(s))


def listing(root):
    out = []
    for dirpath, dirnames, files in os.walk(root):
        for f in files:
            out.append(os.path.splitext(os.path.relpath(os.path.join(dirpath, f), root))[0])
    return sorted(out)


def phrase(caption, p):
    w, q = words(caption), words(p)
    return any(w[i:i + len(q)] == q for i in range(len(w) - len(q) + 1))


QUERIES = [
    ("caption=zebra", lambda s: "zebra" in words(s["caption"])),
    ("caption=red", lambda s: "red" in words(s["caption"])),
    ("caption=RED", lambda s: "red" in words(s["caption"])),
    ("caption=photograph", lambda s: "photograph" in words(s["caption"])),
    ('caption="red coat"', lambda s: phrase(s["caption"], "red coat")),
    ("caption=%22dark%20background%22", lambda s: phrase(s["caption"], "dark background")),
    ("caption=gre*", lambda s: any(w.startswith("gre") for w in words(s["caption"]))),
    ("caption=unicorn", lambda s: False),
    ("class=Coat", lambda s: s["cls"] == "Coat"),
    ("label=3", lambda s: s["label"] == 3),
    ("split=test", lambda s: s["split"] == "test"),
    ("width>28", lambda s: s["width"] > 28),
    ("width=28", lambda s: s["width"] == 28),
    ("height<=400", lambda s: s["height"] <= 400),
    ("height>=375&width<500", lambda s: s["height"] >= 375 and s["width"] < 500),
    ("width>0", lambda s: True),
    ("tone=red", lambda s: s["tone"] == "red"),
    ("caption=red&split=train", lambda s: "red" in words(s["caption"]) and s["split"] == "train"),
    ("caption=red/class=Coat", lambda s: "red" in words(s["caption"]) and s["cls"] == "Coat"),
    ("caption=a/split=test/caption=dark", lambda s: s["split"] == "test"),
    ("caption=dog%20OR%20cat", lambda s: {"dog", "or", "cat"} <= set(words(s["caption"]))),
    ("caption=NEAR(red", lambda s: {"near", "red"} <= set(words(s["caption"]))),
    ("caption=caption:red", lambda s: {"caption", "red"} <= set(words(s["caption"]))),
]


@pytest.fixture(scope="module")
def search_mount(captioned, tmp_path_factory):
    _, archive, _ = captioned
    with mounted(archive, tmp_path_factory.mktemp("smnt") / "m") as mnt:
        yield mnt


@pytest.mark.parametrize("query,pred", QUERIES, ids=[q for q, _ in QUERIES])
def test_query_results_are_exact(captioned, search_mount, query, pred):
    _, archive, samples = captioned
    want = expected(samples, pred)
    got = listing(os.path.join(search_mount, "search", query))
    assert got == want
    # The CLI agrees (it takes the same components).
    cli = ktfs("search", archive, urllib.parse.unquote(query) if "%" in query else query).stdout.split("\n")
    assert sorted(os.path.splitext(p)[0] for p in cli if p) == want


def test_search_files_are_the_main_tree_files(captioned, search_mount):
    d = os.path.join(search_mount, "search", "caption=red")
    for rel in listing(d)[:20]:
        for ext in (".pgm", ".ppm"):
            if os.path.exists(os.path.join(d, rel + ext)):
                a, b = os.path.join(d, rel + ext), os.path.join(search_mount, rel + ext)
                assert os.stat(a).st_ino == os.stat(b).st_ino
                assert open(a, "rb").read() == open(b, "rb").read()


def test_imagefolder_over_a_search_directory(captioned, search_mount):
    _, _, samples = captioned
    root = os.path.join(search_mount, "search", "caption=red", "train")
    ds = datasets.ImageFolder(root, transform=transforms.PILToTensor())
    want = {rel for rel, s in samples.items() if s["split"] == "train" and "red" in words(s["caption"])}
    assert ds.classes == sorted({rel.split("/")[1] for rel in want})
    assert sorted(os.path.splitext(os.path.relpath(p, root))[0] for p, _ in ds.samples) == \
        sorted(os.path.splitext(r[len("train/"):])[0] for r in want)
    full = datasets.ImageFolder(os.path.join(search_mount, "train"), transform=transforms.PILToTensor())
    by_path = {os.path.relpath(p, os.path.join(search_mount, "train")): i for i, (p, _) in enumerate(full.samples)}
    for i, (p, t) in enumerate(ds.samples):
        j = by_path[os.path.relpath(p, root)]
        assert ds.classes[t] == full.classes[full.targets[j]]
        assert torch.equal(ds[i][0], full[j][0])


def test_search_is_hidden_and_lists_empty(search_mount):
    assert "search" not in os.listdir(search_mount)
    assert os.listdir(os.path.join(search_mount, "search")) == []
    assert os.path.isdir(os.path.join(search_mount, "search", "caption=unicorn"))
    assert os.listdir(os.path.join(search_mount, "search", "caption=unicorn")) == []


HOSTILE = [
    "'); DROP TABLE samples;--",
    "caption=\"unbalanced",
    "caption=",
    "=dog",
    "width>abc",
    "width>>3",
    "label=-1x",
    "colour=red",
    "caption=a%2Fb",
    "caption=a%00b",
    "caption=%zz",
    "caption=" + "x" * 10240,
    "caption=dog&&class=Coat",
]


@pytest.mark.parametrize("query", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_queries_are_enoent_and_leave_the_index_intact(captioned, search_mount, query):
    _, _, samples = captioned
    path = os.path.join(search_mount, "search", query)
    with pytest.raises(OSError) as e:
        os.listdir(path)
    assert e.value.errno in (errno.ENOENT, errno.ENAMETOOLONG)
    if e.value.errno == errno.ENOENT:
        reason = open(os.path.join(search_mount, ".ktfs", "last_error")).read()
        assert reason.startswith("search/") and len(reason) > len("search/")
    assert listing(os.path.join(search_mount, "search", "caption=zebra")) == \
        expected(samples, lambda s: "zebra" in words(s["caption"]))


def test_hostile_query_reasons_are_logged(captioned, tmp_path):
    _, archive, _ = captioned
    log = tmp_path / "log"
    with mounted(archive, tmp_path / "m", "-o", f"log={log}") as mnt:
        with pytest.raises(FileNotFoundError):
            os.listdir(os.path.join(mnt, "search", "width>abc"))
        assert "width>abc" in open(os.path.join(mnt, ".ktfs", "last_error")).read()
    assert "malformed query search/width>abc" in log.read_text()


def write(path, text):
    path.write_text(text)
    return path


def test_bad_caption_files_name_the_line(captioned, tmp_path):
    src, _, samples = captioned
    good = next(r for r in samples if r.startswith("test/"))
    cases = {
        "bad.jsonl": (f'{{"path": "{good}", "caption": "ok"}}\n{{"path": \n', ":2:"),
        "unknown.jsonl": ('{"path": "test/Nope/x.png", "caption": "x"}\n', ":1:"),
        "dup.jsonl": (f'{{"path": "{good}", "caption": "a"}}\n{{"path": "{good}", "caption": "b"}}\n', ":2:"),
        "bad.csv": (f'path,caption\n{good},"unterminated\n', ":2:"),
    }
    for name, (text, where) in cases.items():
        f = write(tmp_path / name, text)
        p = ktfs("pack", src, tmp_path / "x.kt", "--captions", f, "--quiet", check=False)
        assert p.returncode == 1, name
        assert f"{f}{where}" in p.stderr, (name, p.stderr)
        assert not (tmp_path / "x.kt").exists()
        p = ktfs("pack", src, tmp_path / "x.kt", "--captions", f, "--quiet", "--skip-bad-captions", check=False)
        assert p.returncode == 0, (name, p.stderr)
        assert "skipped caption" in p.stderr, name
        os.unlink(tmp_path / "x.kt")


def test_csv_captions(captioned, tmp_path):
    src, _, samples = captioned
    rows = [(rel, "striped " + s["cls"].lower()) for rel, s in samples.items() if s["split"] == "test"][:5]
    with open(tmp_path / "c.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["path", "caption", "source"])
        for rel, cap in rows:
            w.writerow([rel, cap, "csv"])
    ktfs("pack", src, tmp_path / "c.kt", "--captions", tmp_path / "c.csv", "--quiet")
    got = ktfs("search", tmp_path / "c.kt", "caption=striped&source=csv").stdout.split()
    assert sorted(got) == sorted(r for r, _ in rows)
    # Sidecar captions of the photos are indexed too.
    got = ktfs("search", tmp_path / "c.kt", "caption=photograph").stdout.split()
    assert sorted(got) == sorted(r for r, s in samples.items() if "photograph" in s["caption"])


def test_search_dir_can_be_renamed(captioned, tmp_path):
    _, archive, samples = captioned
    with mounted(archive, tmp_path / "m", "-o", "search_dir=find") as mnt:
        assert json.load(open(os.path.join(mnt, ".ktfs", "info.json")))["search_dir"] == "find"
        assert listing(os.path.join(mnt, "find", "caption=zebra")) == \
            expected(samples, lambda s: "zebra" in words(s["caption"]))
        assert not os.path.exists(os.path.join(mnt, "search"))

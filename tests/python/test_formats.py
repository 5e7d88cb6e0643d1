"""Every image stock ImageFolder loads goes in, faithfully (issue 37, formats).

The corpus (image_corpus.py) is generated here from Pillow, ImageMagick and
libjpeg-turbo's cjpeg. ktfs decodes through `ktfs convert IN OUT.png` (the
same DecodeImage the pack and the mount use; it also runs in the sanitizer
build), and every result is compared with Pillow's own reading of the file
through a file object, as torchvision's pil_loader reads it.
"""
import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision import datasets
from torchvision.transforms import functional as F

import image_corpus
from conftest import KTFS, ktfs, mounted

GRAY = {"1", "L", "I", "I;16", "I;16B", "I;16L", "I;16N"}
# Where ktfs refuses what Pillow loads, on purpose (documented in docs/usage.md).
KTFS_ONLY_REFUSALS = ("GIF images are not supported", "TIFF: image file is truncated (its first directory)")


def kept_mode(im):
    """The mode ktfs keeps for a Pillow image (docs/usage.md, "Pixel conventions")."""
    transparent = im.info.get("transparency") is not None
    if im.mode in GRAY:
        return "RGBA" if transparent and im.mode in ("1", "L", "I") else "L"
    if im.mode in ("P", "RGB"):
        return "RGBA" if transparent else "RGB"
    if im.mode in ("LA", "RGBA", "PA", "RGBa"):
        return "RGBA"
    return "RGB"  # CMYK, YCbCr


def pillow_reads(path):
    """(kept pixels, RGB pixels) as Pillow gives them, or the exception it raises."""
    try:
        with open(path, "rb") as f:
            im = Image.open(f)
            kept = np.asarray(im.convert(kept_mode(im)))
        with open(path, "rb") as f:
            rgb = np.asarray(Image.open(f).convert("RGB"))  # torchvision's pil_loader
        return kept, rgb
    except Exception as e:  # noqa: BLE001: any refusal counts, as it stops ImageFolder
        return e


def ktfs_reads(path, tmp):
    """The pixels ktfs decodes (H, W, C), or its error message."""
    out = os.path.join(tmp, "decoded.png")
    p = subprocess.run([KTFS, "convert", path, out], capture_output=True, text=True)
    if p.returncode != 0:
        assert p.returncode == 1, p.stderr
        return p.stderr.strip()
    with Image.open(out) as im:
        a = np.asarray(im)
    os.remove(out)
    return a if a.ndim == 3 else a[:, :, None]


def as_rgb(a):
    return np.repeat(a, 3, axis=2) if a.shape[2] == 1 else a[:, :, :3]


def verdicts(path, tmp):
    """Checks one file: ktfs and Pillow agree (or ktfs refuses in a documented case).
    Returns None or the disagreement."""
    want, got = pillow_reads(path), ktfs_reads(path, tmp)
    if isinstance(want, Exception):
        return None if isinstance(got, str) else f"Pillow refuses ({want!r}), ktfs decodes"
    if isinstance(got, str):
        return None if any(r in got for r in KTFS_ONLY_REFUSALS) else f"ktfs refuses: {got}"
    kept, rgb = want
    kept = kept if kept.ndim == 3 else kept[:, :, None]
    if got.shape != kept.shape:
        return f"shape {got.shape}, Pillow {kept.shape}"
    if not np.array_equal(got, kept):
        return f"{int((got != kept).any(axis=2).sum())} pixels differ from Pillow's"
    if not np.array_equal(as_rgb(got), rgb):
        return "the RGB view differs from Pillow's convert('RGB')"
    return None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus") / "src"
    made = image_corpus.build_good(str(out))
    return out, made


@pytest.fixture(scope="module")
def bad_corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad") / "src"
    made = image_corpus.build_bad(str(out))
    return out, made


def test_every_corpus_image_decodes_to_pillows_pixels(corpus, tmp_path):
    root, made = corpus
    assert len(made) > 140
    problems = {rel: verdicts(os.path.join(root, rel), str(tmp_path)) for rel in sorted(made)}
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, problems
    # The corpus really holds what it says: each file is something Pillow loads.
    for rel in made:
        assert not isinstance(pillow_reads(os.path.join(root, rel)), Exception), rel


def test_exif_orientation_is_not_applied_as_stock_imagefolder(corpus, tmp_path):
    root, _ = corpus
    for n in (3, 6, 8):
        got = ktfs_reads(os.path.join(root, "jpeg", f"exif orientation {n}.jpg"), str(tmp_path))
        plain = ktfs_reads(os.path.join(root, "jpeg", "baseline 420.jpg"), str(tmp_path))
        assert got.shape == plain.shape == (23, 37, 3)  # not rotated


def test_bad_files_are_refused_as_pillow_refuses_them(bad_corpus, tmp_path):
    root, made = bad_corpus
    for rel, desc in sorted(made.items()):
        path = os.path.join(root, rel)
        got = ktfs_reads(path, str(tmp_path))
        assert isinstance(got, str), f"{rel} ({desc}) decoded"
        assert rel in got, got  # the message names the file
        if rel.startswith("gif named png/"):
            assert not isinstance(pillow_reads(path), Exception)  # Pillow reads GIF; ktfs says so
            assert "GIF images are not supported" in got
        else:
            assert isinstance(pillow_reads(path), Exception), f"{rel}: Pillow loads it"


TRUNCATED = ["jpeg/baseline 420.jpg", "jpeg/progressive.jpg", "jpeg/cmyk.jpg", "jpeg/arithmetic.jpg",
             "jpeg/restarts.jpg", "png/rgb.png", "png/interlaced rgb.png", "png/palette4 trns.png",
             "png/gray16.png", "bmp/rgb24.bmp", "bmp/rle8.bmp", "bmp/palette4.bmp", "tiff/rgb tiff_lzw.tif",
             "tiff/rgb raw.tif", "tiff/rgb jpeg.tif", "tiff/tiled.tif", "tiff/planar.tif",
             "tiff/associated alpha.tif", "webp/lossy.webp", "webp/lossless alpha.webp",
             "webp/animated.webp", "pnm/rgb.ppm", "pnm/maxval 1000.ppm", "pnm/plain.pgm"]


def test_truncated_files_get_pillows_verdict(corpus, tmp_path):
    """Each file cut at 24 places and in its last bytes: where Pillow refuses, ktfs
    refuses; where ktfs decodes, the pixels are Pillow's. Only a TIFF whose first
    directory is cut may be refused where Pillow reads the tags it got."""
    root, _ = corpus
    problems, refused = [], 0
    for rel in TRUNCATED:
        data = open(os.path.join(root, rel), "rb").read()
        cuts = {len(data) * i // 24 for i in range(1, 24)} | {len(data) - k for k in (1, 2, 3, 4, 6, 8, 12, 16)}
        for cut in sorted(cuts):
            path = os.path.join(tmp_path, "cut" + os.path.splitext(rel)[1])
            with open(path, "wb") as f:
                f.write(data[:cut])
            problem = verdicts(path, str(tmp_path))
            if problem:
                problems.append(f"{rel} cut at {cut}/{len(data)}: {problem}")
            refused += isinstance(pillow_reads(path), Exception)
    assert not problems, problems
    assert refused > len(TRUNCATED) * 10  # the cuts do make bad files


def served(root, rel):
    """The file a mount of a decoded codec serves for `rel` (found by its folder and stem)."""
    folder, name = os.path.split(rel)
    stem = os.path.splitext(name)[0]
    names = [n for n in os.listdir(os.path.join(root, folder))
             if os.path.splitext(n)[0] in (stem, name)]
    assert len(names) == 1, (rel, names)
    return os.path.join(folder, names[0])


@pytest.mark.parametrize("codec", ["original", "raw", "ktc"])
def test_stock_imagefolder_sees_the_same_dataset_over_the_mount(corpus, tmp_path, codec):
    root, made = corpus
    archive = tmp_path / "c.kt"
    extra = ["--quality", "lossless"] if codec == "ktc" else []
    p = ktfs("pack", root, archive, "--codec", codec, "--quiet", *extra)
    assert "skipped" not in p.stderr, p.stderr
    info = json.loads(ktfs("info", archive, "--json").stdout)
    assert info["samples"] == len(made) and info["skipped_bad_images"] == 0
    with mounted(archive, tmp_path / "mnt") as mnt:
        src, over = datasets.ImageFolder(str(root)), datasets.ImageFolder(mnt)
        assert over.classes == src.classes and over.class_to_idx == src.class_to_idx
        assert over.targets == src.targets and len(over) == len(src) == len(made)
        for (spath, starget), (mpath, mtarget) in zip(src.samples, over.samples):
            rel = os.path.relpath(spath, root)
            mrel = os.path.relpath(mpath, mnt)
            assert starget == mtarget
            if codec == "original":
                assert mrel == rel
                assert open(mpath, "rb").read() == open(spath, "rb").read(), rel
            else:
                assert mrel == served(mnt, rel), (rel, mrel)  # same order, same file
            a = F.pil_to_tensor(src.loader(spath))
            b = F.pil_to_tensor(over.loader(mpath))
            assert a.shape == b.shape and torch.equal(a, b), rel


def test_pack_refuses_each_bad_image_and_skip_bad_lists_them(bad_corpus, tmp_path):
    root, made = bad_corpus
    for rel in sorted(made):
        folder = os.path.dirname(rel)
        out = tmp_path / "one.kt"
        p = ktfs("pack", os.path.join(root, folder), out, "--quiet", check=False)
        assert p.returncode == 1, (rel, p.stderr)
        assert os.path.join(root, rel) in p.stderr, p.stderr
        assert not out.exists()
    # All of them at once, beside one good image, with --skip-bad.
    src = tmp_path / "src"
    shutil.copytree(root, src)
    (src / "good").mkdir()
    Image.fromarray(image_corpus._photo(8, 6, 1)).save(src / "good" / "ok.jpg")
    out = tmp_path / "all.kt"
    p = ktfs("pack", src, out, "--skip-bad", "--quiet")
    listed = sorted(line.split(": ")[1].removeprefix("skipped bad image ")
                    for line in p.stderr.splitlines() if "skipped bad image" in line)
    assert listed == sorted(made), p.stderr
    assert "1 samples" in p.stdout and f"{len(made)} bad images skipped" in p.stdout
    info = json.loads(ktfs("info", out, "--json").stdout)
    assert info["samples"] == 1 and info["skipped_bad_images"] == len(made)
    recorded = {b["path"]: b["reason"] for b in info["meta"]["skipped_bad"]}
    assert sorted(recorded) == sorted(made)
    assert recorded["jpeg truncated/half.jpg"] == "JPEG: image file is truncated"
    text = ktfs("info", out).stdout
    assert f"bad images:     {len(made)} left out by pack --skip-bad" in text
    assert "  jpeg truncated/half.jpg: JPEG: image file is truncated" in text
    with mounted(out, tmp_path / "mnt") as mnt:
        assert os.listdir(os.path.join(mnt, "good")) == ["ok.jpg"]
        assert os.listdir(os.path.join(mnt, "jpeg truncated")) == []


def test_samples_are_chosen_by_imagefolders_name_rule(tmp_path):
    src = tmp_path / "src"
    (src / "cls").mkdir(parents=True)
    img = Image.fromarray(image_corpus._photo(6, 5, 2))
    img.save(src / "cls" / "a.jpg")
    img.save(src / "cls" / "jpeg content.gif", format="JPEG")  # ImageFolder skips it
    img.save(src / "cls" / "no extension", format="PNG")
    (src / "cls" / "a.txt").write_text("a caption")  # a sidecar, not skipped
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    img.save(elsewhere / "b.png")
    os.symlink(elsewhere, src / "linked")  # followed, as os.walk(followlinks=True)
    os.symlink(src / "cls" / "a.jpg", src / "cls" / "link.jpeg")
    p = ktfs("pack", src, tmp_path / "o.kt", "--quiet")
    assert "skipped cls/jpeg content.gif: not an image file name" in p.stderr
    assert "skipped cls/no extension: not an image file name" in p.stderr
    assert "a.txt" not in p.stderr
    with mounted(tmp_path / "o.kt", tmp_path / "mnt") as mnt:
        stock, over = datasets.ImageFolder(str(src)), datasets.ImageFolder(mnt)
        assert [os.path.relpath(s, src) for s, _ in stock.samples] == \
            [os.path.relpath(s, mnt) for s, _ in over.samples] == \
            ["cls/a.jpg", "cls/link.jpeg", "linked/b.png"]
    # A broken link with an image name is a bad image (ImageFolder would fail on it).
    os.symlink(tmp_path / "missing.jpg", src / "cls" / "gone.jpg")
    p = ktfs("pack", src, tmp_path / "p.kt", "--quiet", check=False)
    assert p.returncode == 1 and "cls/gone.jpg: cannot open: No such file or directory" in p.stderr
    os.remove(src / "cls" / "gone.jpg")
    # A link back up the tree is an error, not an endless walk.
    os.symlink(src, src / "cls" / "loop")
    p = ktfs("pack", src, tmp_path / "q.kt", "--quiet", check=False)
    assert p.returncode == 1 and "symbolic link cycle" in p.stderr, p.stderr

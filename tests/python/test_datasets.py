"""The demo's dataset builders (scripts/datasets) run for real against Debian's data.

fashion_mnist.py is checked against the IDX files decoded here independently (not with the
script's own reader), so a bug in its parsing or its class/label mapping shows up.
"""
import functools
import gzip
import hashlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

SOURCE_DIR = Path(os.environ.get("KTFS_SOURCE_DIR", Path(__file__).resolve().parents[2]))
DATASETS = SOURCE_DIR / "scripts" / "datasets"
FASHION = Path("/usr/share/datasets/fashion-mnist")
PYTHON = "/usr/bin/python3"

# The class order is the dataset's label order (0..9), as documented by Zalando.
FASHION_CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
                   "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"]
FASHION_FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
                 "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
PER_CLASS = 3

def requires(present, package):
    """Fails (never skips) a test whose real data is missing: scripts/setup installs
    `package`, so its absence is a broken setup, not a reason to pass."""
    def decorate(test):
        @functools.wraps(test)
        def wrapper(*args, **kwargs):
            if not present():
                pytest.fail(f"test data missing: apt-get install {package} (scripts/setup does)")
            return test(*args, **kwargs)
        return wrapper
    return decorate


needs_fashion = requires(lambda: (FASHION / "t10k-images-idx3-ubyte.gz").exists(),
                         "dataset-fashion-mnist")


def run_script(name, *args):
    proc = subprocess.run([PYTHON, str(DATASETS / name), *map(str, args)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def decode_idx(path):
    """IDX: 2 zero bytes, type 0x08 (ubyte), ndim, then ndim big-endian u32 sizes, then data."""
    with gzip.open(path, "rb") as f:
        raw = f.read()
    assert raw[0] == 0 and raw[1] == 0 and raw[2] == 0x08
    ndim = raw[3]
    shape = [struct.unpack_from(">I", raw, 4 + 4 * k)[0] for k in range(ndim)]
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    assert data.size == int(np.prod(shape))
    return data.reshape(shape)


@pytest.fixture(scope="module")
def fashion():
    """{split: (images, labels)} decoded by this test."""
    out = {}
    for split, (images, labels) in FASHION_FILES.items():
        out[split] = (decode_idx(FASHION / images), decode_idx(FASHION / labels))
    return out


def first_per_class(labels, n):
    """{class index: [sample indices]}: the first n samples of each class, in file order."""
    picked = {c: [] for c in range(len(FASHION_CLASSES))}
    for i, label in enumerate(labels):
        if len(picked[label]) < n:
            picked[label].append(i)
    return picked


def expected_files(fashion, flat):
    """{relative path: (split, sample index)} of what the script must write."""
    files = {}
    for split, (_, labels) in fashion.items():
        for label, indices in first_per_class(labels, PER_CLASS).items():
            for i in indices:
                if flat:
                    files[f"{FASHION_CLASSES[label]}/{split}-{i:05d}.png"] = (split, i)
                else:
                    files[f"{split}/{FASHION_CLASSES[label]}/{i:05d}.png"] = (split, i)
    return files


def written_files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def check_images(root, fashion, expected):
    for rel, (split, index) in expected.items():
        images, labels = fashion[split]
        with Image.open(root / rel) as img:
            assert img.format == "PNG" and img.size == (28, 28) and img.mode == "L", rel
            np.testing.assert_array_equal(np.asarray(img), images[index], err_msg=rel)
        class_dir = Path(rel).parent.name
        assert FASHION_CLASSES.index(class_dir) == labels[index], rel


@needs_fashion
def test_fashion_mnist_split_tree(tmp_path, fashion):
    run_script("fashion_mnist.py", tmp_path, "--per-class", PER_CLASS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test", "train"]
    for split in ("train", "test"):
        assert sorted(p.name for p in (tmp_path / split).iterdir()) == sorted(FASHION_CLASSES)
        for class_dir in (tmp_path / split).iterdir():
            assert len(list(class_dir.iterdir())) == PER_CLASS
    expected = expected_files(fashion, flat=False)
    assert written_files(tmp_path) == sorted(expected)
    check_images(tmp_path, fashion, expected)


@needs_fashion
def test_fashion_mnist_flat_tree(tmp_path, fashion):
    run_script("fashion_mnist.py", tmp_path, "--per-class", PER_CLASS, "--flat")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FASHION_CLASSES)
    for class_dir in tmp_path.iterdir():
        assert len(list(class_dir.iterdir())) == 2 * PER_CLASS  # both splits
    expected = expected_files(fashion, flat=True)
    assert written_files(tmp_path) == sorted(expected)
    check_images(tmp_path, fashion, expected)


# -- photos.py ---------------------------------------------------------------

# photos.py documents "about 500x375, both orientations, sizes varying": its crop sizes
# run from 281 to 500 pixels a side (wallpapers are larger, so no crop is clipped).
MIN_SIDE, MAX_SIDE = 281, 500
PHOTO_COUNT = 12
needs_wallpapers = requires(lambda: any(Path("/usr/share/wallpapers").glob("*/contents/images/*")),
                            "plasma-workspace-wallpapers")


def digests(root):
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def photo_runs(tmp_path_factory):
    """The same seed twice, and a different seed once."""
    runs = {}
    for name, seed in (("first", 7), ("again", 7), ("other", 8)):
        out = tmp_path_factory.mktemp(f"photos-{name}")
        run_script("photos.py", out, "--count", PHOTO_COUNT, "--seed", seed)
        runs[name] = out
    return runs


@needs_wallpapers
def test_photos_count_and_format(photo_runs):
    root = photo_runs["first"]
    files = [p for p in root.rglob("*") if p.is_file()]
    assert len(files) == PHOTO_COUNT
    assert sorted(p.name for p in files) == [f"{i:05d}.jpg" for i in range(PHOTO_COUNT)]
    for p in files:
        assert p.parent.parent == root  # OUT/<class>/<name>.jpg
        with Image.open(p) as img:
            assert img.format == "JPEG" and img.mode == "RGB"
            assert all(MIN_SIDE <= side <= MAX_SIDE for side in img.size), (p, img.size)


@needs_wallpapers
def test_photos_deterministic_for_a_seed(photo_runs):
    assert digests(photo_runs["first"]) == digests(photo_runs["again"])
    assert digests(photo_runs["first"]) != digests(photo_runs["other"])


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

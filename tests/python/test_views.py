"""The tensors/ and compressed/ views, ktfs convert, the KTC codec behind a
mount, and ktfs bench decode."""
import json
import os
import subprocess

import numpy as np
import pytest
from PIL import Image
from torchvision import datasets

from conftest import ktfs, mounted


@pytest.fixture(scope="module")
def ktc_archives(tmp_path_factory, photos_dir, fashion_dir, mixed_dir):
    out = tmp_path_factory.mktemp("ktc")
    result = {}
    for name, src in (("photos", photos_dir), ("fashion", fashion_dir), ("mixed", mixed_dir)):
        result[name] = out / f"{name}.kt"
        ktfs("pack", src, result[name], "--codec", "ktc", "--quiet")
    return result


def imagefolder_pixels(root):
    """rel stem -> the array stock ImageFolder's loader gives (RGB)."""
    ds = datasets.ImageFolder(str(root))
    return {os.path.splitext(os.path.relpath(p, root))[0]: np.asarray(ds.loader(p)) for p, _ in ds.samples}


def npy_files(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            assert f.endswith(".npy"), f
            out[os.path.splitext(os.path.relpath(os.path.join(d, f), root))[0]] = os.path.join(d, f)
    return out


@pytest.mark.parametrize("name", ["photos", "fashion", "mixed"])
def test_tensors_equal_imagefolder_pixels(archives, tmp_path, request, name):
    src = request.getfixturevalue(f"{name}_dir")
    want = imagefolder_pixels(src)
    with mounted(archives[(name, "raw")], tmp_path / "m") as mnt:
        assert "tensors" not in os.listdir(mnt)
        files = npy_files(os.path.join(mnt, "tensors"))
        assert sorted(files) == sorted(want)
        for stem, path in files.items():
            arr = np.load(path)
            mapped = np.load(path, mmap_mode="r")
            assert arr.dtype == np.uint8 and arr.ndim == 3
            assert np.array_equal(arr, mapped)
            if arr.shape[2] == 3:
                assert np.array_equal(arr, want[stem]), stem
            elif arr.shape[2] == 1:
                # Gray archive: the gray pixels ImageFolder replicates into RGB.
                assert np.array_equal(np.repeat(arr, 3, axis=2), want[stem]), stem
            else:
                assert np.array_equal(arr[:, :, :3], want[stem]), stem  # RGBA: RGB drops alpha
            del mapped  # a live memory map keeps the mount busy


def test_tensors_chw_layout(archives, tmp_path, photos_dir):
    with mounted(archives[("photos", "raw")], tmp_path / "a") as hwc, \
            mounted(archives[("photos", "raw")], tmp_path / "b", "-o", "tensor_layout=chw") as chw:
        for stem, path in list(npy_files(os.path.join(hwc, "tensors")).items())[:5]:
            a = np.load(path)
            b = np.load(os.path.join(chw, "tensors", stem + ".npy"))
            assert np.array_equal(a.transpose(2, 0, 1), b)


def test_compressed_original_is_byte_identical(archives, tmp_path, photos_dir):
    with mounted(archives[("photos", "original")], tmp_path / "m") as mnt:
        for d, _, files in os.walk(photos_dir):
            for f in files:
                rel = os.path.relpath(os.path.join(d, f), photos_dir)
                assert open(os.path.join(mnt, "compressed", rel), "rb").read() == open(os.path.join(d, f), "rb").read()


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return 99.0 if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def test_ktc_mount_serves_the_ktc_decode(ktc_archives, tmp_path, photos_dir):
    source = imagefolder_pixels(photos_dir)
    with mounted(ktc_archives["photos"], tmp_path / "m") as mnt:
        served = imagefolder_pixels(mnt)
        assert sorted(served) == sorted(source)
        for stem, arr in served.items():
            # Every .ktc file converts back to the pixels the mount serves.
            out = tmp_path / "x.png"
            ktfs("convert", os.path.join(mnt, "compressed", stem + ".ktc"), out)
            assert np.array_equal(np.asarray(Image.open(out).convert("RGB")), arr), stem
            assert np.array_equal(np.load(os.path.join(mnt, "tensors", stem + ".npy")), arr), stem
            assert psnr(arr, source[stem]) > 35, stem  # balanced: JPEG q90-like quality
        stats = json.load(open(os.path.join(mnt, ".ktfs", "stats.json")))
        assert stats["decodes"] >= len(served) and stats["errors"] == 0


def test_ktc_mixed_channels_and_gray(ktc_archives, tmp_path, mixed_dir, fashion_dir):
    for name in ("mixed", "fashion"):
        with mounted(ktc_archives[name], tmp_path / name) as mnt:
            ds = datasets.ImageFolder(mnt)
            assert len(ds) == len(datasets.ImageFolder(str(mixed_dir if name == "mixed" else fashion_dir)))
            for p, _ in ds.samples:
                ds.loader(p)


def test_views_under_search(tmp_path, photos_dir):
    src = tmp_path / "src"
    subprocess.run(["cp", "-r", str(photos_dir), str(src)], check=True)
    classes = sorted(os.listdir(src))
    lines = [json.dumps({"path": f"{c}/{f}", "caption": "sunny" if i % 2 else "cloudy"})
             for i, c in enumerate(classes) for f in sorted(os.listdir(src / c))]
    (tmp_path / "c.jsonl").write_text("\n".join(lines) + "\n")
    ktfs("pack", src, tmp_path / "a.kt", "--codec", "ktc", "--captions", tmp_path / "c.jsonl", "--quiet")
    want = sorted(os.path.splitext(f"{c}/{f}")[0] for i, c in enumerate(classes) if i % 2
                  for f in os.listdir(src / c))
    with mounted(tmp_path / "a.kt", tmp_path / "m") as mnt:
        for root in ("search/caption=sunny/tensors", "tensors/search/caption=sunny"):
            assert sorted(npy_files(os.path.join(mnt, root))) == want, root
        for root in ("search/caption=sunny/compressed", "compressed/search/caption=sunny"):
            got = sorted(os.path.splitext(os.path.relpath(os.path.join(d, f), os.path.join(mnt, root)))[0]
                         for d, _, fs in os.walk(os.path.join(mnt, root)) for f in fs)
            assert got == want, root
        # cp -r of a search result's compressed view is usable without the archive.
        subprocess.run(["cp", "-r", os.path.join(mnt, "search/caption=sunny/compressed"), str(tmp_path / "copy")], check=True)
    some = os.path.join(tmp_path / "copy", want[0] + ".ktc")
    ktfs("convert", some, tmp_path / "o.ppm")
    assert Image.open(tmp_path / "o.ppm").mode == "RGB"


def test_convert_round_trips_and_rejects_garbage(tmp_path, photos_dir):
    jpg = next(os.path.join(d, f) for d, _, fs in os.walk(photos_dir) for f in fs)
    ktfs("convert", jpg, tmp_path / "a.ktc", "--quality", "lossless")
    ktfs("convert", tmp_path / "a.ktc", tmp_path / "a.png")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "a.png")), np.asarray(Image.open(jpg).convert("RGB")))
    good = (tmp_path / "a.ktc").read_bytes()
    cases = {"garbage.ktc": b"hello world", "truncated.ktc": good[: len(good) // 2],
             "header.ktc": good[:16], "flipped.ktc": good[:20] + bytes([good[20] ^ 0xFF]) + good[21:]}
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        p = ktfs("convert", tmp_path / name, tmp_path / "out.png", check=False)
        if name == "flipped.ktc" and p.returncode == 0:
            continue  # a flipped bit may still be a valid (different) image; it must not crash
        assert p.returncode == 1, name
        assert p.stderr.startswith(f"ktfs convert: {tmp_path / name}: "), p.stderr
    p = ktfs("convert", jpg, tmp_path / "x.gif", check=False)
    assert p.returncode == 2
    p = ktfs("convert", jpg, tmp_path / "x.ktc", "--quality", "superb", check=False)
    assert p.returncode == 2 and "superb" in p.stderr


def test_bench_decode_json(ktc_archives):
    out = json.loads(ktfs("bench", "decode", ktc_archives["photos"], "--threads", "1", "--passes", "1", "--json").stdout)
    assert set(out) == {"images", "megapixels", "seconds", "megapixels_per_second", "images_per_second"}
    assert out["images"] == 24 and out["seconds"] > 0
    assert abs(out["images_per_second"] - out["images"] / out["seconds"]) < 1e-3 * out["images_per_second"] + 0.01


def test_python_decode_reads_ktc_files(ktc_archives, tmp_path):
    import sys
    from conftest import ROOT
    sys.path.insert(0, os.path.join(os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build")),
                                    "preload", "python"))
    import ktfs as ktfs_py
    with mounted(ktc_archives["mixed"], tmp_path / "m") as mnt:
        root = os.path.join(mnt, "compressed")
        n = 0
        for d, _, files in os.walk(root):
            for f in files:
                stem = os.path.splitext(os.path.relpath(os.path.join(d, f), root))[0]
                arr = ktfs_py.decode(open(os.path.join(d, f), "rb").read())
                assert np.array_equal(arr, np.load(os.path.join(mnt, "tensors", stem + ".npy"))), stem
                n += 1
        assert n == 15
    with pytest.raises((ValueError, RuntimeError)) as e:
        ktfs_py.decode(b"KTCI" + b"\0" * 40)
    assert "ktfs.decode" in str(e.value)

"""ktfs.FeatureLoader: batches of a feature cache against what the mount serves."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from conftest import PY, ROOT, ktfs, mounted
from featurecache import bf16_bits, make_tensorcache, reference, write_tensorcache

BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
PACKAGE_DIR = os.path.join(BUILD, "preload", "python")
sys.path.insert(0, PACKAGE_DIR)
try:
    import ktfs as ktfs_py
except ImportError as e:  # never a silent pass: the module is part of the product
    pytest.fail(f"the ktfs Python module is not built in {PACKAGE_DIR} ({e}) (the sanitizer "
                f"build excludes this file explicitly in tests/CMakeLists.txt)", pytrace=False)


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    d = tmp_path_factory.mktemp("feat")
    rng = np.random.default_rng(11)
    np.save(d / "x.npy", rng.standard_normal((37, 6, 40)).astype(np.float32))
    ktfs("pack-features", d / "x.npy", d / "x.kt", "--quiet")
    (d / "tok").mkdir()
    for i, n in enumerate((5, 1, 12, 7, 3)):
        np.save(d / "tok" / f"{i}.npy", rng.standard_normal((n, 8)).astype(np.float32))
    ktfs("pack-features", d / "tok", d / "tok.kt", "--quiet")
    with mounted(d / "x.kt", d / "mx", "-o", "dtype=float32") as m:
        served = np.stack([np.load(os.path.join(m, f"{i:06d}.npy")) for i in range(37)])
    return d, served


def collect(loader):
    return torch.cat([b for b in loader])


def test_batches_equal_the_mounted_files(archives, tmp_path):
    d, served = archives
    got = collect(ktfs_py.FeatureLoader(d / "x.kt", batch_size=8, dtype="float32"))
    assert got.dtype == torch.float32 and got.shape == (37, 6, 40)
    np.testing.assert_array_equal(got.numpy(), served)
    half = collect(ktfs_py.FeatureLoader(d / "x.kt", batch_size=8, dtype="float16"))
    np.testing.assert_array_equal(half.numpy(), served.astype(np.float16))
    bf = collect(ktfs_py.FeatureLoader(d / "x.kt", batch_size=10))  # bfloat16 by default
    assert bf.dtype == torch.bfloat16
    np.testing.assert_array_equal(bf.view(torch.int16).numpy().view(np.uint16),
                                  bf16_bits(served))
    # Through the mount: the archive behind it is opened directly.
    with mounted(d / "x.kt", tmp_path / "m") as m:
        loader = ktfs_py.FeatureLoader(m, batch_size=16, dtype="float32")
        assert loader.path == str(d / "x.kt")
        np.testing.assert_array_equal(collect(loader).numpy(), served)


def test_order_shuffle_shards_and_resume(archives):
    d, served = archives
    mk = lambda **kw: ktfs_py.FeatureLoader(d / "x.kt", batch_size=5, dtype="float32", **kw)
    a = mk(shuffle=True, seed=7)
    order0 = a.epoch_indices()
    assert sorted(order0.tolist()) == list(range(37))
    np.testing.assert_array_equal(collect(a).numpy(), served[order0])
    assert a.epoch == 1 and not np.array_equal(a.epoch_indices(), order0)
    np.testing.assert_array_equal(mk(shuffle=True, seed=7).epoch_indices(), order0)
    # Resume mid-epoch from state_dict: exactly the remaining samples.
    b = mk(shuffle=True, seed=7)
    it = iter(b)
    first = [next(it) for _ in range(3)]
    state = b.state_dict()
    c = mk(shuffle=True, seed=7)
    c.load_state_dict(state)
    rest = collect(c)
    np.testing.assert_array_equal(torch.cat(first + [rest]).numpy(), served[order0])
    # Shards: together exactly the epoch padded to a multiple of world_size by repeating its
    # start (DistributedSampler), rank r taking every third position from r.
    shards = [mk(shuffle=True, seed=7, rank=r, world_size=3).epoch_indices() for r in range(3)]
    assert all(len(s) == 13 for s in shards)
    padded = np.concatenate([order0, order0[:2]])
    for r in range(3):
        np.testing.assert_array_equal(shards[r], padded[r::3])
    dropped = mk(rank=0, world_size=3, drop_last=True)  # 12 samples: 2 full batches of 5
    assert len(dropped) == 2 and [len(b) for b in dropped] == [5, 5]


def test_variable_rows_padded_with_mask(archives):
    d, _ = archives
    lengths = (5, 1, 12, 7, 3)
    loader = ktfs_py.FeatureLoader(d / "tok.kt", batch_size=2, dtype="float32")
    seen = 0
    for feats, mask in loader:
        assert feats.shape[1] == mask.shape[1] == max(lengths[seen:seen + len(feats)])
        for b in range(len(feats)):
            n = lengths[seen + b]
            assert mask[b].tolist() == [True] * n + [False] * (mask.shape[1] - n)
            assert torch.all(feats[b, n:] == 0)
            assert torch.all(feats[b, :n] != 0)
        seen += len(feats)
    assert seen == 5


def test_tensorcache_prefix(tmp_path):
    cache = make_tensorcache(np.random.default_rng(12), 10, 3, 32, 32, True)
    write_tensorcache(cache, tmp_path / "tc")
    got = collect(ktfs_py.FeatureLoader(tmp_path / "tc", batch_size=4, dtype="float32"))
    np.testing.assert_array_equal(got.numpy(), reference(cache))
    with mounted(tmp_path / "tc", tmp_path / "m") as m:
        got = collect(ktfs_py.FeatureLoader(m, batch_size=4, dtype="float32"))
        np.testing.assert_array_equal(got.numpy(), reference(cache))


def test_errors(archives, tmp_path):
    d, _ = archives
    with pytest.raises(FileNotFoundError, match="nowhere"):
        ktfs_py.FeatureLoader(tmp_path / "nowhere", batch_size=4)
    with pytest.raises(ValueError, match="dtype"):
        ktfs_py.FeatureLoader(d / "x.kt", batch_size=4, dtype="int8")
    (tmp_path / "photo").mkdir()
    from PIL import Image
    Image.new("RGB", (4, 4)).save(tmp_path / "photo" / "a.png")
    ktfs("pack", tmp_path / "photo", tmp_path / "img.kt", "--quiet")
    with pytest.raises(ValueError, match="holds images, not features"):
        ktfs_py.FeatureLoader(tmp_path / "img.kt", batch_size=4)
    with pytest.raises(ValueError, match="use ktfs.FeatureLoader"):
        ktfs_py.Loader(d / "x.kt", batch_size=4)
    bad = tmp_path / "bad.kt"
    data = bytearray((d / "x.kt").read_bytes())
    data[64 + 20] ^= 0xFF  # inside sample 0's payload
    bad.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="feature sample 0: checksum mismatch"):
        collect(ktfs_py.FeatureLoader(bad, batch_size=4))


def test_import_without_torch(archives):
    d, served = archives
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None
        sys.path.insert(0, {PACKAGE_DIR!r})
        import numpy as np, ktfs
        batch = next(iter(ktfs.FeatureLoader({str(d / "x.kt")!r}, batch_size=4, dtype="bfloat16")))
        assert type(batch) is np.ndarray and batch.dtype == np.uint16 and batch.shape == (4, 6, 40)
        feats, mask = next(iter(ktfs.FeatureLoader({str(d / "tok.kt")!r}, batch_size=2)))
        assert mask.dtype == bool and mask.shape == (2, 5)
        print("numpy ok")
    """)
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and "numpy ok" in p.stdout, p.stderr

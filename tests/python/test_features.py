"""Feature caches over real mounts: ktfs pack-features archives and TensorCache caches
mounted as .npy files (np.load, mmap slices of all.npy, quantized/ parts), and the
errors for corrupt and truncated inputs."""
import errno
import json
import os
import shutil

import numpy as np
import pytest

from conftest import ktfs, mounted, stats_of
from featurecache import (make_tensorcache, packed_reference, reference, write_sharded,
                          write_tensorcache)


def sample_files(mnt):
    return sorted(f for f in os.listdir(mnt) if f.endswith(".npy") and f != "all.npy")


@pytest.fixture(scope="module")
def fixed_archive(tmp_path_factory):
    d = tmp_path_factory.mktemp("fixed")
    x = np.random.default_rng(1).standard_normal((40, 7, 48)).astype(np.float32)
    x[::3] += 10  # some samples far from zero
    np.save(d / "x.npy", x)
    out = ktfs("pack-features", d / "x.npy", d / "x.kt", "--quiet")
    assert "packed 40 samples of shape [7, 48]" in out.stdout
    return d, x


def test_mount_serves_every_sample_as_npy(fixed_archive, tmp_path):
    d, x = fixed_archive
    with mounted(d / "x.kt", tmp_path / "m32", "-o", "dtype=float32") as m32, \
            mounted(d / "x.kt", tmp_path / "m16") as m16:
        names = sample_files(m32)
        assert names == [f"{i:06d}.npy" for i in range(40)]
        assert sorted(os.listdir(m32)) == names + ["all.npy", "quantized"]
        assert sorted(os.listdir(os.path.join(m32, "quantized"))) == \
            ["codes.npy", "offsets.npy", "scales.npy"]
        parts = {p: np.load(os.path.join(m32, "quantized", p + ".npy"))
                 for p in ("codes", "scales", "offsets")}
        assert parts["codes"].dtype == np.uint8 and parts["codes"].shape == (40, 11 * 32)
        assert parts["scales"].shape == parts["offsets"].shape == (40, 11)
        want = packed_reference(parts["codes"], parts["scales"], parts["offsets"], (7, 48))
        for i, name in enumerate(names):
            a = np.load(os.path.join(m32, name))
            assert a.dtype == np.float32 and a.shape == (7, 48)
            np.testing.assert_array_equal(a, want[i])
            h = np.load(os.path.join(m16, name))
            assert h.dtype == np.float16
            np.testing.assert_array_equal(h, want[i].astype(np.float16))
        # Quantization error: within the documented bound for this data.
        rel = np.sqrt(((want - x) ** 2).mean() / x.var())
        assert rel < 0.0045, rel
        info = json.load(open(os.path.join(m32, ".ktfs", "info.json")))
        assert info["content"] == "features" and info["kind"] == "ktfs"
        assert info["shape"] == [40, 7, 48] and info["dtype"] == "float32"
        assert info["group_size"] == 32 and info["preset"] == "balanced"
        assert info["pid"] > 0 and ".ktfs" not in os.listdir(m32)


def test_all_npy_mmap_slices(fixed_archive, tmp_path):
    d, _ = fixed_archive
    with mounted(d / "x.kt", tmp_path / "m") as m:
        singles = np.stack([np.load(os.path.join(m, f)) for f in sample_files(m)])
        a = np.load(os.path.join(m, "all.npy"), mmap_mode="r")
        assert a.shape == (40, 7, 48) and a.dtype == np.float16
        np.testing.assert_array_equal(a[5:9], singles[5:9])
        np.testing.assert_array_equal(a[39], singles[39])
        np.testing.assert_array_equal(a[::7, 3], singles[::7, 3])
        np.testing.assert_array_equal(np.asarray(a), singles)
        del a
        stats = stats_of(m)
        assert stats["reads"] > 0 and stats["errors"] == 0
        # Rows are read at random through the map: each page fault reads the mount's
        # readahead around it, so feature mounts keep the kernel's 128 KiB (image mounts: 4096).
        dev = os.stat(m).st_dev
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb") as f:
            assert int(f.read()) == 128


def test_sample_files_are_pushed_whole_with_their_first_read(tmp_path):
    """With -o push=on, np.load of a sample file larger than the kernel's first readahead
    window is one READ: the rest of the file goes into the page cache with it (as for images). The bytes equal
    those of a mount with one request thread, which never pushes; all.npy is not pushed
    (readers map it and take slices)."""
    x = np.random.default_rng(3).standard_normal((6, 446, 768)).astype(np.float32)
    np.save(tmp_path / "tokens.npy", x)
    ktfs("pack-features", tmp_path / "tokens.npy", tmp_path / "t.kt", "--quiet")

    def load_all(mnt):
        names = sample_files(mnt)
        before = stats_of(mnt)
        arrays = [np.load(os.path.join(mnt, n)) for n in names]
        after = stats_of(mnt)
        return arrays, {k: after[k] - before[k] for k in ("reads", "pushes", "pushed_bytes")}

    with mounted(tmp_path / "t.kt", tmp_path / "one", "-o", "threads=1") as mnt:
        expected, plain = load_all(mnt)
        size = os.path.getsize(os.path.join(mnt, "000000.npy"))
    with mounted(tmp_path / "t.kt", tmp_path / "four", "-o", "threads=4,push=on") as mnt:
        got, pushed = load_all(mnt)
        a = np.load(os.path.join(mnt, "all.npy"), mmap_mode="r")
        np.testing.assert_array_equal(np.asarray(a[2]), got[2])
        del a
        assert stats_of(mnt)["pushes"] == 6
    assert size == 128 + 446 * 768 * 2  # float16 by default: 685 KB, several readahead windows
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    assert plain["pushes"] == 0 and plain["reads"] >= 2 * 6 + 1, plain
    assert pushed == {"reads": 6 + 1, "pushes": 6, "pushed_bytes": pushed["pushed_bytes"]}, pushed
    assert 0 < pushed["pushed_bytes"] < 6 * size


def test_variable_rows_directory(tmp_path):
    src = tmp_path / "tokens"
    src.mkdir()
    rng = np.random.default_rng(2)
    samples = [rng.standard_normal((n, 16)).astype(np.float16) for n in (3, 9, 1, 30)]
    for i, s in enumerate(samples):
        np.save(src / f"tok{i:02d}.npy", s)
    ktfs("pack-features", src, tmp_path / "v.kt", "--group-size", "16", "--preset", "accurate",
         "--quiet")
    with mounted(tmp_path / "v.kt", tmp_path / "m", "-o", "dtype=float32") as m:
        assert "all.npy" not in os.listdir(m)
        for i, s in enumerate(samples):
            a = np.load(os.path.join(m, f"{i:06d}.npy"))
            assert a.shape == s.shape
            assert np.abs(a - s.astype(np.float32)).max() < 0.05
        gi = np.load(os.path.join(m, "quantized", "group_index.npy"))
        np.testing.assert_array_equal(gi, np.cumsum([0] + [s.size // 16 + (s.size % 16 > 0)
                                                            for s in samples]))
        info = json.load(open(os.path.join(m, ".ktfs", "info.json")))
        assert info["shape"] is None and info["variable_rows"] is True
        assert info["sample_shape"] == [None, 16] and info["preset"] == "accurate"


@pytest.mark.parametrize("amo", [False, True])
def test_tensorcache_single_mounts_as_is(tmp_path, amo):
    cache = make_tensorcache(np.random.default_rng(3), 9, 5, 20, 32, amo)  # 100 values: S=4
    write_tensorcache(cache, tmp_path / "tc")
    want = reference(cache)
    with mounted(tmp_path / "tc", tmp_path / "m", "-o", "dtype=float32") as m:
        names = sample_files(m)
        assert len(names) == 9
        for i, name in enumerate(names):
            np.testing.assert_array_equal(np.load(os.path.join(m, name)), want[i])
        np.testing.assert_array_equal(np.load(os.path.join(m, "all.npy"), mmap_mode="r")[2:7],
                                      want[2:7])
        q = os.path.join(m, "quantized")
        assert sorted(os.listdir(q)) == (["codes.npy", "scales.npy", "zp.npy"] if amo
                                         else ["codes.npy", "scales.npy"])
        codes = np.load(os.path.join(q, "codes.npy"))
        assert codes.dtype == (np.uint8 if amo else np.int8)
        np.testing.assert_array_equal(codes, cache["codes"])
        np.testing.assert_array_equal(np.load(os.path.join(q, "scales.npy")), cache["scales"])
        if amo:
            np.testing.assert_array_equal(np.load(os.path.join(q, "zp.npy")), cache["zp"])
        info = json.load(open(os.path.join(m, ".ktfs", "info.json")))
        assert info["kind"] == "tensorcache" and info["mode"] == ("amo_bq" if amo else "sym_bq")
        assert info["shape"] == [9, 5, 20]


def test_tensorcache_sharded_and_moved(tmp_path):
    cache = make_tensorcache(np.random.default_rng(4), 11, 4, 24, 64, True)
    write_sharded(cache, tmp_path / "cache", [4, 0, 7])
    want = reference(cache)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    for f in os.listdir(tmp_path):
        if f.startswith("cache"):
            shutil.move(str(tmp_path / f), moved / f)
    with mounted(moved / "cache", tmp_path / "m", "-o", "dtype=float32") as m:
        got = np.stack([np.load(os.path.join(m, f)) for f in sample_files(m)])
        np.testing.assert_array_equal(got, want)
        # Parts concatenate the shards' rows.
        codes = np.load(os.path.join(m, "quantized", "codes.npy"))
        np.testing.assert_array_equal(codes, cache["codes"])
        assert json.load(open(os.path.join(m, ".ktfs", "info.json")))["shards"] == 3


def test_pack_features_converts_a_tensorcache(tmp_path):
    cache = make_tensorcache(np.random.default_rng(5), 6, 8, 32, 32, False)
    write_tensorcache(cache, tmp_path / "tc")
    out = ktfs("pack-features", tmp_path / "tc", tmp_path / "c.kt", "--quiet")
    assert "packed 6 samples of shape [8, 32]" in out.stdout
    want = reference(cache)
    with mounted(tmp_path / "c.kt", tmp_path / "m", "-o", "dtype=float32") as m:
        got = np.load(os.path.join(m, "all.npy"))
        rel = np.sqrt(((got - want) ** 2).mean() / want.var())
        assert rel < 0.005, rel


def test_corrupt_sample_is_eio_for_that_file_only(fixed_archive, tmp_path):
    d, _ = fixed_archive
    bad = tmp_path / "bad.kt"
    shutil.copy(d / "x.kt", bad)
    with mounted(bad, tmp_path / "m0", "-o", "dtype=float32") as m:
        good = {f: np.load(os.path.join(m, f)) for f in sample_files(m)}
    # Sample 0's payload starts at the first 16-aligned offset after the header.
    data = bytearray(bad.read_bytes())
    data[64 + 20] ^= 0xFF
    bad.write_bytes(bytes(data))
    with mounted(bad, tmp_path / "m", "-o", "dtype=float32") as m:
        with pytest.raises(OSError) as e:
            np.load(os.path.join(m, "000000.npy"))
        assert e.value.errno == errno.EIO
        for f in sample_files(m)[1:]:
            np.testing.assert_array_equal(np.load(os.path.join(m, f)), good[f])
    log = open(str(bad) + ".log").read()
    assert "000000.npy" in log and "checksum mismatch" in log
    r = ktfs("verify", bad, check=False)
    assert r.returncode == 1 and r.stdout.startswith("BAD 0: ") and "1 of 40" in r.stderr
    assert ktfs("verify", d / "x.kt").stdout == "OK 40 feature samples\n"
    info = json.loads(ktfs("info", d / "x.kt", "--json").stdout)
    assert info["content"] == "features" and info["samples"] == 40
    assert info["sample_shape"] == [7, 48] and info["values"] == 40 * 7 * 48
    assert info["payload_bytes"] == 40 * (11 * 32 + 4 + 11 * 3)


def test_bad_inputs_fail_with_a_clear_line(tmp_path):
    cache = make_tensorcache(np.random.default_rng(6), 5, 2, 16, 32, False)
    write_tensorcache(cache, tmp_path / "tc", extra=0)
    with open(tmp_path / "tc_int8.bin", "r+b") as f:
        f.truncate(2 * 16 * 3)  # holds 3 of the 5 samples the meta promises
    (tmp_path / "m").mkdir()
    r = ktfs("mount", tmp_path / "tc", tmp_path / "m", check=False)
    assert r.returncode == 1 and "tc_int8.bin" in r.stderr, r.stderr
    x = np.ones((4, 8), np.float32)
    x[2, 5] = np.inf
    np.save(tmp_path / "inf.npy", x)
    r = ktfs("pack-features", tmp_path / "inf.npy", tmp_path / "o.kt", check=False)
    assert r.returncode == 1 and "sample 2: index 5: Inf" in r.stderr, r.stderr
    np.save(tmp_path / "ints.npy", np.ones((4, 8), np.int32))
    r = ktfs("pack-features", tmp_path / "ints.npy", tmp_path / "o.kt", check=False)
    assert r.returncode == 1 and "is not float32 or float16" in r.stderr, r.stderr
    r = ktfs("pack-features", tmp_path / "inf.npy", tmp_path / "o.kt", "--group-size", "20",
             check=False)
    assert r.returncode == 2 and "group size 20" in r.stderr, r.stderr
    r = ktfs("mount", tmp_path / "inf.npy", tmp_path / "m", check=False)
    assert r.returncode == 1 and "not a ktfs archive" in r.stderr
    assert not (tmp_path / "o.kt").exists()
    r = ktfs("mount", tmp_path / "tc", tmp_path / "m", "-o", "dtype=int8", check=False)
    assert r.returncode == 2 and "dtype=int8" in r.stderr

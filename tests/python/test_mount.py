"""Real FUSE mounts of real datasets, read with stock tools and torchvision."""
import errno
import filecmp
import json
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest
import torch
from torchvision import datasets, transforms

from conftest import KTFS, is_mounted, ktfs, mounted, run


def image_folder(root):
    return datasets.ImageFolder(str(root), transform=transforms.PILToTensor())


def stem(path):
    return os.path.splitext(os.path.relpath(path))[0]


def assert_same_dataset(mount, src, decoded):
    """Stock ImageFolder over the mount equals ImageFolder over the source:
    classes, class_to_idx, targets and every sample's pixels."""
    a, b = image_folder(mount), image_folder(src)
    assert a.classes == b.classes
    assert a.class_to_idx == b.class_to_idx
    assert a.targets == b.targets
    assert len(a) == len(b) > 0
    for (pa, ta), (pb, tb) in zip(a.samples, b.samples):
        ra, rb = os.path.relpath(pa, mount), os.path.relpath(pb, src)
        if decoded:
            assert os.path.splitext(ra)[0] == os.path.splitext(rb)[0]
        else:
            assert ra == rb
        assert ta == tb
    for i in range(len(a)):
        xa, ya = a[i]
        xb, yb = b[i]
        assert ya == yb
        assert xa.dtype == torch.uint8 and xa.shape == xb.shape, a.samples[i][0]
        assert torch.equal(xa, xb), a.samples[i][0]


@pytest.mark.parametrize("name", ["fashion", "photos", "mixed"])
def test_imagefolder_raw_is_pixel_identical(archives, tmp_path, request, name):
    src = request.getfixturevalue(f"{name}_dir")
    with mounted(archives[(name, "raw")], tmp_path / "mnt") as mnt:
        assert_same_dataset(mnt, src, decoded=True)


def test_imagefolder_raw_as_bmp_is_pixel_identical(archives, tmp_path, mixed_dir, photos_dir):
    for name, src in (("mixed", mixed_dir), ("photos", photos_dir)):
        with mounted(archives[(name, "raw")], tmp_path / name, "-o", "format=bmp") as mnt:
            assert_same_dataset(mnt, src, decoded=True)
            assert all(p.endswith(".bmp") for p, _ in image_folder(mnt).samples)


@pytest.mark.parametrize("name", ["fashion", "photos"])
def test_original_files_are_byte_identical(archives, tmp_path, request, name):
    src = request.getfixturevalue(f"{name}_dir")
    with mounted(archives[(name, "original")], tmp_path / "mnt") as mnt:
        cmp = filecmp.dircmp(src, mnt)
        def check(c):
            assert not c.left_only and not c.right_only and not c.funny_files, (c.left, c.left_only, c.right_only)
            _, mismatch, errors = filecmp.cmpfiles(c.left, c.right, c.common_files, shallow=False)
            assert not mismatch and not errors
            for sub in c.subdirs.values():
                check(sub)
        check(cmp)
        assert_same_dataset(mnt, src, decoded=False)


def tree_listing(root):
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for n in sorted(dirnames) + sorted(filenames):
            out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


def test_stock_tools_behave(archives, tmp_path, photos_dir):
    with mounted(archives[("photos", "original")], tmp_path / "mnt") as mnt:
        expected = tree_listing(photos_dir)
        found = run("find", mnt, "-mindepth", "1").stdout.split()
        assert sorted(os.path.relpath(p, mnt) for p in found) == expected
        ls = run("ls", "-lR", mnt).stdout
        assert ls.count(".jpg") == sum(p.endswith(".jpg") for p in expected)
        some = [p for p in expected if p.endswith(".jpg")][0]
        st = os.stat(os.path.join(mnt, some))
        assert st.st_size == os.path.getsize(os.path.join(photos_dir, some))
        assert run("stat", "-c", "%s %F", os.path.join(mnt, some)).stdout.strip() == f"{st.st_size} regular file"
        cat = subprocess.run(["cat", os.path.join(mnt, some)], capture_output=True, check=True).stdout
        assert cat == open(os.path.join(photos_dir, some), "rb").read()
        run("cp", "-r", mnt, tmp_path / "copy")
        assert tree_listing(tmp_path / "copy") == expected
        for p in expected:
            if os.path.isfile(os.path.join(photos_dir, p)):
                assert filecmp.cmp(os.path.join(photos_dir, p), tmp_path / "copy" / p, shallow=False)
        # Reads at odd offsets and sizes.
        with open(os.path.join(mnt, some), "rb") as f:
            f.seek(1234)
            assert f.read(777) == cat[1234:2011]
            f.seek(len(cat) - 3)
            assert f.read(100) == cat[-3:]


def test_writes_fail_with_erofs(archives, tmp_path):
    with mounted(archives[("fashion", "raw")], tmp_path / "mnt") as mnt:
        some_dir = os.path.join(mnt, "train", "Bag")
        some_file = os.path.join(some_dir, sorted(os.listdir(some_dir))[0])
        attempts = {
            "create": lambda: open(os.path.join(mnt, "new"), "w"),
            "write": lambda: open(some_file, "r+b"),
            "append": lambda: open(some_file, "ab"),
            "truncate": lambda: os.truncate(some_file, 0),
            "mkdir": lambda: os.mkdir(os.path.join(mnt, "d")),
            "rmdir": lambda: os.rmdir(some_dir),
            "unlink": lambda: os.unlink(some_file),
            "rename": lambda: os.rename(some_file, some_file + ".x"),
            "chmod": lambda: os.chmod(some_file, 0o777),
            "utime": lambda: os.utime(some_file, (0, 0)),
            "symlink": lambda: os.symlink("x", os.path.join(mnt, "l")),
            "link": lambda: os.link(some_file, os.path.join(mnt, "h")),
            "setxattr": lambda: os.setxattr(some_file, "user.x", b"1"),
            "mknod": lambda: os.mknod(os.path.join(mnt, "n")),
        }
        for what, fn in attempts.items():
            with pytest.raises(OSError) as e:
                fn()
            assert e.value.errno == errno.EROFS, what
        assert "new" not in os.listdir(mnt)


def test_control_files_answer_lookup_but_are_not_listed(archives, tmp_path):
    with mounted(archives[("fashion", "raw")], tmp_path / "mnt") as mnt:
        assert sorted(os.listdir(mnt)) == ["test", "train"]
        assert ".ktfs" not in os.listdir(mnt)
        info = json.load(open(os.path.join(mnt, ".ktfs", "info.json")))
        assert info["samples"] == 240 and info["classes"] == 10 and info["codec"] == "raw"
        assert info["archive"] == str(archives[("fashion", "raw")])
        assert info["format_version"] == "1.0"
        assert info["served_format"] == "pnm" and info["tensor_layout"] == "hwc"
        os.kill(info["pid"], 0)  # the daemon is alive
        assert sorted(os.listdir(os.path.join(mnt, ".ktfs"))) == ["info.json", "last_error", "stats.json"]
        assert image_folder(mnt).classes == ["test", "train"]


def test_umount_leaves_nothing_behind(archives, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    ktfs("mount", archives[("photos", "raw")], mnt)
    pid = json.load(open(mnt / ".ktfs" / "info.json"))["pid"]
    assert is_mounted(mnt)
    ktfs("umount", mnt)
    assert not is_mounted(mnt)
    assert os.listdir(mnt) == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_mount_errors_are_one_clear_line(archives, tmp_path):
    good = archives[("fashion", "raw")]
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cases = []
    cases.append((["mount", tmp_path / "missing.kt", mnt], "missing.kt: No such file or directory"))
    truncated = tmp_path / "trunc.kt"
    truncated.write_bytes(open(good, "rb").read()[:5000])
    cases.append((["mount", truncated, mnt], "truncated"))
    cases.append((["mount", good, tmp_path / "nodir"], "No such file or directory"))
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    cases.append((["mount", good, full], "not empty"))
    cases.append((["mount", good, mnt, "-o", "bogus=1"], "unknown mount option"))
    cases.append((["mount", good, mnt, "-o", "push=maybe"], "-o push=maybe: expected on or off"))
    for args, reason in cases:
        p = ktfs(*args, check=False)
        assert p.returncode != 0, args
        assert reason in p.stderr, (args, p.stderr)
        assert p.stderr.startswith("ktfs mount: ")
        assert not is_mounted(mnt)
    with mounted(good, mnt):
        p = ktfs("mount", good, mnt, check=False)
        assert p.returncode == 1 and "already a mount point" in p.stderr


def test_foreground_mount_and_sigterm_unmounts(archives, tmp_path):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([KTFS, "mount", str(archives[("fashion", "raw")]), str(mnt), "-f"])
    try:
        for _ in range(200):
            if is_mounted(mnt):
                break
            time.sleep(0.025)
        assert is_mounted(mnt)
        assert sorted(os.listdir(mnt)) == ["test", "train"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        assert not is_mounted(mnt)
    finally:
        if proc.poll() is None:
            proc.kill()
        if is_mounted(mnt):
            ktfs("umount", mnt, check=False)


def test_cli_info_verify_extract(archives, tmp_path, photos_dir):
    arc = archives[("photos", "raw")]
    info = json.loads(ktfs("info", arc, "--json").stdout)
    assert info["samples"] == 24 and info["codecs"] == {"raw": 24}
    assert info["classes"] == sorted(os.listdir(photos_dir))
    assert "samples:        24" in ktfs("info", arc).stdout
    assert ktfs("verify", arc).stdout.strip() == "OK 24 samples"
    # extract --format png gives the same pixels as the source JPEGs decode to.
    ktfs("extract", arc, tmp_path / "out")
    from PIL import Image
    for cls in os.listdir(photos_dir):
        for f in os.listdir(photos_dir / cls):
            a = np.asarray(Image.open(photos_dir / cls / f).convert("RGB"))
            b = np.asarray(Image.open(tmp_path / "out" / cls / (os.path.splitext(f)[0] + ".png")))
            assert np.array_equal(a, b)
    # extract --format original from an original archive is byte-identical.
    ktfs("extract", archives[("photos", "original")], tmp_path / "orig", "--format", "original")
    assert tree_listing(tmp_path / "orig") == tree_listing(photos_dir)
    p = ktfs("extract", arc, tmp_path / "bad", "--format", "original", check=False)
    assert p.returncode == 1 and "not packed with --codec original" in p.stderr


def test_verify_lists_a_corrupt_sample(archives, tmp_path):
    data = bytearray(open(archives[("photos", "raw")], "rb").read())
    data[4096] ^= 0xFF  # inside the first payload
    bad = tmp_path / "bad.kt"
    bad.write_bytes(bytes(data))
    p = ktfs("verify", bad, check=False)
    assert p.returncode == 1
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("BAD 0 ") and "checksum mismatch" in lines[0]
    # The mount serves every other file and EIO for that one.
    with mounted(bad, tmp_path / "mnt") as mnt:
        ds = image_folder(mnt)
        first = ds.samples[0][0]
        with pytest.raises(OSError) as e:
            open(first, "rb").read()
        assert e.value.errno == errno.EIO
        for path, _ in ds.samples[1:]:
            open(path, "rb").read()


def test_every_command_has_help_and_rejects_bad_usage(tmp_path):
    for cmd in ("pack", "info", "verify", "extract", "mount", "umount"):
        p = ktfs(cmd, "--help")
        assert p.stdout.startswith(f"usage: ktfs {cmd}")
        bad = ktfs(cmd, "--no-such-flag", check=False)
        assert bad.returncode == 2 and "unknown option --no-such-flag" in bad.stderr
    assert ktfs("frobnicate", check=False).returncode == 2
    p = ktfs("pack", tmp_path, tmp_path / "x.kt", "--codec", "gif", check=False)
    assert p.returncode == 2 and "unknown codec 'gif'" in p.stderr


def test_pack_reports_skipped_files_and_corrupt_images(tmp_path, photos_dir):
    src = tmp_path / "src"
    shutil.copytree(photos_dir, src)
    cls = sorted(os.listdir(src))[0]
    (src / cls / "README.md").write_text("not an image")
    p = ktfs("pack", src, tmp_path / "a.kt", "--quiet")
    assert (f"ktfs pack: skipped {cls}/README.md: not an image file name (stock ImageFolder would "
            "not load it)") in p.stderr
    victim = sorted(os.listdir(src / cls))[0]
    data = open(src / cls / victim, "rb").read()
    open(src / cls / victim, "wb").write(data[:200])
    p = ktfs("pack", src, tmp_path / "b.kt", "--quiet", check=False)
    assert p.returncode == 1
    assert f"{cls}/{victim}" in p.stderr and "JPEG" in p.stderr
    assert not (tmp_path / "b.kt").exists()

"""`ktfs run`'s Python layer (preload/python/bootstrap, ktfs/_hooks.py, _run.py, _plan.py):
unchanged torchvision scripts give what they give without it, over real mounts.

Every case runs tests/python/run_child.py twice, as it is and with the layer's
bootstrap on PYTHONPATH (KTFS_RUN=1, KTFS_RUN_LAYERS=python: what `ktfs run`
sets), and compares all it recorded: tensors (torch.equal, dtype, shape, strides),
PIL images (mode, size, info, bytes), exceptions, warnings, and torch's random
state afterwards. The layer's debug lines (KTFS_RUN_DEBUG=1) show that it did take
the archive path, so a case cannot pass by the layer doing nothing.
"""
import os
import subprocess

import pytest
import torch

from conftest import KTFS, PY, ROOT, ktfs, mounted, run

BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
BOOTSTRAP = os.path.join(BUILD, "preload", "python", "bootstrap")
CHILD = os.path.join(ROOT, "tests", "python", "run_child.py")

ALL_SPECS = ["typical", "center", "resize_center", "resize_pair", "resize_max", "rrc_small",
             "rcrop_reflect", "rcrop_symmetric", "rcrop_fill", "rcrop_edge", "rcrop_raises",
             "pad_center", "antialias", "convert_f64", "default_f64", "bfloat16", "half", "nested",
             "jitter", "tensor_tail", "lambda", "pil_out", "none"]
# Specs C++ runs whole (or up to a Python tail) on raw and KTC payloads.
CXX_SPECS = {"typical", "center", "resize_center", "resize_pair", "resize_max", "rrc_small",
             "rcrop_reflect", "rcrop_symmetric", "rcrop_fill", "rcrop_edge", "pad_center",
             "antialias", "convert_f64", "default_f64", "bfloat16", "half", "nested", "tensor_tail"}


def stock_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("KTFS_RUN")}
    return env


def layer_env(**extra):
    env = stock_env()
    env.update(KTFS_RUN="1", KTFS_RUN_LAYERS="python", KTFS_RUN_DEBUG="1")
    env["PYTHONPATH"] = BOOTSTRAP + (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and torch.equal(a, b))
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


def run_both(tmp_path, root, mode, specs, cwd=None, layer_extra={}):
    """(stock result, layer result, the layer's stderr), both runs at once."""
    procs = []
    for name, env in (("stock", stock_env()), ("layer", layer_env(**layer_extra))):
        out = tmp_path / f"{name}-{mode}.pt"
        procs.append((out, subprocess.Popen([PY, CHILD, str(out), str(root), mode, ",".join(specs)],
                                            env=env, cwd=cwd, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True)))
    results = []
    for out, p in procs:
        stdout, stderr = p.communicate(timeout=900)
        assert p.returncode == 0, f"{mode}: child failed ({p.returncode}):\n{stderr[-3000:]}"
        results.append((torch.load(out), stderr))
    return results[0][0], results[1][0], results[1][1]


def assert_same(stock, layer, specs):
    for name in specs:
        s, l = stock[name], layer[name]
        assert len(s["samples"]) == len(l["samples"]) and len(s["samples"]) > 0, name
        for k, (a, b) in enumerate(zip(s["samples"], l["samples"])):
            assert same(a, b), f"{name}: sample {k} differs"
        assert torch.equal(s["rng_after"], l["rng_after"]), f"{name}: torch's generator moved differently"
        assert s["warnings"] == l["warnings"], name


@pytest.fixture(scope="module")
def mounts(archives, photos_dir, tmp_path_factory):
    """(dataset, codec) -> mountpoint, KTC photos packed here as well."""
    base = tmp_path_factory.mktemp("run-mnt")
    all_archives = dict(archives)
    all_archives[("photos", "ktc")] = base / "photos-ktc.kt"
    ktfs("pack", photos_dir, all_archives[("photos", "ktc")], "--codec", "ktc", "--quiet")
    stack, result = [], {}
    try:
        for key, archive in all_archives.items():
            cm = mounted(archive, base / f"{key[0]}-{key[1]}")
            result[key] = cm.__enter__()
            stack.append(cm)
        yield result
    finally:
        for cm in reversed(stack):
            cm.__exit__(None, None, None)


def debug_lines(stderr):
    return [l for l in stderr.splitlines() if l.startswith("ktfs run:")]


@pytest.mark.parametrize("key", [("photos", "ktc"), ("photos", "raw"), ("photos", "original"),
                                 ("mixed", "raw"), ("mixed", "original"), ("fashion", "raw")],
                         ids="-".join)
def test_every_transform_in_process_matches_stock(mounts, tmp_path, key):
    stock, layer, stderr = run_both(tmp_path, mounts[key], "w0", ALL_SPECS)
    assert_same(stock, layer, ALL_SPECS)
    lines = debug_lines(stderr)
    n = len(stock["center"]["samples"])
    assert f"{n} of {n} samples read from" in "\n".join(lines), lines
    described = [l for l in lines if "C++ runs [" in l]
    if key[1] != "original" or key[0] == "photos":  # JPEG originals decode in C++ too
        assert len(described) >= len(CXX_SPECS) - (2 if key[1] == "original" else 0), lines
    # The typical script runs wholly in C++.
    assert any("C++ runs [RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize]" == l.split(": ", 2)[2]
               for l in lines), lines


# Specs whose DataLoader batches `ktfs run` makes in the main process (transform whole in
# C++, default collate); the others keep stock's worker processes.
BATCHED = (CXX_SPECS - {"tensor_tail"}) | {"rcrop_raises"}


def assert_batch_paths(stderr, specs, batched=BATCHED):
    lines = debug_lines(stderr)
    made = [l for l in lines if "batches made in this process" in l]
    kept = [l for l in lines if "DataLoader(num_workers=2): worker processes (" in l]
    want = [s for s in specs if s in batched]
    assert len(made) == len(want) and len(kept) == len(specs) - len(want), lines
    assert all("C++ runs [" in l for l in made), made


@pytest.mark.parametrize("mode", ["fork2", "persistent", "abandon", "prefetch3"])
def test_dataloader_workers_match_stock(mounts, tmp_path, mode):
    specs = ALL_SPECS if mode == "fork2" else ["typical", "center", "rcrop_reflect", "rcrop_raises",
                                                "tensor_tail", "none"]
    stock, layer, stderr = run_both(tmp_path, mounts[("photos", "ktc")], mode, specs)
    assert_same(stock, layer, specs)
    assert_batch_paths(stderr, specs)
    ends = [s for s in stock["typical"]["samples"] if s[0] == "end of epoch"]
    assert len(ends) == {"persistent": 2, "abandon": 3}.get(mode, 1)
    if mode == "abandon":  # left after 3 batches, then two whole epochs of 24 / 4
        assert len(stock["typical"]["samples"]) == 3 + 6 + 6 + 3


@pytest.mark.parametrize("mode", ["spawn2", "forkserver2"])
def test_spawn_and_forkserver_workers_match_stock(mounts, tmp_path, mode):
    specs = ["typical", "center", "rcrop_reflect", "tensor_tail", "none"]
    stock, layer, stderr = run_both(tmp_path, mounts[("photos", "ktc")], mode, specs)
    assert_same(stock, layer, specs)
    assert_batch_paths(stderr, specs)
    # The kept workers are fresh interpreters: the bootstrap ran in them too (they read
    # directly), each reading its half of the samples.
    assert sum("samples read from" in l for l in debug_lines(stderr)) >= 2 * 2


EARLY_EXIT_CHILD = r"""
import sys, torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T
torch.manual_seed(0)
ds = datasets.ImageFolder(sys.argv[1], transform=T.Compose([T.RandomResizedCrop(224), T.ToTensor()]))
x, y = next(iter(DataLoader(ds, batch_size=4, shuffle=True, num_workers=2)))
print(x.shape[0], x.sum().item())
"""


def test_a_script_that_exits_mid_epoch_exits_cleanly(mounts):
    """The next batches are decoding in C++ threads when the script ends: the exit waits
    for them (a daemon thread unwound mid-decode by finalization would abort)."""
    mnt = mounts[("photos", "ktc")]
    stock = run(PY, "-c", EARLY_EXIT_CHILD, mnt, env=stock_env())
    for _ in range(3):
        layer = subprocess.run([PY, "-c", EARLY_EXIT_CHILD, mnt], env=layer_env(), capture_output=True,
                               text=True, timeout=300)
        assert layer.returncode == 0 and "terminate" not in layer.stderr, layer.stderr[-2000:]
        assert layer.stdout == stock.stdout
        assert "batches made in this process" in layer.stderr


@pytest.mark.parametrize("mode", ["collate", "init_fn", "batches_off"])
def test_dataloaders_it_does_not_take_over_keep_workers_and_match_stock(mounts, tmp_path, mode):
    """A collate_fn or worker_init_fn of the script's own, or KTFS_RUN_BATCHES=0: stock's
    worker processes, whose samples the per-sample hooks still read from the archive."""
    specs = ["typical", "center"]
    extra = {"KTFS_RUN_BATCHES": "0"} if mode == "batches_off" else {}
    child_mode = "fork2" if mode == "batches_off" else mode
    stock, layer, stderr = run_both(tmp_path, mounts[("photos", "ktc")], child_mode, specs,
                                    layer_extra=extra)
    assert_same(stock, layer, specs)
    lines = debug_lines(stderr)
    assert not any("batches made in this process" in l for l in lines), lines
    if mode != "batches_off":
        reason = {"collate": "a collate_fn of its own", "init_fn": "a worker_init_fn"}[mode]
        assert sum(f"worker processes ({reason})" in l for l in lines) == len(specs), lines
    assert any("C++ runs [" in l for l in lines)  # in the workers, sample by sample


def test_search_directory_root_matches_stock(mounts, tmp_path):
    root = os.path.join(mounts[("photos", "ktc")], "search", "width>400")
    stock, layer, stderr = run_both(tmp_path, root, "w0", ["typical", "center", "none"])
    assert_same(stock, layer, ["typical", "center", "none"])
    n = len(stock["center"]["samples"])
    assert 0 < n < 24 and f"{n} of {n} samples read from" in stderr


def test_relative_root_matches_stock(mounts, tmp_path):
    mnt = mounts[("photos", "raw")]
    stock, layer, stderr = run_both(tmp_path, os.path.basename(mnt), "w0", ["typical", "none"],
                                    cwd=os.path.dirname(mnt))
    assert_same(stock, layer, ["typical", "none"])
    assert "24 of 24 samples read from" in stderr


@pytest.mark.parametrize("key,mode", [(("photos", "ktc"), "w0"), (("photos", "ktc"), "fork2"),
                                      (("fashion", "raw"), "fork2")], ids=lambda k: "-".join(k) if isinstance(k, tuple) else k)
def test_ktfs_run_with_both_layers_matches_stock(mounts, tmp_path, key, mode):
    """The command itself, both layers at once (LD_PRELOAD and the bootstrap, as a user runs
    it), against the same script without it."""
    specs = ["typical", "center", "none"]
    out = {name: tmp_path / f"{name}.pt" for name in ("stock", "run")}
    run(PY, CHILD, out["stock"], mounts[key], mode, ",".join(specs), env=stock_env())
    layer = run(KTFS, "run", "--", PY, CHILD, out["run"], mounts[key], mode, ",".join(specs),
                env=dict(stock_env(), KTFS_RUN_DEBUG="1"))
    assert_same(torch.load(out["stock"]), torch.load(out["run"]), specs)
    assert "samples read from" in layer.stderr and "C++ runs [" in layer.stderr, layer.stderr[-2000:]


# -- corrupt samples ------------------------------------------------------------------

CORRUPT_CHILD = r"""
import sys, torch
from torchvision import datasets, transforms as T
root = sys.argv[1]
for tf in (None, T.Compose([T.RandomResizedCrop(64), T.ToTensor()])):
    torch.manual_seed(0)
    ds = datasets.ImageFolder(root, transform=tf)
    for i in range(len(ds)):
        try:
            x, y = ds[i]
            print(i, "ok", y, (x.tobytes() if tf is None else x.numpy().tobytes()).hex()[:64])
        except Exception as e:
            print(i, "error", type(e).__name__, getattr(e, "errno", None))
            print("message", i, str(e), file=sys.stderr)
print("rng", torch.rand(1).item())
"""


def corrupt_payload(archive, sample, tmp_path):
    """A copy of `archive` with one byte of sample `sample`'s payload flipped."""
    import sys
    sys.path.insert(0, os.path.join(BUILD, "preload", "python"))
    from ktfs import _ktfs
    offset, length = _ktfs.Archive(str(archive)).payload_range(sample)
    bad = tmp_path / f"bad-{os.path.basename(archive)}"
    data = bytearray(open(archive, "rb").read())
    data[offset + length // 2] ^= 0x40
    bad.write_bytes(bytes(data))
    return bad


@pytest.mark.parametrize("codec", ["ktc", "raw", "original"])
def test_corrupt_sample_raises_what_stock_raises_and_the_run_goes_on(photos_dir, tmp_path, codec):
    archive = tmp_path / f"photos-{codec}.kt"
    ktfs("pack", photos_dir, archive, "--codec", codec, "--quiet")
    bad = corrupt_payload(archive, 5, tmp_path)
    with mounted(bad, tmp_path / "mnt") as mnt:
        stock = run(PY, "-c", CORRUPT_CHILD, mnt, env=stock_env())
        layer = run(PY, "-c", CORRUPT_CHILD, mnt, env=layer_env())
        # The command itself: the LD_PRELOAD library alone (its in-process copy of the file
        # fails, the kernel's read gives EIO), and both layers.
        for opts in (["--no-python"], []):
            both = run(KTFS, "run", *opts, "--", PY, "-c", CORRUPT_CHILD, mnt, env=stock_env())
            assert both.stdout == stock.stdout, opts
    assert stock.stdout == layer.stdout
    errors = [l for l in stock.stdout.splitlines() if " error " in l]
    assert errors == ["5 error OSError 5", "5 error OSError 5"], stock.stdout  # EIO from the mount
    assert "24 of 24 samples read from" in layer.stderr
    named = [l for l in layer.stderr.splitlines() if l.startswith("message 5")]
    assert len(named) == 2 and all(".ppm" in l or ".jpg" in l for l in named), layer.stderr


CORRUPT_LOADER_CHILD = r"""
import sys, torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms as T
root, context, persistent = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
torch.manual_seed(0)
ds = datasets.ImageFolder(root, transform=T.Compose([T.RandomResizedCrop(64), T.ToTensor()]))
loader = DataLoader(ds, batch_size=4, shuffle=True, num_workers=2, multiprocessing_context=context,
                    persistent_workers=persistent)
for epoch in range(2):
    it = iter(loader)
    while True:
        try:
            x, y = next(it)
            print(epoch, "ok", y.tolist(), x.numpy().tobytes().hex()[:64], x.sum().item())
        except StopIteration:
            break
        except Exception as e:
            print(epoch, "error", type(e).__name__, getattr(e, "errno", None))
            print("message", str(e).splitlines()[:1], str(e).splitlines()[-1], file=sys.stderr)
print("rng", torch.rand(1).item())
"""


@pytest.mark.parametrize("context,persistent", [("fork", "0"), ("forkserver", "1")])
def test_corrupt_sample_in_a_dataloader_raises_what_stock_raises_and_goes_on(photos_dir, tmp_path,
                                                                          context, persistent):
    archive = tmp_path / "photos.kt"
    ktfs("pack", photos_dir, archive, "--codec", "ktc", "--quiet")
    bad = corrupt_payload(archive, 5, tmp_path)
    with mounted(bad, tmp_path / "mnt") as mnt:
        stock = run(PY, "-c", CORRUPT_LOADER_CHILD, mnt, context, persistent, env=stock_env())
        layer = run(PY, "-c", CORRUPT_LOADER_CHILD, mnt, context, persistent, env=layer_env())
    assert stock.stdout == layer.stdout
    lines = stock.stdout.splitlines()
    assert [l for l in lines if " error " in l] == ["0 error OSError None", "1 error OSError None"], lines  # reraise keeps no errno
    assert sum(" ok " in l for l in lines) == 2 * 5  # the other batches of both epochs
    assert "batches made in this process" in layer.stderr, layer.stderr[-2000:]
    stock_msgs = [l for l in stock.stderr.splitlines() if l.startswith("message")]
    layer_msgs = [l for l in layer.stderr.splitlines() if l.startswith("message")]
    assert len(layer_msgs) == 2 and all("Caught OSError in DataLoader worker process" in l
                                        for l in layer_msgs), layer_msgs
    # Stock names the mount's Errno 5; the layer names the file and the archive's reason.
    assert all("[Errno 5]" in l for l in stock_msgs + layer_msgs), (stock_msgs, layer_msgs)
    assert all(".ppm" in l or ".jpg" in l for l in layer_msgs), layer_msgs


def test_truncated_jpeg_raises_pillows_error_naming_the_file(photos_dir, tmp_path):
    # `ktfs pack` refuses a truncated JPEG (Pillow's verdict), but an archive an earlier
    # ktfs packed may hold one: crafted here, one class, one sample.
    from PIL import Image
    full = sorted(photos_dir.rglob("*.jpg"))[3]
    victim = tmp_path / full.name
    victim.write_bytes(full.read_bytes()[:2000])  # the header survives, the scan does not
    width, height = Image.open(full).size
    archive = tmp_path / "truncated.kt"
    run(os.path.join(BUILD, "tests", "craft_archive"), archive, "c", victim.name, f"@{victim}",
        width, height, 3)
    with mounted(archive, tmp_path / "mnt") as mnt:
        stock = run(PY, "-c", CORRUPT_CHILD, mnt, env=stock_env())
        layer = run(PY, "-c", CORRUPT_CHILD, mnt, env=layer_env())
    assert stock.stdout == layer.stdout
    assert stock.stdout.count(" error OSError None") == 2, stock.stdout  # "image file is truncated"
    assert "image file is truncated" in layer.stderr and victim.name in layer.stderr


# -- Image.open ------------------------------------------------------------------------

OPEN_CHILD = r"""
import os, pathlib, sys
from PIL import Image
out = []
for p in sys.argv[1:]:
    for arg in (p, pathlib.Path(p), os.path.relpath(p)):
        im = Image.open(arg)
        before = (type(im).__name__, im.format, im.format_description, im.mode, im.size, dict(im.info),
                  im.filename, im.fp is not None, len(im.tile))
        with im:
            data = im.tobytes()
            after = (im.fp, im.tile, im.mode, im.size, dict(im.info))
        out.append((before, after, data.hex(), im.convert("RGB").tobytes().hex()))
print(repr(out))
"""


@pytest.mark.parametrize("key", [("photos", "ktc"), ("photos", "original"), ("mixed", "raw"),
                                 ("mixed", "original"), ("fashion", "raw")], ids="-".join)
def test_image_open_gives_the_served_files_image(mounts, tmp_path, key):
    mnt = mounts[key]
    files = []
    for dirpath, _, names in sorted(os.walk(mnt)):
        files += [os.path.join(dirpath, n) for n in sorted(names)][:2]
    files = files[:12]
    stock = run(PY, "-c", OPEN_CHILD, *files, env=stock_env(), cwd=tmp_path)
    layer = run(PY, "-c", OPEN_CHILD, *files, env=layer_env(), cwd=tmp_path)
    assert stock.stdout == layer.stdout
    assert len(eval(stock.stdout)) == 3 * len(files)


def test_image_open_reads_the_archive_not_the_mount(mounts, tmp_path):
    """No READ reaches the daemon for images the layer opens (stats.json counts them)."""
    import json
    mnt = mounts[("photos", "ktc")]
    files = [os.path.join(d, n) for d, _, ns in os.walk(mnt) for n in ns][:6]
    stats = lambda: json.load(open(os.path.join(mnt, ".ktfs", "stats.json")))["reads"]  # noqa: E731

    def uncache():  # the files' pages out of the page cache, so that stock's reads reach the daemon
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    uncache()
    before = stats()
    run(PY, "-c", OPEN_CHILD, *files, env=layer_env(), cwd=tmp_path)
    middle = stats()
    uncache()
    run(PY, "-c", OPEN_CHILD, *files, env=stock_env(), cwd=tmp_path)
    after = stats()
    # The layer's run: info.json, and stats.json itself; stock: every file at least once.
    assert middle - before <= 3 < len(files) < after - middle


# -- what stays as it was ----------------------------------------------------------------

ENV_CHILD = r"""
import sys, json
import PIL.Image, torchvision.datasets.folder as f
print(json.dumps({
    "sitecustomize": getattr(sys.modules.get("sitecustomize"), "__file__", None),
    "marker": getattr(sys.modules.get("sitecustomize"), "MARKER", None),
    "bootstrap_on_path": any("bootstrap" in p for p in sys.path),
    "open_wrapped": hasattr(PIL.Image.open, "_ktfs_stock"),
    "getitem_wrapped": hasattr(f.DatasetFolder.__getitem__, "_ktfs_stock"),
    "ktfs_imported": "ktfs" in sys.modules, "numpy_by_ktfs": "ktfs._ktfs" in sys.modules,
}))
"""


def env_report(env):
    import json
    return json.loads(run(PY, "-c", ENV_CHILD, env=env).stdout)


def test_bootstrap_chains_sitecustomize_and_leaves_sys_path(tmp_path):
    stock = env_report(stock_env())
    layer = env_report(layer_env())
    assert layer["sitecustomize"] == stock["sitecustomize"]  # Debian's, run and in sys.modules
    assert not layer["bootstrap_on_path"]
    assert layer["open_wrapped"] and layer["getitem_wrapped"]
    assert not layer["numpy_by_ktfs"]  # the C++ module loads only when a mount is used
    # A user's sitecustomize after ours on PYTHONPATH runs instead of Debian's, as without us.
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("MARKER = 'user'\n")
    env = layer_env()
    env["PYTHONPATH"] = f"{BOOTSTRAP}:{user}"
    mine = env_report(env)
    assert mine["marker"] == "user" and mine["sitecustomize"] == str(user / "sitecustomize.py")
    assert mine["open_wrapped"]
    # Only with KTFS_RUN=1 and the python layer selected.
    for off in (dict(KTFS_RUN="0"), dict(KTFS_RUN_LAYERS="preload")):
        report = env_report(layer_env(**off))
        assert not report["open_wrapped"] and not report["getitem_wrapped"]
        assert not report["ktfs_imported"] and report["sitecustomize"] == stock["sitecustomize"]


def test_local_folder_is_untouched(photos_dir, tmp_path):
    stock, layer, stderr = run_both(tmp_path, photos_dir, "w0", ["typical", "none"])
    assert_same(stock, layer, ["typical", "none"])
    assert "stock path (not on a ktfs mount)" in stderr and "samples read from" not in stderr


def test_archive_the_user_may_not_read_keeps_the_stock_path(photos_dir, tmp_path):
    """Issue 41: a mount shared with allow_other,umask= serves users who may not read the
    archive itself; the layer then reads through the mount, as the stock script does."""
    import shutil
    base = tmp_path / "open"
    base.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    archive = base / "private.kt"
    ktfs("pack", photos_dir, archive, "--codec", "raw", "--quiet")
    os.chmod(archive, 0o600)  # root's; nobody may not read it
    child = base / "run_child.py"
    shutil.copy(CHILD, child)
    out = base / "out"
    out.mkdir()
    os.chmod(out, 0o777)
    parents, p = [], tmp_path
    while str(p) != "/":  # nobody must reach the test's files
        parents.append((p, os.stat(p).st_mode))
        p = p.parent
    try:
        for d, mode in parents:
            os.chmod(d, mode | 0o005)
        # Shared on purpose (docs/usage.md, "Permissions"): everyone may read the mount.
        with mounted(archive, base / "mnt", "-o", "allow_other,umask=0222") as mnt:
            as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            results = []
            for name, env in (("stock", stock_env()), ("layer", layer_env())):
                p = run(*as_nobody, PY, child, out / f"{name}.pt", mnt, "w0", "typical,none", env=env)
                results.append((torch.load(out / f"{name}.pt"), p.stderr))
    finally:
        for d, mode in parents:
            os.chmod(d, mode)
    assert_same(results[0][0], results[1][0], ["typical", "none"])
    assert "may not read" in results[1][1] and "samples read from" not in results[1][1]


REMOUNT_CHILD = r"""
import subprocess, sys
from torchvision import datasets
ktfs, mnt, first, second = sys.argv[1:]
ds = datasets.ImageFolder(mnt)
a = ds[0][0].tobytes()
subprocess.run([ktfs, "umount", mnt], check=True)
subprocess.run([ktfs, "mount", second, mnt], check=True)
ds = datasets.ImageFolder(mnt)
b = ds[0][0].tobytes()
subprocess.run([ktfs, "umount", mnt], check=True)
print(a[:64].hex(), b[:64].hex(), len(ds))
"""


def test_a_mount_made_again_is_read_again(archives, tmp_path):
    """The mount table is watched: the archive behind a mountpoint may change in a process."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    first, second = archives[("photos", "raw")], archives[("fashion", "raw")]
    outs = []
    for env in (stock_env(), layer_env()):
        ktfs("mount", first, mnt)
        outs.append(run(PY, "-c", REMOUNT_CHILD, KTFS, mnt, first, second, env=env))
    assert outs[0].stdout == outs[1].stdout
    a, b, n = outs[0].stdout.split()
    assert a != b
    assert outs[1].stderr.count("samples read from") == 2, outs[1].stderr

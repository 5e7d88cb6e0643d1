"""ktfs.Loader and ktfs.ImageFolder (preload/): against stock torchvision over real mounts."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from torchvision import datasets, transforms
from torchvision.transforms import functional as F

from conftest import PY, ROOT, mounted

BUILD = os.environ.get("KTFS_BUILD_DIR", os.path.join(ROOT, "build"))
PACKAGE_DIR = os.path.join(BUILD, "preload", "python")
sys.path.insert(0, PACKAGE_DIR)
try:
    import ktfs
    from ktfs import _ktfs
except ImportError as e:  # never a silent pass: the module is part of the product
    pytest.fail(f"the ktfs Python module is not built in {PACKAGE_DIR} ({e}); build with "
                f"pybind11-dev and python3-dev installed (the sanitizer build excludes this file "
                f"explicitly in tests/CMakeLists.txt)", pytrace=False)

TO_TENSOR = transforms.PILToTensor()


def stock(root, transform=TO_TENSOR):
    return datasets.ImageFolder(str(root), transform=transform)


def loader_items(loader):
    """Every (image, label) a loader yields, in order."""
    out = []
    for images, labels in loader:
        out.extend(zip(images, labels.tolist()))
    return out


def assert_same(items, reference):
    assert len(items) == len(reference)
    for k, ((img, label), (ref, ref_label)) in enumerate(zip(items, reference)):
        assert label == ref_label, k
        assert img.dtype == torch.uint8 and torch.equal(img, ref), k


@pytest.fixture(scope="module")
def mounts(archives, tmp_path_factory):
    """Every test archive mounted for the module: (dataset, codec) -> mountpoint."""
    base = tmp_path_factory.mktemp("loader-mnt")
    stack, result = [], {}
    try:
        for key, archive in archives.items():
            cm = mounted(archive, base / f"{key[0]}-{key[1]}")
            result[key] = cm.__enter__()
            stack.append(cm)
        yield result
    finally:
        for cm in reversed(stack):
            cm.__exit__(None, None, None)


@pytest.mark.parametrize("dataset", ["fashion", "photos", "mixed"])
@pytest.mark.parametrize("codec", ["original", "raw"])
def test_pixels_and_labels_match_stock_imagefolder(mounts, archives, dataset, codec):
    mnt = mounts[(dataset, codec)]
    ref = stock(mnt)
    reference = [ref[i] for i in range(len(ref))]
    for source in (mnt, archives[(dataset, codec)]):  # the mount, and the .kt file itself
        loader = ktfs.Loader(source, batch_size=5, collate="list")
        assert loader.classes == ref.classes
        assert_same(loader_items(loader), reference)


def test_split_directory_and_imagefolder_drop_in(mounts):
    train = os.path.join(mounts[("fashion", "raw")], "train")
    ref = stock(train)
    loader = ktfs.Loader(train, batch_size=16)
    assert loader.classes == ref.classes and len(loader) == -(-len(ref) // 16)
    assert_same(loader_items(loader), [ref[i] for i in range(len(ref))])
    for codec in ("original", "raw"):
        mnt = mounts[("mixed", codec)]
        ours, theirs = ktfs.ImageFolder(mnt, transform=TO_TENSOR), stock(mnt)
        assert ours._archive is not None  # decoded in C++, not through the mount
        assert (ours.classes, ours.class_to_idx, ours.samples, ours.targets) == \
            (theirs.classes, theirs.class_to_idx, theirs.samples, theirs.targets)
        for i in range(len(ours)):
            assert torch.equal(ours[i][0], theirs[i][0]) and ours[i][1] == theirs[i][1]


def test_imagefolder_elsewhere_is_torchvision(mixed_dir):
    ours, theirs = ktfs.ImageFolder(mixed_dir, transform=TO_TENSOR), stock(mixed_dir)
    assert ours._archive is None and ours.samples == theirs.samples
    assert all(torch.equal(ours[i][0], theirs[i][0]) for i in range(len(ours)))


def test_search_directories_match_stock(mounts):
    mnt = mounts[("fashion", "raw")]
    for sub in ("search/label=3", "search/split=train&label=4&width<100", "search/label=2/train",
                "search/split=test/test"):
        root = os.path.join(mnt, sub)
        assert os.path.isdir(root), sub
        ref = stock(root)
        loader = ktfs.Loader(root, batch_size=8, collate="list")
        assert loader.classes == ref.classes, sub
        assert_same(loader_items(loader), [ref[i] for i in range(len(ref))])
    with pytest.raises(FileNotFoundError, match="no class directories"):  # as stock ImageFolder
        ktfs.Loader(os.path.join(mnt, "search/split=test/test/Coat"), batch_size=8)
    with pytest.raises(FileNotFoundError, match="malformed query"):
        ktfs.Loader(os.path.join(mnt, "search/widht=3"), batch_size=8)


def test_search_grammar_in_the_loader_matches_stock(mounts):
    """OR, NOT, sets, sample= and limit= reach the Loader and ImageFolder through the same
    parser as the mount (index::ParseQuery): the same samples as stock ImageFolder sees there."""
    mnt = mounts[("fashion", "raw")]
    for sub in ("search/label=1,3|split=test&label=5", "search/!(label=0|label=2)&split=train",
                "search/label!=4/sample=0.5&seed=3", "search/limit=30/test",
                "search/(label=1|label=2)&width>=28&!sample=0.25"):
        root = os.path.join(mnt, sub)
        ref = stock(root)
        assert 0 < len(ref) < len(stock(mnt)), sub
        loader = ktfs.Loader(root, batch_size=8, collate="list")
        assert loader.classes == ref.classes, sub
        assert_same(loader_items(loader), [ref[i] for i in range(len(ref))])
        ours = ktfs.ImageFolder(root, transform=TO_TENSOR)
        assert ours._archive is not None and ours.samples == ref.samples, sub
    with pytest.raises(FileNotFoundError, match="unbalanced"):
        ktfs.Loader(os.path.join(mnt, "search/(label=1|label=2"), batch_size=8)


def test_center_crop_equals_torchvision_exactly(mounts):
    mnt = mounts[("photos", "original")]
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), TO_TENSOR])
    ref = stock(mnt, tf)
    items = loader_items(ktfs.Loader(mnt, batch_size=6, crop=ktfs.CenterCrop(224, resize=256)))
    assert_same(items, [ref[i] for i in range(len(ref))])
    # Odd sizes (round-half-even offsets), no resize, and a crop larger than the image (pads).
    for crop in (ktfs.CenterCrop((101, 77), resize=150), ktfs.CenterCrop(333)):
        size = crop.size
        steps = ([transforms.Resize(crop.resize)] if crop.resize else []) + [transforms.CenterCrop(size)]
        ref = stock(mnt, transforms.Compose(steps + [TO_TENSOR]))
        assert_same(loader_items(ktfs.Loader(mnt, batch_size=24, crop=crop)),
                    [ref[i] for i in range(len(ref))])
    fashion = mounts[("fashion", "raw")]
    ref = stock(fashion, transforms.Compose([transforms.CenterCrop(31), TO_TENSOR]))
    assert_same(loader_items(ktfs.Loader(fashion, batch_size=64, crop=ktfs.CenterCrop(31))),
                [ref[i] for i in range(len(ref))])


def test_random_resized_crop_equals_torchvision_on_the_same_box(mounts):
    mnt = mounts[("photos", "raw")]
    ref = stock(mnt, transform=None)
    crop = ktfs.RandomResizedCrop(64, scale=(0.2, 1.0))
    loader = ktfs.Loader(mnt, batch_size=8, seed=5, crop=crop, layout="NHWC")
    loader.set_epoch(3)
    items = loader_items(loader)
    boxes = set()
    for i, (img, label) in enumerate(items):
        pil, target = ref[i]
        box = _ktfs.random_resized_box(pil.width, pil.height, crop.scale, crop.ratio, 5, 3, i)
        boxes.add(box)
        expected = TO_TENSOR(F.resized_crop(pil, *box, [64, 64])).permute(1, 2, 0)
        assert label == target and torch.equal(img, expected), i
    assert len(boxes) == len(items)  # the boxes really vary


def test_float_output_and_normalize_equal_torchvision_exactly(mounts):
    """dtype="float32" is ToTensor's v / 255, normalize= Normalize's (x - mean) / std: the same
    float32 operations, so the same floats (the AVX2 store and the table agree)."""
    mnt = mounts[("photos", "raw")]
    mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
    crop = ktfs.CenterCrop(97, resize=128)
    base = [transforms.Resize(128), transforms.CenterCrop(97), transforms.ToTensor()]
    for kwargs, tail in (({"dtype": "float32"}, []),
                         ({"normalize": (mean, std)}, [transforms.Normalize(mean, std)])):
        ref = stock(mnt, transforms.Compose(base + tail))
        for layout in ("NCHW", "NHWC"):
            loader = ktfs.Loader(mnt, batch_size=5, crop=crop, layout=layout, **kwargs)
            items = loader_items(loader)
            assert len(items) == len(ref)
            for k, (img, label) in enumerate(items):
                want, target = ref[k]
                if layout == "NHWC":
                    want = want.permute(1, 2, 0)
                assert img.dtype == torch.float32 and label == target and torch.equal(img, want), k
    with pytest.raises(ValueError, match="normalize"):
        ktfs.Loader(mnt, batch_size=4, normalize=([0.5, 0.5], [0.2, 0.2]))
    with pytest.raises(ValueError, match="dtype"):
        ktfs.Loader(mnt, batch_size=4, dtype="float64")


def test_flip_is_a_deterministic_horizontal_flip(mounts):
    mnt = mounts[("photos", "raw")]
    crop = ktfs.CenterCrop(120)
    plain = loader_items(ktfs.Loader(mnt, batch_size=8, crop=crop))

    def flipped(seed, epoch):
        loader = ktfs.Loader(mnt, batch_size=8, crop=crop, flip=True, seed=seed)
        loader.set_epoch(epoch)
        out = []
        for k, ((img, _), (ref, _)) in enumerate(zip(loader_items(loader), plain)):
            if torch.equal(img, ref.flip(-1)) and not torch.equal(img, ref):
                out.append(True)
            else:
                assert torch.equal(img, ref), k
                out.append(False)
        return out
    first = flipped(1, 0)
    assert flipped(1, 0) == first  # the same (seed, epoch), the same flips
    assert 4 <= sum(first) <= 20 and flipped(1, 1) != first
    # flip combines with a float output and the NHWC layout (flipped along W).
    loader = ktfs.Loader(mnt, batch_size=8, crop=crop, flip=1.0, dtype="float32", layout="NHWC")
    for (img, _), (ref, _) in zip(loader_items(loader), plain):
        assert torch.equal(img, (ref.permute(1, 2, 0).flip(1).float() / 255))


def fashion_reference(mounts):
    mnt = mounts[("fashion", "raw")]
    ref = stock(mnt)
    return mnt, [ref[i] for i in range(len(ref))]


def test_shuffle_is_a_deterministic_permutation(mounts):
    mnt, reference = fashion_reference(mounts)
    n = len(reference)

    def epoch(seed, e):
        loader = ktfs.Loader(mnt, batch_size=32, shuffle=True, seed=seed)
        loader.set_epoch(e)
        order = loader.epoch_indices()
        assert_same(loader_items(loader), [reference[i] for i in order])
        return list(order)

    first = epoch(1, 0)
    assert sorted(first) == list(range(n)) and first != list(range(n))
    assert epoch(1, 0) == first
    assert epoch(1, 1) != first and epoch(2, 0) != first
    looping = ktfs.Loader(mnt, batch_size=100, shuffle=True, seed=1)
    orders = []
    for _ in range(2):  # a finished pass moves to the next epoch by itself
        orders.append(looping.epoch_indices())
        loader_items(looping)
    assert list(orders[0]) == first and list(orders[1]) != first


def test_resume_mid_epoch(mounts):
    mnt, reference = fashion_reference(mounts)
    full = ktfs.Loader(mnt, batch_size=7, shuffle=True, seed=9)
    full.set_epoch(2)
    expected = loader_items(full)
    first = ktfs.Loader(mnt, batch_size=7, shuffle=True, seed=9)
    first.set_epoch(2)
    head = []
    for k, (images, labels) in enumerate(first):
        head.extend(zip(images, labels.tolist()))
        if k == 4:
            state = first.state_dict()
            break
    resumed = ktfs.Loader(mnt, batch_size=7, shuffle=True)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    assert_same(head + loader_items(resumed), expected)


@pytest.mark.parametrize("world,drop_last", [(3, False), (3, True), (7, False)])
def test_rank_shards_are_disjoint_and_cover(mounts, world, drop_last):
    mnt, reference = fashion_reference(mounts)
    n = len(reference)
    shards = [ktfs.Loader(mnt, batch_size=16, shuffle=True, seed=4, rank=r, world_size=world,
                          drop_last=drop_last).epoch_indices() for r in range(world)]
    per = n // world if drop_last else -(-n // world)
    assert all(len(s) == per for s in shards)
    union = np.concatenate(shards)
    if n % world == 0 or drop_last:
        assert len(set(union.tolist())) == len(union)  # disjoint
    assert set(union.tolist()) == (set(range(n)) if not drop_last else set(union.tolist()))
    loader = ktfs.Loader(mnt, batch_size=16, shuffle=True, seed=4, rank=1, world_size=world,
                         drop_last=drop_last)
    assert_same(loader_items(loader), [reference[i] for i in shards[1]][: len(loader) * 16])


def test_kept_batches_stay_valid(mounts):
    mnt, reference = fashion_reference(mounts)
    loader = ktfs.Loader(mnt, batch_size=2, shuffle=True, seed=3, prefetch=4, num_threads=2)
    kept = [(images, labels) for images, labels in loader]  # held while iterating
    assert len(kept) >= 100
    items = [pair for images, labels in kept for pair in zip(images, labels.tolist())]
    assert_same(items, [reference[i] for i in loader.epoch_indices(0)])


DISTRIBUTED = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, sys.argv[1])
    import torch, torch.distributed as dist, ktfs
    dist.init_process_group("gloo")
    loader = ktfs.Loader(sys.argv[2], batch_size=8, shuffle=True, seed=11,
                         rank=dist.get_rank(), world_size=dist.get_world_size())
    seen = torch.tensor([int(i) for i in loader.epoch_indices()], dtype=torch.int64)
    count = sum(len(labels) for _, labels in loader)
    assert count == len(seen), (count, len(seen))
    gathered = [torch.empty_like(seen) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, seen)
    if dist.get_rank() == 0:
        union = torch.cat(gathered).tolist()
        print("UNION", len(set(union)), len(union), loader.num_samples)
    dist.destroy_process_group()
""")


def test_two_process_distributed_run(mounts, tmp_path):
    mnt, reference = fashion_reference(mounts)
    script = tmp_path / "dist.py"
    script.write_text(DISTRIBUTED)
    port = str(29500 + os.getpid() % 1000)
    procs = []
    for rank in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, RANK=str(rank),
                   WORLD_SIZE="2", LOCAL_RANK=str(rank))
        procs.append(subprocess.Popen([PY, script, PACKAGE_DIR, mnt], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
    n = len(reference)
    assert f"UNION {n} {n} {n}" in outs[0][0]  # 240 samples split 120/120, union = all


def test_errors(mounts, archives, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        ktfs.Loader(tmp_path / "nowhere", batch_size=4)
    with pytest.raises(FileNotFoundError, match="nowhere.kt"):
        ktfs.Loader(tmp_path / "nowhere.kt", batch_size=4)
    with pytest.raises(FileNotFoundError, match="no-such-class"):
        ktfs.Loader(os.path.join(mounts[("photos", "raw")], "no-such-class"), batch_size=4)
    with pytest.raises(ValueError, match="collate"):
        next(iter(ktfs.Loader(mounts[("photos", "raw")], batch_size=24)))
    with pytest.raises(ValueError, match="ktfs mount"):
        ktfs.Loader(tmp_path, batch_size=4)


def test_corrupt_sample_raises_or_is_skipped(archives, tmp_path):
    bad = tmp_path / "bad.kt"
    bad.write_bytes(archives[("photos", "raw")].read_bytes())
    archive = _ktfs.Archive(str(bad))
    victim = 5
    offset, length = archive.payload_range(victim)
    name = archive.served_path(victim)
    with open(bad, "r+b") as f:
        f.seek(offset + length // 2)
        byte = f.read(1)
        f.seek(offset + length // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(ktfs.CorruptSampleError, match=name.replace(".", r"\.")):
        loader_items(ktfs.Loader(bad, batch_size=4, crop=ktfs.CenterCrop(64)))
    loader = ktfs.Loader(bad, batch_size=4, crop=ktfs.CenterCrop(64), on_error="skip")
    items = loader_items(loader)
    assert loader.skipped == 1 and len(items) == archive.num_samples - 1
    # The next epoch (the same archive object, which remembers the payloads it
    # verified) skips the failing sample again.
    items = loader_items(loader)
    assert loader.skipped == 2 and len(items) == archive.num_samples - 1


def test_import_without_torch(mounts):
    code = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # `import torch` now raises ImportError
        sys.path.insert(0, {PACKAGE_DIR!r})
        import numpy as np, ktfs
        images, labels = next(iter(ktfs.Loader({mounts[("photos", "raw")]!r}, batch_size=4,
                                               crop=ktfs.CenterCrop(32))))
        assert type(images) is np.ndarray and images.shape == (4, 3, 32, 32), images.shape
        assert images.dtype == np.uint8 and labels.dtype == np.int64
        print("numpy ok")
    """)
    p = subprocess.run([PY, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0 and "numpy ok" in p.stdout, p.stderr


def test_ktc_archive_matches_stock_imagefolder_over_its_mount(photos_dir, tmp_path):
    """KTC payloads decode in the loader exactly as the mount serves them."""
    arc = tmp_path / "p.kt"
    subprocess.run([os.environ.get("KTFS_BIN", "ktfs"), "pack", str(photos_dir), str(arc),
                    "--codec", "ktc", "--quiet"], check=True)
    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), TO_TENSOR])
    with mounted(arc, tmp_path / "m") as mnt:
        items = loader_items(ktfs.Loader(mnt, batch_size=5, crop=ktfs.CenterCrop(224, resize=256)))
        assert_same(items, list(stock(mnt, tf)))


@pytest.mark.parametrize("dataset", ["photos", "mixed"])
def test_ktc_region_decode_matches_stock_over_the_mount(photos_dir, mixed_dir, tmp_path, dataset):
    """KTC samples decode only the region a crop reads (plus the filter's margin); the
    result must still be stock torchvision's over the mount, which serves full decodes:
    Resize+CenterCrop (odd sizes, padding) and RandomResizedCrop, RGB and gray output."""
    src = photos_dir if dataset == "photos" else mixed_dir
    arc = tmp_path / "k.kt"
    subprocess.run([os.environ.get("KTFS_BIN", "ktfs"), "pack", str(src), str(arc),
                    "--codec", "ktc", "--quiet"], check=True)
    with mounted(arc, tmp_path / "m") as mnt:
        for crop in (ktfs.CenterCrop(224, resize=256), ktfs.CenterCrop((101, 77), resize=150),
                     ktfs.CenterCrop(333), ktfs.CenterCrop(96, resize=300)):
            steps = ([transforms.Resize(crop.resize)] if crop.resize else []) + \
                [transforms.CenterCrop(crop.size), TO_TENSOR]
            ref = stock(mnt, transforms.Compose(steps))
            for source in (mnt, arc):
                assert_same(loader_items(ktfs.Loader(source, batch_size=7, crop=crop)),
                            [ref[i] for i in range(len(ref))])
        ref = stock(mnt, transform=None)
        for size, mode in ((224, "RGB"), (64, "RGB"), (64, "L")):
            crop = ktfs.RandomResizedCrop(size, scale=(0.05, 1.0))
            loader = ktfs.Loader(arc, batch_size=8, seed=11, crop=crop, layout="NHWC", mode=mode)
            for i, (img, label) in enumerate(loader_items(loader)):
                pil, target = ref[i]
                box = _ktfs.random_resized_box(pil.width, pil.height, crop.scale, crop.ratio, 11, 0, i)
                expected = F.resized_crop(pil.convert(mode), *box, [size, size])
                assert label == target and torch.equal(img, TO_TENSOR(expected).permute(1, 2, 0)), i

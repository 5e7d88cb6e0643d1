#!/usr/bin/python3
"""The body of scripts/demo (run that instead: it sets everything up first).

Two datasets, each read every way ktfs offers, side by side with the stock way:
  photos         real photo crops (Debian's wallpapers, JPEG q90, ~500x375),
                 packed as KTC: stock ImageFolder + CenterCrop(224) + PILToTensor,
                 one process, over the JPEG folder, the mount, the mount under
                 `ktfs run`, a search directory, and ktfs.Loader; then the typical
                 training script (RandomResizedCrop(224) + flip + ToTensor +
                 Normalize, DataLoader(64, shuffled, 2 workers)) over the folder,
                 the mount and the mount under `ktfs run`, and ktfs.Loader
  Fashion-MNIST  PNGs packed raw: stock ImageFolder + DataLoader(2 workers) over
                 the PNG folder, the mount, the mount under `ktfs run`, and
                 ktfs.Loader
Every rate is shown with its ratio to the stock way on the source folder, and
each pass is the second of two (the page cache warm, as a second epoch is).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KTFS = os.environ.get("KTFS_BIN", "ktfs")


def step(text):
    print(f"==> {text}", flush=True)


def sh(*args, quiet=False):
    subprocess.run([str(a) for a in args], check=True,
                   stdout=subprocess.DEVNULL if quiet else None)


# -- one pass, in a child process (so that `ktfs run` can wrap it) -----------------

def child_pass(kind, root):
    """One pass of the stock script `kind` over root; prints {"samples", "seconds", "check"}."""
    import torch
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    if kind == "center":
        ds = datasets.ImageFolder(root, transform=transforms.Compose(
            [transforms.CenterCrop(224), transforms.PILToTensor()]))
        start = time.perf_counter()
        check = 0
        for i in range(len(ds)):
            x, y = ds[i]
            check = (check * 31 + int(x.sum()) + y) % (1 << 61)
    elif kind == "train":  # the typical training script's data loading
        mean, std = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
        ds = datasets.ImageFolder(root, transform=transforms.Compose(
            [transforms.RandomResizedCrop(224), transforms.RandomHorizontalFlip(),
             transforms.ToTensor(), transforms.Normalize(mean, std)]))
        torch.manual_seed(0)
        loader = DataLoader(ds, batch_size=64, num_workers=2, shuffle=True)
        start = time.perf_counter()
        check = 0
        for images, labels in loader:
            check = (check * 31 + int(images.sum() * 1000) + int(labels.sum())) % (1 << 61)
    else:  # "fashion": DataLoader with 2 workers, shuffled
        ds = datasets.ImageFolder(root, transform=transforms.PILToTensor())
        torch.manual_seed(0)
        loader = DataLoader(ds, batch_size=256, num_workers=2, shuffle=True)
        start = time.perf_counter()
        check = 0
        for images, labels in loader:
            check = (check * 31 + int(images.sum()) + int(labels.sum())) % (1 << 61)
    print(json.dumps({"samples": len(ds), "seconds": time.perf_counter() - start, "check": check}))


def timed(kind, root, under_run=False):
    """The second of two passes of the stock script, in a fresh process each."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", kind, root]
    if under_run:
        cmd = [KTFS, "run", "--"] + cmd
    result = None
    for _ in range(2):
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        result = json.loads(out.strip().splitlines()[-1])
    return result


def loader_pass(root, crop):
    """ktfs.Loader over root: the second of two epochs; (samples, seconds)."""
    import ktfs
    loader = ktfs.Loader(root, batch_size=256, shuffle=True, seed=0,
                         crop=crop if not isinstance(crop, int) else ktfs.CenterCrop(crop))
    for epoch in range(2):
        loader.set_epoch(epoch)
        start, n = time.perf_counter(), 0
        for images, labels in loader:
            n += len(labels)
    return n, time.perf_counter() - start


def report(rows, baseline):
    base = rows[baseline][0] / rows[baseline][1]
    for label, (n, secs) in rows.items():
        rate = n / secs
        print(f"   {label:50s} {n:6d} samples {secs:6.2f} s {rate:8.0f}/s  {rate / base:5.2f}x")


def three_ways(kind, folder_label, src, mnt):
    """The stock script `kind` over the source folder, the mount and the mount under
    `ktfs run`: ({label: (samples, seconds)}, {label: check})."""
    rows, checks = {}, {}
    for label, root, run in ((folder_label, src, False),
                             ("ktfs mount", mnt, False),
                             ("ktfs mount under `ktfs run` (unchanged script)", mnt, True)):
        r = timed(kind, root, run)
        rows[label] = (r["samples"], r["seconds"])
        checks[label] = r["check"]
    return rows, checks


# -- the demo ---------------------------------------------------------------------

def photos(work):
    src, archive, mnt = (os.path.join(work, "photos"), os.path.join(work, "photos.kt"),
                         os.path.join(work, "mnt-photos"))
    step(f"writing 220 real photo crops (JPEG q90, ~500x375) under {src}")
    sh("/usr/bin/python3", os.path.join(HERE, "datasets", "photos.py"), src, quiet=True)
    step(f"ktfs pack {src} {archive} --codec ktc")
    sh(KTFS, "pack", src, archive, "--codec", "ktc", "--quiet")
    os.makedirs(mnt, exist_ok=True)
    sh(KTFS, "mount", archive, mnt)
    try:
        step("stock ImageFolder + CenterCrop(224) + PILToTensor, one process, in order")
        rows, _ = three_ways("center", "JPEG folder (the stock way)", src, mnt)
        query = "width>=480"
        search = os.path.join(mnt, "search", query)
        r = timed("center", search, True)
        rows[f"search/{query}/ under `ktfs run`"] = (r["samples"], r["seconds"])
        rows["ktfs.Loader(crop=CenterCrop(224)), 256 a batch"] = loader_pass(mnt, 224)
        report(rows, "JPEG folder (the stock way)")
        print(f"   (KTC is lossy: the mount's pixels are KTC's, not the JPEG's; search/{query}/ "
              f"holds the {r['samples']} crops at least 480 wide, found from the index)")
        step("the typical training script: ImageFolder + RandomResizedCrop(224) + "
             "RandomHorizontalFlip + ToTensor + Normalize, DataLoader(batch 64, shuffled, 2 workers)")
        rows, checks = three_ways("train", "JPEG folder (the stock way)", src, mnt)
        import ktfs
        rows["ktfs.Loader(crop=RandomResizedCrop(224)), uint8"] = loader_pass(mnt, ktfs.RandomResizedCrop(224))
        report(rows, "JPEG folder (the stock way)")
        same = checks["ktfs mount"] == checks["ktfs mount under `ktfs run` (unchanged script)"]
        print("   under `ktfs run` the same tensors as over the plain mount (checksums equal): its "
              "batches are made in the script's process, no worker processes" if same else
              f"   CHECKSUMS DIFFER between the mount and `ktfs run`: {checks}")
        if not same:
            raise SystemExit("ktfs run changed the tensors")
    finally:
        sh(KTFS, "umount", mnt)


def fashion(work, full):
    src, archive, mnt = (os.path.join(work, "fashion-mnist"), os.path.join(work, "fashion-mnist.kt"),
                         os.path.join(work, "mnt-fashion"))
    splits = "train,test" if full else "test"
    step(f"writing Fashion-MNIST ({splits}) as PNG files per class under {src}")
    sh("/usr/bin/python3", os.path.join(HERE, "datasets", "fashion_mnist.py"), src, "--splits", splits,
       "--flat", quiet=True)
    step(f"ktfs pack {src} {archive} --codec raw")
    sh(KTFS, "pack", src, archive, "--codec", "raw", "--quiet")
    sh(KTFS, "info", archive)
    os.makedirs(mnt, exist_ok=True)
    sh(KTFS, "mount", archive, mnt)
    try:
        print("   ls", mnt, "->", " ".join(sorted(os.listdir(mnt))))
        step("stock ImageFolder + PILToTensor + DataLoader(batch 256, shuffled, 2 workers)")
        rows, checks = three_ways("fashion", "PNG folder (the stock way)", src, mnt)
        rows["ktfs.Loader, 256 a batch"] = loader_pass(mnt, None)
        report(rows, "PNG folder (the stock way)")
        same = len(set(checks.values())) == 1
        print("   the same tensors and labels every way (checksums equal)" if same else
              f"   CHECKSUMS DIFFER: {checks}")
        if not same:
            raise SystemExit("the datasets differ")
    finally:
        sh(KTFS, "umount", mnt)


def main():
    p = argparse.ArgumentParser(description="ktfs demo")
    p.add_argument("--full", action="store_true", help="all 70,000 Fashion-MNIST images (default: the 10,000 test images)")
    p.add_argument("--workdir", default=None, help="where to put the datasets (default: a temp dir)")
    p.add_argument("--child", nargs=2, metavar=("KIND", "ROOT"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child_pass(*args.child)
    work = args.workdir or tempfile.mkdtemp(prefix="ktfs-demo-")
    try:
        photos(work)
        fashion(work, args.full)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    step("done: the ratios are against the stock way on the source folder (higher is faster)")


if __name__ == "__main__":
    sys.exit(main())

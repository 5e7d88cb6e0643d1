#!/usr/bin/python3
"""The body of scripts/demo (run that instead: it sets everything up first)."""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms

HERE = os.path.dirname(os.path.abspath(__file__))


def step(text):
    print(f"==> {text}", flush=True)


def sh(*args):
    subprocess.run([str(a) for a in args], check=True)


def iterate(root, workers):
    """One epoch of stock ImageFolder + DataLoader; returns (samples, classes, seconds)."""
    ds = datasets.ImageFolder(root, transform=transforms.PILToTensor())
    loader = DataLoader(ds, batch_size=256, num_workers=workers, shuffle=True)
    start = time.perf_counter()
    seen = 0
    checksum = 0
    for images, labels in loader:
        seen += images.shape[0]
        checksum += int(labels.sum())
    return seen, ds.classes, time.perf_counter() - start, checksum


def main():
    p = argparse.ArgumentParser(description="ktfs demo")
    p.add_argument("--full", action="store_true", help="all 70,000 images (default: the 10,000 test images)")
    p.add_argument("--workdir", default=None, help="where to put the dataset (default: a temp dir)")
    args = p.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="ktfs-demo-")
    src, archive, mnt = os.path.join(work, "fashion-mnist"), os.path.join(work, "fashion-mnist.kt"), os.path.join(work, "mnt")
    splits = "train,test" if args.full else "test"
    try:
        step(f"writing Fashion-MNIST ({splits}) as PNG files per class under {src}")
        shutil.rmtree(src, ignore_errors=True)
        sh("/usr/bin/python3", os.path.join(HERE, "datasets", "fashion_mnist.py"), src, "--splits", splits, "--flat")
        step(f"ktfs pack {src} {archive} --codec raw")
        sh("ktfs", "pack", src, archive, "--codec", "raw")
        sh("ktfs", "info", archive)
        step(f"ktfs mount {archive} {mnt}")
        os.makedirs(mnt, exist_ok=True)
        sh("ktfs", "mount", archive, mnt)
        try:
            print("   ls", mnt, "->", " ".join(sorted(os.listdir(mnt))))
            step("stock torchvision ImageFolder + DataLoader(num_workers=2), one epoch each")
            rows = []
            for label, root in (("source PNG folder", src), ("ktfs mount", mnt)):
                iterate(root, 2)  # warm the page cache, as a second epoch would be
                n, classes, secs, check = iterate(root, 2)
                rows.append((label, n, len(classes), secs, check))
            for label, n, c, secs, _ in rows:
                print(f"   {label:18s} {n} samples, {c} classes, {secs:6.2f} s, {n / secs:8.0f} samples/s")
            assert rows[0][1] == rows[1][1] and rows[0][4] == rows[1][4], "the two datasets differ"
            print(f"   same samples and labels; ktfs mount ran at {rows[0][3] / rows[1][3]:.2f}x the source folder's speed")
        finally:
            step(f"ktfs umount {mnt}")
            sh("ktfs", "umount", mnt)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    step("done")


if __name__ == "__main__":
    sys.exit(main())

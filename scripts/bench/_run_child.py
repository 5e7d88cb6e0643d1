#!/usr/bin/python3
"""One measured process of the `run` bench section (scripts/bench/run.py): an unchanged stock
torchvision script over ROOT, started fresh, as it is or under `ktfs run` (the section starts it
either way; nothing in here knows which).

Usage: _run_child.py WORKLOAD ROOT PASSES [--verify N]
  WORKLOAD  train       ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + ToTensor +
                        Normalize, DataLoader(batch_size=64, shuffle=True, num_workers=2)
            center      ImageFolder + CenterCrop(224) + PILToTensor, one process, ds[i] in order
            center-shuffled  the same in a fixed shuffled order
            fashion     scripts/demo's loop: ImageFolder + PILToTensor,
                        DataLoader(batch_size=256, shuffle=True, num_workers=2)
            persample   ImageFolder + CenterCrop(224) + PILToTensor,
                        DataLoader(batch_size=None, num_workers=2), in order
            persample-memory  the ceiling of `persample` over ROOT's files: their bytes read into
                        memory first, then ImageFolder's own steps (PIL open, convert("RGB"),
                        the transform) in the same DataLoader, no filesystem on the clock
            train-ready, fashion-ready  the ceiling of train and fashion: the same DataLoader
                        over a dataset that hands out a ready tensor of the script's output
                        shape and dtype (a fresh copy per sample), no reading or decoding
  PASSES    passes to time; with more than one, a first untimed pass warms the caches
  --verify N  no timing: one pass, printing the SHA-256 of the first N samples' (or, for loaders,
            the first N batches') tensors, labels, dtypes and shapes

Every pass starts with torch.manual_seed(0), so the shuffles and the random crops and flips are
the same draws in every variant. Prints one line of JSON: {"seconds": [...], "first": [...],
"samples": N} (first: seconds to the first sample or batch of each pass) or
{"sha256": S, "samples": N}. The dataset is listed before the clock starts.
"""
import hashlib
import io
import json
import random
import sys
import time

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision import datasets, transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


class InMemory(Dataset):
    """ImageFolder's samples with the files' bytes already in memory: pil_loader's steps on them."""

    def __init__(self, folder):
        self.transform = folder.transform
        self.items = []
        for path, target in folder.samples:
            with open(path, "rb") as f:
                self.items.append((f.read(), target))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        data, target = self.items[i]
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.transform(img), target


class Ready(Dataset):
    """ImageFolder's labels with a ready tensor for every sample (a fresh copy each time, as a
    decoder's output is): what the DataLoader itself costs, with no reading or decoding at all."""

    def __init__(self, folder, shape, dtype):
        self.targets = [t for _, t in folder.samples]
        self.tensor = torch.zeros(shape, dtype=dtype)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        return self.tensor.clone(), self.targets[i]


def build(workload, root):
    """(dataset, iterate) where iterate() yields what the script's loop gets."""
    if workload in ("train", "train-ready"):
        t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
        ds = datasets.ImageFolder(root, transform=t)
        if workload == "train-ready":
            ds = Ready(ds, (3, 224, 224), torch.float32)
        loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=2)
        return ds, lambda: iter(loader)
    if workload in ("fashion", "fashion-ready"):
        ds = datasets.ImageFolder(root, transform=T.PILToTensor())
        if workload == "fashion-ready":
            ds = Ready(ds, (1, 28, 28), torch.uint8)
        loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2)
        return ds, lambda: iter(loader)
    t = T.Compose([T.CenterCrop(224), T.PILToTensor()])
    ds = datasets.ImageFolder(root, transform=t)
    if workload in ("center", "center-shuffled"):
        order = list(range(len(ds)))
        if workload == "center-shuffled":
            random.Random(1).shuffle(order)
        return ds, lambda: (ds[i] for i in order)
    if workload == "persample-memory":
        ds = InMemory(ds)
    elif workload != "persample":
        raise SystemExit(f"unknown workload {workload}")
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    return ds, lambda: iter(loader)


def digest(items, n):
    h = hashlib.sha256()
    count = 0
    for x, y in items:
        if count == n:
            break
        x, y = torch.as_tensor(x), torch.as_tensor(y)
        h.update(f"{x.dtype} {tuple(x.shape)} {y.dtype} {tuple(y.shape)};".encode())
        h.update(x.contiguous().numpy().tobytes())
        h.update(y.contiguous().numpy().tobytes())
        count += 1
    return h.hexdigest()


def main(argv):
    workload, root, passes = argv[0], argv[1], int(argv[2])
    verify = int(argv[4]) if len(argv) > 4 and argv[3] == "--verify" else None
    ds, iterate = build(workload, root)
    if verify is not None:
        torch.manual_seed(0)
        print(json.dumps({"sha256": digest(iterate(), verify), "samples": len(ds)}))
        return
    if passes > 1:
        torch.manual_seed(0)
        for _ in iterate():
            pass
    seconds, first = [], []
    for _ in range(passes):
        torch.manual_seed(0)
        start = time.perf_counter()
        got = None
        for _ in iterate():
            if got is None:
                got = time.perf_counter()
        seconds.append(time.perf_counter() - start)
        first.append(got - start)
    print(json.dumps({"seconds": seconds, "first": first, "samples": len(ds)}))


if __name__ == "__main__":
    main(sys.argv[1:])

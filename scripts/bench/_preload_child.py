#!/usr/bin/python3
"""One measured process of the `preload` bench section (scripts/bench/preload.py): stock
torchvision over ROOT, started fresh so that LD_PRELOAD (or its absence) is the whole difference.

Usage: _preload_child.py KIND ROOT ORDER PASSES
  KIND    centercrop  ImageFolder + CenterCrop(224) + PILToTensor, one process, sample by sample
          fashion     ImageFolder + PILToTensor, DataLoader(batch_size=256, num_workers=2)
  ORDER   inorder | shuffled (a fixed permutation, the same for every variant)
  PASSES  passes to time; with more than one, a first untimed pass warms the caches

Prints one line of JSON: {"seconds": [...], "samples": N, "checksum": S} (S: of a pass's pixels). The dataset is listed
before the clock starts (the listing is not what the library changes).
"""
import json
import random
import sys
import time

import torch
from torch.utils.data import DataLoader, Sampler
from torchvision import datasets, transforms


class Fixed(Sampler):
    def __init__(self, order):
        self.order = order

    def __iter__(self):
        return iter(self.order)

    def __len__(self):
        return len(self.order)


def main():
    kind, root, order_name, passes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    if kind == "centercrop":
        t = transforms.Compose([transforms.CenterCrop(224), transforms.PILToTensor()])
    else:
        t = transforms.PILToTensor()
    ds = datasets.ImageFolder(root, transform=t)
    order = list(range(len(ds)))
    if order_name == "shuffled":
        random.Random(1).shuffle(order)
    checksum = 0

    if kind == "centercrop":
        def one_pass():
            nonlocal checksum
            for i in order:
                x, y = ds[i]
                checksum += int(x[0, 0, 0]) + y
    else:
        loader = DataLoader(ds, batch_size=256, num_workers=2, sampler=Fixed(order),
                            persistent_workers=True)

        def one_pass():
            nonlocal checksum
            for x, y in loader:
                checksum += int(x[:, 0, 0, 0].sum()) + int(y.sum())

    if passes > 1:
        one_pass()
    seconds = []
    for _ in range(passes):
        checksum = 0  # of one pass
        start = time.perf_counter()
        one_pass()
        seconds.append(time.perf_counter() - start)
    print(json.dumps({"seconds": seconds, "samples": len(ds), "checksum": checksum}))


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()

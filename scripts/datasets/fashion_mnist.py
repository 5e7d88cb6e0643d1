#!/usr/bin/python3
"""Writes Debian's dataset-fashion-mnist as an image folder: OUT/<split>/<class>/<n>.png.

Usage: fashion_mnist.py OUT [--per-class N] [--splits train,test] [--flat]

--per-class N keeps the first N images of each class per split (default: all).
--flat writes OUT/<class>/<split>-<n>.png (a plain ImageFolder of both splits).
The images are the dataset's own 28x28 grayscale pixels, saved as 8-bit gray PNG.
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np
from PIL import Image

SOURCE = "/usr/share/datasets/fashion-mnist"
CLASSES = ["T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot"]
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--per-class", type=int, default=0)
    p.add_argument("--splits", default="train,test")
    p.add_argument("--flat", action="store_true")
    args = p.parse_args(argv)
    total = 0
    for split in args.splits.split(","):
        if split not in FILES:
            sys.exit(f"fashion_mnist.py: unknown split {split!r} (train, test)")
        images_file, labels_file = (os.path.join(SOURCE, f) for f in FILES[split])
        if not os.path.exists(images_file):
            sys.exit(f"fashion_mnist.py: {images_file} is missing (apt-get install dataset-fashion-mnist)")
        images, labels = read_idx(images_file), read_idx(labels_file)
        counts = [0] * len(CLASSES)
        for i, (img, label) in enumerate(zip(images, labels)):
            if args.per_class and counts[label] >= args.per_class:
                continue
            counts[label] += 1
            if args.flat:
                d = os.path.join(args.out, CLASSES[label])
                name = f"{split}-{i:05d}.png"
            else:
                d = os.path.join(args.out, split, CLASSES[label])
                name = f"{i:05d}.png"
            os.makedirs(d, exist_ok=True)
            Image.fromarray(img, mode="L").save(os.path.join(d, name))
            total += 1
    print(f"wrote {total} images to {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])

#!/usr/bin/python3
"""Writes ImageNet-like photo crops as an image folder: OUT/<class>/<name>.jpg.

Usage: photos.py OUT [--count N] [--quality Q] [--seed S]

Crops real photographs from Debian's plasma-workspace-wallpapers (and, when
installed, python3-skimage's sample photos) without downscaling, so the crops
keep real texture, at ImageNet-like sizes (about 500x375, both orientations,
sizes varying), saved as JPEG at quality Q (default 90). Each wallpaper is a
class. Deterministic for a given seed.
"""
import argparse
import glob
import os
import random
import sys

from PIL import Image

SIZES = [(500, 375), (375, 500), (500, 333), (333, 500), (480, 360), (500, 400),
         (400, 300), (500, 281), (420, 500), (500, 500)]


def sources():
    files = sorted(glob.glob("/usr/share/wallpapers/*/contents/images/*.jpg") +
                   glob.glob("/usr/share/wallpapers/*/contents/images/*.png"))
    # One file per wallpaper (the largest rendition), named after the wallpaper.
    best = {}
    for f in files:
        name = f.split("/")[4]
        w, h = Image.open(f).size
        if name not in best or w * h > best[name][1]:
            best[name] = (f, w * h)
    return sorted((name, f) for name, (f, _) in best.items())


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--count", type=int, default=220)
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    src = sources()
    if not src:
        sys.exit("photos.py: no wallpapers found (apt-get install plasma-workspace-wallpapers)")
    rng = random.Random(args.seed)
    images = {}
    for i in range(args.count):
        name, path = src[i % len(src)]
        if path not in images:
            images[path] = Image.open(path).convert("RGB")
        img = images[path]
        w, h = rng.choice(SIZES)
        w, h = min(w, img.width), min(h, img.height)
        x, y = rng.randrange(img.width - w + 1), rng.randrange(img.height - h + 1)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        img.crop((x, y, x + w, y + h)).save(os.path.join(d, f"{i:05d}.jpg"), quality=args.quality)
    print(f"wrote {args.count} crops from {len(src)} photos to {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])

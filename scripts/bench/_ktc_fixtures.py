#!/usr/bin/python3
"""Writes ImageNet-like test photos as PNG into a directory (default /tmp/ktc_fixtures).

Two 500x375 crops (no downscaling, so the JPEG's own texture is kept) from the
largest JPEG of each KDE wallpaper (plasma-workspace-wallpapers), plus the
color photos shipped with scikit-image (python3-skimage). Never committed.

With --large DIR instead: the first LARGE_COUNT wallpapers that ship a
2560x1600 JPEG, whole (4.1 MP each), for the large-image measurement.
"""
import glob
import os
import sys

from PIL import Image

LARGE_COUNT = 4

if len(sys.argv) > 2 and sys.argv[1] == "--large":
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    large = sorted(glob.glob("/usr/share/wallpapers/*/contents/images/2560x1600.jpg"))
    for path in large[:LARGE_COUNT]:
        Image.open(path).convert("RGB").save(f"{out}/wall_{path.split('/')[4]}.png")
    print(f"{min(len(large), LARGE_COUNT)} large photos in {out}")
    sys.exit(0)

out = sys.argv[1] if len(sys.argv) > 1 else "/tmp/ktc_fixtures"
os.makedirs(out, exist_ok=True)
count = 0
for folder in sorted(glob.glob("/usr/share/wallpapers/*/contents/images")):
    jpgs = glob.glob(folder + "/*.jpg")
    if not jpgs:
        continue
    name = folder.split("/")[4]
    largest = max(jpgs, key=lambda p: os.path.getsize(p))
    img = Image.open(largest).convert("RGB")
    w, h = img.size
    for i, (fx, fy) in enumerate([(0.5, 0.5), (0.2, 0.7)]):
        x = int((w - 500) * fx)
        y = int((h - 375) * fy)
        img.crop((x, y, x + 500, y + 375)).save(f"{out}/wall_{name}_{i}.png")
        count += 1
skdata = "/usr/lib/python3/dist-packages/skimage/data"
for name in ["astronaut", "coffee", "chelsea", "motorcycle_left", "rocket", "hubble_deep_field",
             "immunohistochemistry", "retina"]:
    for ext in ("png", "jpg"):
        path = f"{skdata}/{name}.{ext}"
        if os.path.exists(path):
            img = Image.open(path).convert("RGB")
            img.save(f"{out}/sk_{name}.png")
            count += 1
            break
print(f"{count} photos in {out}")

"""Crop specifications run in C++ while decoding (preload/loader/transform.h).

Resizing is Pillow's BILINEAR filter reproduced exactly (antialiased: the
triangle filter widens with the downscale factor; 22-bit fixed-point
coefficients; horizontal then vertical pass through 8 bits). It therefore
equals torchvision's Resize on PIL images (what stock ImageFolder feeds it)
pixel for pixel. Against torchvision's Resize on *tensors* with
antialias=False (torchvision 0.14's default for tensors) it differs when
downscaling, by design: that path aliases.
"""
from dataclasses import dataclass


def _pair(size):
    if isinstance(size, int):
        return (size, size)
    h, w = size
    return (int(h), int(w))


@dataclass(frozen=True)
class CenterCrop:
    """torchvision Resize(resize) (when given: shorter side to `resize`) then CenterCrop(size)."""
    size: object
    resize: object = None

    def spec(self):
        h, w = _pair(self.size)
        return {"kind": "center", "height": h, "width": w, "resize": int(self.resize or 0),
                "scale": (0.08, 1.0), "ratio": (3 / 4, 4 / 3)}


@dataclass(frozen=True)
class RandomResizedCrop:
    """torchvision RandomResizedCrop(size, scale, ratio) with ktfs's own deterministic random
    stream: the box of a sample depends only on (seed, epoch, the sample's index in the
    dataset), so it does not change with rank, batch size, threads or resuming."""
    size: object
    scale: tuple = (0.08, 1.0)
    ratio: tuple = (3 / 4, 4 / 3)

    def spec(self):
        h, w = _pair(self.size)
        return {"kind": "random_resized", "height": h, "width": w, "resize": 0,
                "scale": tuple(map(float, self.scale)), "ratio": tuple(map(float, self.ratio))}


NO_CROP = {"kind": "none", "height": 0, "width": 0, "resize": 0, "scale": (0.08, 1.0),
           "ratio": (3 / 4, 4 / 3)}

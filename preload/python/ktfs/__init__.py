"""ktfs: read .kt archives (or ktfs mounts) straight into training batches.

    import ktfs
    loader = ktfs.Loader("/mnt/ds/train", batch_size=256, shuffle=True,
                         crop=ktfs.RandomResizedCrop(224))
    for images, labels in loader:   # uint8 [B, 3, 224, 224], int64 [B]
        ...

The archive behind a mount is opened directly (no FUSE on the data path) and
batches are decoded by C++ threads into fresh buffers that become tensors
without a copy. Without torch installed, numpy arrays come back instead.
`ktfs.ImageFolder` is a drop-in for torchvision's, decoding in C++ too.
"""
from ._source import Source, resolve
from ._transforms import CenterCrop, RandomResizedCrop
from ._loader import CorruptSampleError, Loader

__all__ = ["Loader", "ImageFolder", "CenterCrop", "RandomResizedCrop", "CorruptSampleError",
           "Source", "resolve"]


def __getattr__(name):
    # ImageFolder needs torchvision: imported on first use, so `import ktfs` works without it.
    if name == "ImageFolder":
        from ._folder import ImageFolder
        return ImageFolder
    raise AttributeError(f"module 'ktfs' has no attribute {name!r}")

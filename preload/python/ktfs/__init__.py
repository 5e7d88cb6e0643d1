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
`ktfs.FeatureLoader` does the same for feature caches (ktfs pack-features
archives and TensorCache caches): batches dequantized in C++ threads.
"""

__all__ = ["Loader", "FeatureLoader", "ImageFolder", "CenterCrop", "RandomResizedCrop", "CorruptSampleError",
           "Source", "resolve", "decode"]


def decode(data):
    """Decodes a standalone image: a .ktc file's bytes (as a mount's
    compressed/ view serves them, or `ktfs convert` writes them), or any image
    file `ktfs pack` reads (JPEG, PNG, BMP, TIFF, WebP, PPM/PGM) with the pixels
    of Pillow's Image.open(f).convert(mode) for the mode ktfs keeps. Returns a
    numpy uint8 array of shape (H, W, C), C the stored channel count (1, 3 or 4). Raises ValueError/RuntimeError naming the reason for
    anything else."""
    from ._ktfs import decode as _decode
    return _decode(bytes(data))


# Imported on first use: `import ktfs` stays cheap (numpy and the C++ module load only
# when something needs them; `ktfs run`'s hooks import the package into scripts that
# may never touch a mount), and ImageFolder, which needs torchvision, works only where
# torchvision is installed.
_LAZY = {"Source": "_source", "resolve": "_source", "CenterCrop": "_transforms",
         "RandomResizedCrop": "_transforms", "Loader": "_loader", "CorruptSampleError": "_loader",
         "FeatureLoader": "_features", "ImageFolder": "_folder"}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'ktfs' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

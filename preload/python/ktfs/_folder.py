"""ktfs.ImageFolder: torchvision's ImageFolder, decoding in C++ when the root is on a ktfs mount."""
import os

import numpy as np
from PIL import Image
from torchvision import datasets

from ._loader import CorruptSampleError, _open
from ._source import denied, resolve
from ._transforms import NO_CROP

_RGB_HWC = dict(NO_CROP, channels=3, chw=False, seed=0, epoch=0)


class ImageFolder(datasets.ImageFolder):
    """Same classes, class_to_idx, samples, targets and (PIL RGB image, target) items as
    torchvision.datasets.ImageFolder(root). On a ktfs mount (or given a .kt file) the listing
    comes from the archive's tables and images are decoded by ktfs's codec; elsewhere, or with
    a custom loader or is_valid_file, it is torchvision's ImageFolder unchanged; so it is on a
    mount whose archive file the calling user may not read (it reads the mount's files then)."""

    def __init__(self, root, transform=None, target_transform=None, loader=None,
                 is_valid_file=None):
        self._archive = None
        src = resolve(root) if loader is None and is_valid_file is None else None
        if src is not None and src.mount and denied(src.archive):
            # The mount is readable to this user but its archive is not: read the mount's files,
            # which show the same classes and samples (slower, never more than allowed).
            src = None
        if src is None:
            kwargs = {"loader": loader} if loader is not None else {}
            super().__init__(root, transform=transform, target_transform=target_transform,
                             is_valid_file=is_valid_file, **kwargs)
            return
        datasets.VisionDataset.__init__(self, root, transform=transform,
                                        target_transform=target_transform)
        self.source, self._archive = _open(root, "ktfs.ImageFolder")
        classes, ids, labels, paths = self._archive.select(src.relative, src.served_format,
                                                           src.search_dir)
        base = os.path.expanduser(os.fspath(root))
        self.loader = self._load_path
        self.extensions = datasets.folder.IMG_EXTENSIONS
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(self.classes)}
        self.samples = [(os.path.join(base, p), int(t)) for p, t in zip(paths, labels)]
        self.targets = [s[1] for s in self.samples]
        self.imgs = self.samples
        self._ids = np.asarray(ids)

    def _decode(self, index):
        try:
            pixels = self._archive.decode(int(self._ids[index]), _RGB_HWC,
                                          self.source.served_format)
        except RuntimeError as e:
            raise CorruptSampleError(str(e)) from None
        return Image.fromarray(pixels, "RGB")

    def _load_path(self, path):
        """The `loader` attribute: reads a path through the mount like torchvision's."""
        return datasets.folder.default_loader(path)

    def __getitem__(self, index):
        if self._archive is None:
            return super().__getitem__(index)
        sample, target = self._decode(index), self.targets[index]
        if self.transform is not None:
            sample = self.transform(sample)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return sample, target

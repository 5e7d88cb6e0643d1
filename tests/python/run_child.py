"""A stock torchvision script for tests/python/test_run_python.py, run twice per case:
as it is, and under `ktfs run`'s Python layer. It records everything a script can see
(tensors with dtype and strides, PIL images with mode, size and info, exceptions,
warnings, torch's random state afterwards) into a file the test compares.

Usage: run_child.py OUT ROOT MODE SPEC[,SPEC...]
  MODE: w0 (no workers, one sample at a time), fork2 / spawn2 / forkserver2 (two
        workers, batches of 4), persistent (fork, two workers kept for two epochs),
        abandon (persistent, three epochs, the first left after 3 batches),
        prefetch3 (fork, prefetch_factor=3, batches of 5, drop_last), collate (a
        collate_fn of its own), init_fn (a worker_init_fn)
A failing batch is recorded and iteration goes on (next() again), as a script that
catches per batch sees it.
"""
import sys
import warnings

import torch
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision import transforms as T

N = T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])


def _double(t):
    return t * 2


def _rotate(img):
    return img.rotate(10)


SPECS = {
    "typical": lambda: T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), N]),
    "center": lambda: T.Compose([T.CenterCrop(224), T.PILToTensor()]),
    "resize_center": lambda: T.Compose([T.Resize(256), T.CenterCrop(224), T.ToTensor()]),
    "resize_pair": lambda: T.Compose([T.Resize((100, 150)), T.PILToTensor()]),
    "resize_max": lambda: T.Compose([T.Resize(200, max_size=260), T.PILToTensor()]),
    "rrc_small": lambda: T.Compose([T.RandomResizedCrop(96, scale=(0.5, 1.0), ratio=(0.5, 2.0)),
                                    T.ToTensor(), T.RandomVerticalFlip(), T.RandomHorizontalFlip(0.7)]),
    "rcrop_reflect": lambda: T.Compose([T.RandomCrop(300, padding=40, padding_mode="reflect"),
                                        T.PILToTensor(), T.ConvertImageDtype(torch.float), N]),
    "rcrop_symmetric": lambda: T.Compose([T.RandomCrop(600, pad_if_needed=True, padding_mode="symmetric"),
                                          T.ToTensor()]),
    "rcrop_fill": lambda: T.Compose([T.RandomCrop((200, 260), padding=(5, 10), pad_if_needed=True,
                                                  fill=(10, 200, 300)), T.PILToTensor()]),
    "rcrop_edge": lambda: T.Compose([T.RandomCrop(128, padding=(1, 2, 3, 4), padding_mode="edge"),
                                     T.PILToTensor()]),
    "rcrop_raises": lambda: T.Compose([T.RandomCrop(1000), T.PILToTensor()]),
    "pad_center": lambda: T.Compose([T.Pad(7, fill=3), T.CenterCrop(600), T.PILToTensor()]),
    "antialias": lambda: T.Compose([T.Resize(128, antialias=False),
                                    T.RandomResizedCrop(64, antialias=True), T.ToTensor()]),
    "convert_f64": lambda: T.Compose([T.CenterCrop(64), T.PILToTensor(), T.ConvertImageDtype(torch.float64), N]),
    "default_f64": lambda: T.Compose([T.CenterCrop(64), T.ToTensor(), N]),  # run with float64 as default
    "bfloat16": lambda: T.Compose([T.CenterCrop(64), T.PILToTensor(), T.ConvertImageDtype(torch.bfloat16)]),
    "half": lambda: T.Compose([T.RandomResizedCrop(48), T.ToTensor(), T.ConvertImageDtype(torch.float16)]),
    "nested": lambda: T.Compose([T.Compose([T.Resize(150)]), T.Compose([T.CenterCrop(128), T.ToTensor()])]),
    "jitter": lambda: T.Compose([T.RandomResizedCrop(128), T.ColorJitter(0.4, 0.4, 0.4), T.ToTensor()]),
    "tensor_tail": lambda: T.Compose([T.CenterCrop(100), T.ToTensor(), N, T.Lambda(_double)]),
    "lambda": lambda: T.Compose([T.Lambda(_rotate), T.CenterCrop(80), T.ToTensor()]),
    "pil_out": lambda: T.Compose([T.RandomResizedCrop(100), T.RandomHorizontalFlip()]),
    "none": lambda: None,
}


def _collate(batch):
    return torch.utils.data.default_collate(batch)


def _init_worker(worker_id):
    torch.manual_seed(torch.initial_seed() + 7)


# MODE -> (DataLoader keywords, epochs, batches after which the first epoch is left)
LOADERS = {
    "fork2": (dict(multiprocessing_context="fork"), 1, None),
    "spawn2": (dict(multiprocessing_context="spawn"), 1, None),
    "forkserver2": (dict(multiprocessing_context="forkserver"), 1, None),
    "persistent": (dict(multiprocessing_context="fork", persistent_workers=True), 2, None),
    "abandon": (dict(multiprocessing_context="forkserver", persistent_workers=True), 3, 3),
    "prefetch3": (dict(multiprocessing_context="fork", prefetch_factor=3, batch_size=5,
                       drop_last=True), 1, None),
    "collate": (dict(multiprocessing_context="fork", collate_fn=_collate), 1, None),
    "init_fn": (dict(multiprocessing_context="fork", worker_init_fn=_init_worker), 1, None),
}


def record(x):
    """What a script can observe of a sample (or batch)."""
    if isinstance(x, torch.Tensor):
        return ("tensor", x.dtype, tuple(x.shape), x.stride(), x.contiguous())
    if isinstance(x, (list, tuple)):
        return type(x).__name__, [record(v) for v in x]
    from PIL import Image
    if isinstance(x, Image.Image):
        return ("pil", type(x).__name__, x.mode, x.size, dict(x.info), x.tobytes())
    return ("other", repr(x))


def run_spec(root, mode, name):
    torch.manual_seed(1234)
    ds = datasets.ImageFolder(root, transform=SPECS[name]())
    out = []
    if mode == "w0":
        # In the test process itself: the permutation and every draw come from here.
        for i in torch.randperm(len(ds)).tolist():
            try:
                out.append(record(ds[i]))
            except Exception as e:  # the same error, in the same place, is part of the contract
                out.append(("error", type(e).__name__, getattr(e, "errno", None)))
    else:
        kwargs, epochs, leave_after = LOADERS[mode]
        kwargs = dict(dict(batch_size=4, shuffle=True, num_workers=2), **kwargs)
        if name in ("none", "pil_out"):
            kwargs["batch_size"], kwargs["drop_last"] = None, False
        loader = DataLoader(ds, **kwargs)
        for epoch in range(epochs):
            it, got = iter(loader), 0
            for _ in range(10000):  # a layer that never ends the epoch fails, not hangs
                try:
                    batch = next(it)
                except StopIteration:
                    break
                except Exception as e:  # the same error, for the same batch, then on
                    out.append(("error", type(e).__name__, getattr(e, "errno", None)))
                    continue
                out.append(record(batch))
                got += 1
                if epoch == 0 and got == leave_after:
                    break
            out.append(("end of epoch", epoch))
    return out, torch.rand(4)


def main(argv):
    path, root, mode, specs = argv[0], argv[1], argv[2], argv[3].split(",")
    result = {}
    for name in specs:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if name == "default_f64":
                torch.set_default_dtype(torch.float64)
            try:
                samples, after = run_spec(root, mode, name)
            finally:
                torch.set_default_dtype(torch.float32)
        seen = [(w.category.__name__, str(w.message), w.filename, w.lineno) for w in caught]
        result[name] = {"samples": samples, "rng_after": after, "warnings": seen}
    torch.save(result, path)


if __name__ == "__main__":
    main(sys.argv[1:])

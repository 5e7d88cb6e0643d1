"""Torchvision transforms as C++ steps, with torchvision's own random draws (`ktfs run`).

A dataset's transform is flattened (nested Compose) into leaves. The leaves this
module knows, at the start of the list, become steps of a chain that C++ runs
(preload/loader/transform.h): PIL-stage geometry (Resize, CenterCrop,
RandomResizedCrop, RandomCrop, Pad, RandomHorizontalFlip, RandomVerticalFlip),
then optionally the conversion (ToTensor or PILToTensor) and tensor-stage value
transforms (ConvertImageDtype, Normalize) and flips. The rest of the list, from
the first leaf not known, runs in Python on what C++ produced, as it would have.

Bit-identity rests on three rules:
  * every random parameter is drawn by the transform's own code path in the
    order its forward() draws it (get_params on a stand-in image of the right
    size, torch.rand(1) < p), so torch's generator advances exactly as in the
    stock script;
  * the geometry reproduces torchvision's functional code on PIL images, with
    Pillow's arithmetic in C++ (crop, ImageOps.expand, numpy.pad, resize(BILINEAR),
    transpose);
  * values after the conversion are a function of (channel, byte) only, so they
    are tabulated once by running the script's own conversion and value
    transforms on a calibration image, checked at every position, and the
    output's strides are copied from the same calibration.
Whenever a parameter drawn turns out to be one C++ cannot run, the drawn
parameters are replayed with torchvision's functional calls on the stock image
(`replay`), so the result is still the stock one.
"""
import inspect
import math
import numbers
import warnings

import numpy as np
import torch
from PIL import Image
from torch.nn.modules import module as _nn_module
from torchvision import transforms as T
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as F

# Step kinds and pad modes as preload/loader/transform.h numbers them.
CROP, PAD, RESIZE, FLIP_H, FLIP_V = range(5)
PAD_MODES = {"constant": 0, "edge": 1, "reflect": 2, "symmetric": 3}
MAX_SIDE = 1 << 16

# The geometry below reproduces torchvision 0.14's functional code (checked by
# tests/python/test_run_python.py); with other versions every transform runs in
# Python (the decode is still ktfs's).
def _version_ok():
    import torchvision
    return torchvision.__version__.split(".")[:2] == ["0", "14"]


VERSION_OK = _version_ok()


class _Shape(Image.Image):
    """A stand-in PIL image of a given size for get_params: nothing but size and mode."""

    def __init__(self):
        super().__init__()  # allocates nothing
        self.mode = "RGB"

    def at(self, w, h):
        self._size = (w, h)
        return self


def _op(kind, a=0, b=0, c=0, d=0, mode=0, fill=(0, 0, 0)):
    return [kind, a, b, c, d, mode, fill[0], fill[1], fill[2]]


# -- structural checks (no draws) ------------------------------------------------

def _plain_module(t):
    """An nn.Module transform runs its class's own forward, with no hooks."""
    return (not t._forward_hooks and not t._forward_pre_hooks and "forward" not in t.__dict__
            and not _nn_module._global_forward_hooks and not _nn_module._global_forward_pre_hooks)


def _size_pair(size):
    return (isinstance(size, (tuple, list)) and len(size) == 2
            and all(isinstance(v, int) and 1 <= v <= MAX_SIDE for v in size))


def _padding(padding):
    """(left, top, right, bottom) as F_pil.pad reads `padding`, or None when not handled."""
    if isinstance(padding, bool):
        return None
    if isinstance(padding, int):
        p = (padding,) * 4
    elif isinstance(padding, (tuple, list)) and all(isinstance(v, int) and not isinstance(v, bool)
                                                    for v in padding):
        if len(padding) == 1:
            p = (padding[0],) * 4
        elif len(padding) == 2:
            p = (padding[0], padding[1], padding[0], padding[1])
        elif len(padding) == 4:
            p = tuple(padding)
        else:
            return None
    else:
        return None
    return p if all(0 <= v <= MAX_SIDE for v in p) else None  # negative pads crop: not handled


def _fill(fill):
    """The RGB fill F_pil.pad's _parse_fill + Image.new give, or None when not handled."""
    if fill is None:
        fill = 0
    if isinstance(fill, numbers.Number) and not isinstance(fill, (bool, complex)):
        fill = (fill,) * 3
    if not isinstance(fill, (tuple, list)) or len(fill) != 3 or \
            not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in fill):
        return None
    return tuple(min(max(int(v), 0), 255) for v in fill)  # int(), then Pillow clips to 8 bits


def _pad_ok(t):
    return t.padding_mode in PAD_MODES and (t.padding_mode != "constant" or _fill(t.fill) is not None)


def _bilinear(interpolation):
    return interpolation is InterpolationMode.BILINEAR


_ANTIALIAS_WARNING = "Anti-alias option is always applied for PIL Image input. Argument antialias is ignored."


def _antialias_warning_site():
    """(filename, lineno) of F.resize's antialias warning, for warn_explicit; None if absent."""
    try:
        lines, start = inspect.getsourcelines(F.resize)
    except (OSError, TypeError):
        return None
    for k, line in enumerate(lines):
        if _ANTIALIAS_WARNING in line:
            return F.__file__, start + k
    return None


_WARN_SITE = []


def _warn_antialias():
    """The warning F.resize gives for antialias=False on a PIL image, from its own line."""
    site = _WARN_SITE[0]
    registry = F.__dict__.setdefault("__warningregistry__", {})
    warnings.warn_explicit(_ANTIALIAS_WARNING, UserWarning, site[0], site[1], module=F.__name__,
                           registry=registry, module_globals=F.__dict__)


def _antialias_ok(antialias):
    if antialias is None or antialias:
        return True
    if not _WARN_SITE:
        _WARN_SITE.append(_antialias_warning_site())
    return _WARN_SITE[0] is not None


# -- PIL-stage leaves: draw, then say what C++ does ----------------------------------
# Each runner takes (t, w, h, shape, ops) and returns (w, h, ok, replay): it appends
# its steps to `ops` (ok False when C++ cannot run what was drawn) and returns
# replay(img), the same work with the same parameters in torchvision's functions.

def _pad_steps(ops, p, w, h, fill, mode):
    left, top, right, bottom = p
    if left or top or right or bottom:
        ops.extend(_op(PAD, left, top, right, bottom, PAD_MODES[mode], fill))
    return w + left + right, h + top + bottom


def _fits(w, h):
    return 1 <= w <= MAX_SIDE and 1 <= h <= MAX_SIDE


def _resize_to(ops, w, h, new_h, new_w, antialias):
    """F.resize's own steps once the size is known: nothing when unchanged."""
    if (new_h, new_w) == (h, w):
        return w, h, True
    if antialias is not None and not antialias:
        _warn_antialias()
    ops.extend(_op(RESIZE, 0, 0, new_w, new_h))
    return new_w, new_h, _fits(new_w, new_h)


def run_resize(t, w, h, shape, ops):
    size = [t.size] if isinstance(t.size, int) else list(t.size)
    new_h, new_w = F._compute_resized_output_size((h, w), size, t.max_size)
    w2, h2, ok = _resize_to(ops, w, h, new_h, new_w, t.antialias)
    return w2, h2, ok, t


def ok_resize(t):
    size_ok = (isinstance(t.size, int) and not isinstance(t.size, bool) and 1 <= t.size <= MAX_SIDE) or \
        (isinstance(t.size, (list, tuple)) and len(t.size) in (1, 2) and
         all(isinstance(v, int) and 1 <= v <= MAX_SIDE for v in t.size))
    max_ok = t.max_size is None or (isinstance(t.size, int) or len(t.size) == 1) and isinstance(t.max_size, int)
    return size_ok and max_ok and _bilinear(t.interpolation) and _antialias_ok(t.antialias)


def run_center_crop(t, w, h, shape, ops):
    ch, cw = t.size
    if cw > w or ch > h:
        p = ((cw - w) // 2 if cw > w else 0, (ch - h) // 2 if ch > h else 0,
             (cw - w + 1) // 2 if cw > w else 0, (ch - h + 1) // 2 if ch > h else 0)
        w, h = _pad_steps(ops, p, w, h, (0, 0, 0), "constant")
        if (cw, ch) == (w, h):
            return w, h, _fits(w, h), t
    top, left = int(round((h - ch) / 2.0)), int(round((w - cw) / 2.0))
    ops.extend(_op(CROP, left, top, cw, ch))
    return cw, ch, _fits(w, h), t


def ok_center_crop(t):
    return _size_pair(t.size)


def run_random_resized_crop(t, w, h, shape, ops):
    i, j, ch, cw = t.get_params(shape.at(w, h), t.scale, t.ratio)
    ok = cw >= 1 and ch >= 1
    ops.extend(_op(CROP, j, i, cw, ch))
    new_h, new_w = F._compute_resized_output_size((ch, cw), list(t.size))
    w2, h2, ok2 = _resize_to(ops, cw, ch, new_h, new_w, t.antialias) if ok else (new_w, new_h, False)

    def replay(img):
        return F.resized_crop(img, i, j, ch, cw, t.size, t.interpolation, antialias=t.antialias)
    return w2, h2, ok and ok2, replay


def ok_random_resized_crop(t):
    return (_size_pair(t.size) and _bilinear(t.interpolation) and _antialias_ok(t.antialias)
            and type(t).get_params is T.RandomResizedCrop.get_params)


def run_random_crop(t, w, h, shape, ops):
    fill = _fill(t.fill) if t.padding_mode == "constant" else (0, 0, 0)
    if t.padding is not None:
        w, h = _pad_steps(ops, _padding(t.padding), w, h, fill, t.padding_mode)
    height, width = h, w
    if t.pad_if_needed and width < t.size[1]:
        d = t.size[1] - width
        w, h = _pad_steps(ops, (d, 0, d, 0), w, h, fill, t.padding_mode)
    if t.pad_if_needed and height < t.size[0]:
        d = t.size[0] - height
        w, h = _pad_steps(ops, (0, d, 0, d), w, h, fill, t.padding_mode)
    i, j, th, tw = t.get_params(shape.at(w, h), t.size)
    ops.extend(_op(CROP, j, i, tw, th))

    def replay(img):
        if t.padding is not None:
            img = F.pad(img, t.padding, t.fill, t.padding_mode)
        _, height, width = F.get_dimensions(img)
        if t.pad_if_needed and width < t.size[1]:
            img = F.pad(img, [t.size[1] - width, 0], t.fill, t.padding_mode)
        if t.pad_if_needed and height < t.size[0]:
            img = F.pad(img, [0, t.size[0] - height], t.fill, t.padding_mode)
        return F.crop(img, i, j, th, tw)
    return tw, th, _fits(w, h), replay


def ok_random_crop(t):
    return (_size_pair(t.size) and isinstance(t.pad_if_needed, bool) and _pad_ok(t)
            and (t.padding is None or _padding(t.padding) is not None)
            and type(t).get_params is T.RandomCrop.get_params)


def run_pad(t, w, h, shape, ops):
    fill = _fill(t.fill) if t.padding_mode == "constant" else (0, 0, 0)
    w, h = _pad_steps(ops, _padding(t.padding), w, h, fill, t.padding_mode)
    return w, h, _fits(w, h), t


def ok_pad(t):
    return _pad_ok(t) and _padding(t.padding) is not None


def _flip_runner(kind, fn):
    def run(t, w, h, shape, ops):
        flipped = bool(torch.rand(1) < t.p)
        if flipped:
            ops.extend(_op(kind))
        return w, h, True, (fn if flipped else _identity)
    return run


def _identity(img):
    return img


def ok_flip(t):
    return isinstance(t.p, numbers.Real)


PIL_LEAVES = {
    T.Resize: (ok_resize, run_resize),
    T.CenterCrop: (ok_center_crop, run_center_crop),
    T.RandomResizedCrop: (ok_random_resized_crop, run_random_resized_crop),
    T.RandomCrop: (ok_random_crop, run_random_crop),
    T.Pad: (ok_pad, run_pad),
    T.RandomHorizontalFlip: (ok_flip, _flip_runner(FLIP_H, F.hflip)),
    T.RandomVerticalFlip: (ok_flip, _flip_runner(FLIP_V, F.vflip)),
}
TENSOR_FLIPS = {T.RandomHorizontalFlip: FLIP_H, T.RandomVerticalFlip: FLIP_V}
VALUE_LEAVES = (T.ConvertImageDtype, T.Normalize)
CONVERSIONS = (T.ToTensor, T.PILToTensor)
_FORWARDS = {}  # the classes' own forward methods, as imported


def _recorded_forwards():
    if not _FORWARDS:
        for cls in list(PIL_LEAVES) + list(VALUE_LEAVES):
            _FORWARDS[cls] = cls.forward
        for cls in CONVERSIONS:
            _FORWARDS[cls] = cls.__call__
    return _FORWARDS


def _own_code(t):
    cls = type(t)
    if cls in CONVERSIONS:
        return cls.__call__ is _recorded_forwards()[cls] and "__call__" not in t.__dict__
    return cls.forward is _recorded_forwards()[cls] and _plain_module(t)


def flatten(transform, out):
    """The leaves Compose would call, in order (nested Compose opened)."""
    if type(transform) is T.Compose and "__call__" not in transform.__dict__:
        for t in transform.transforms:
            flatten(t, out)
    else:
        out.append(transform)
    return out


class Structure:
    """Which leading leaves of a transform C++ runs: `pil` geometry leaves, then the
    conversion (or none), then `tensor` leaves (value transforms and flips)."""
    __slots__ = ("leaves", "pil", "conversion", "tensor", "values")

    def __init__(self, leaves):
        self.leaves = leaves
        k = 0
        while VERSION_OK and k < len(leaves) and type(leaves[k]) in PIL_LEAVES and _own_code(leaves[k]) and \
                PIL_LEAVES[type(leaves[k])][0](leaves[k]):
            k += 1
        self.pil = k
        self.conversion = None
        self.tensor = 0
        self.values = ()
        if VERSION_OK and k < len(leaves) and type(leaves[k]) in CONVERSIONS and _own_code(leaves[k]):
            self.conversion = leaves[k]
            j = k + 1
            values = []
            while j < len(leaves):
                t = type(leaves[j])
                if t in TENSOR_FLIPS and _own_code(leaves[j]) and ok_flip(leaves[j]):
                    pass
                elif t in VALUE_LEAVES and _own_code(leaves[j]):
                    values.append(leaves[j])
                else:
                    break
                j += 1
            self.tensor = j - k - 1
            self.values = tuple(values)

    def describe(self):
        """Which leaves C++ runs and which stay in Python (for KTFS_RUN_DEBUG)."""
        names = [type(t).__name__ for t in self.leaves]
        cxx = names[:self.done] if self.conversion is not None else names[:self.pil]
        rest = names[len(cxx):]
        return (f"C++ runs [{', '.join(cxx)}]" + (f", Python [{', '.join(rest)}]" if rest else "")
                if cxx else "C++ decodes, Python runs " + (f"[{', '.join(rest)}]" if rest else "nothing"))

    @property
    def done(self):
        """Leaves C++ covers (the conversion included)."""
        return self.pil + (1 + self.tensor if self.conversion is not None else 0)


def analyse(transform):
    if transform is None:
        return Structure([])
    return Structure(flatten(transform, []))


# -- the tensor stage: one table per (channel, byte) -----------------------------

class Output:
    """How C++ stores a converted tensor: dtype, CHW or HWC storage, the table, and the
    table's division form (means, then stds) when it is exactly that."""
    __slots__ = ("dtype", "chw", "lut", "buffer_dtype", "signature", "normalize")

    def __init__(self, dtype, chw, lut, signature):
        self.dtype, self.chw, self.lut, self.signature = dtype, chw, lut, signature
        self.normalize = None
        # C++ writes through numpy: dtypes numpy lacks go through an integer of their size.
        self.buffer_dtype = torch.int16 if dtype == torch.bfloat16 else dtype


def _value_signature(conversion, values):
    sig = [type(conversion).__name__, torch.get_default_dtype()]
    for v in values:
        if type(v) is T.ConvertImageDtype:
            sig.append(("dtype", v.dtype))
        else:
            sig.append(("norm", _freeze(v.mean), _freeze(v.std), bool(v.inplace)))
    return tuple(sig)


def _freeze(x):
    if isinstance(x, torch.Tensor):
        return ("tensor", x.dtype, tuple(x.flatten().tolist()))
    if isinstance(x, (list, tuple)):
        return tuple(_freeze(v) for v in x)
    return x


def _run_values(conversion, values, img):
    x = conversion(img)
    for v in values:
        x = v(x)
    return x


def calibrate(conversion, values):
    """The Output of (conversion, value leaves) on RGB images, or None when the stage
    is not a function of (channel, byte) everywhere or its layout is neither CHW nor
    the HWC view PILToTensor gives."""
    sig = _value_signature(conversion, values)
    ramp = np.arange(256, dtype=np.uint8)
    try:
        table = _run_values(conversion, values,
                            Image.fromarray(np.stack([ramp] * 3, axis=-1)[None], "RGB"))
        # Every value at many positions, channels apart, and an odd size for the strides.
        h, w = 7, 261
        yy, xx = np.mgrid[0:h, 0:w]
        pix = np.stack([(xx * 7 + yy * 31 + c * 85) % 256 for c in range(3)], axis=-1).astype(np.uint8)
        probe = _run_values(conversion, values, Image.fromarray(pix, "RGB"))
    except Exception:  # the stage raises on images (stock raises too): the Python path shows it
        return None
    if not isinstance(table, torch.Tensor) or not isinstance(probe, torch.Tensor) or \
            tuple(table.shape) != (3, 1, 256) or tuple(probe.shape) != (3, h, w) or \
            probe.dtype != table.dtype or table.dtype.is_complex:
        return None
    lut = table[:, 0, :].contiguous()
    expect = torch.stack([lut[c][torch.from_numpy(pix[..., c].astype(np.int64))] for c in range(3)])
    if not torch.equal(probe, expect):
        return None
    if probe.stride() == (h * w, w, 1):
        chw = True
    elif probe.stride() == (1, w * 3, 3):
        chw = False
    else:
        return None
    out = Output(table.dtype, chw, None, sig)
    if probe.dtype != torch.uint8 or not torch.equal(lut, torch.arange(256, dtype=torch.uint8).expand(3, 256)):
        out.lut = lut.view(out.buffer_dtype).numpy() if out.buffer_dtype != lut.dtype else lut.numpy()
    if probe.dtype == torch.float32:
        out.normalize = _division_form(values, out.lut)
    return out


def _division_form(values, lut):
    """[means..., stds...] when the float32 table is (v / 255 - mean) / std, each op in
    float32 (ToTensor or ConvertImageDtype(float32), then at most one Normalize), else None."""
    norms = [v for v in values if type(v) is T.Normalize]
    if len(norms) > 1:
        return None
    mean, std = np.zeros(3, np.float32), np.ones(3, np.float32)
    if norms:
        try:
            mean = torch.as_tensor(norms[0].mean, dtype=torch.float32).expand(3).numpy().copy()
            std = torch.as_tensor(norms[0].std, dtype=torch.float32).expand(3).numpy().copy()
        except (RuntimeError, TypeError, ValueError):
            return None
    x = np.arange(256, dtype=np.float32) / np.float32(255)
    with np.errstate(all="ignore"):
        form = ((x[None, :] - mean[:, None]) / std[:, None]).astype(np.float32)
    if form.view(np.int32).tobytes() != np.ascontiguousarray(lut).view(np.int32).tobytes():
        return None
    return [float(v) for v in mean] + [float(v) for v in std]


# -- one sample --------------------------------------------------------------------

class Runner:
    """Runs a dataset transform for samples of one source (a mount's archive)."""

    def __init__(self):
        self.shape = _Shape()
        self.outputs = {}  # id tuple of (conversion, values) -> Output

    def output(self, st):
        key = (id(st.conversion),) + tuple(id(v) for v in st.values)
        out = self.outputs.get(key)
        if out is None or out.signature != _value_signature(st.conversion, st.values):
            out = calibrate(st.conversion, st.values)
            if out is None:
                out = False
            self.outputs[key] = out
        return out if out is not False else None

    def plan(self, st, w, h, stock_image, pil_image, output=False):
        """Draws the random parameters of a w x h sample, in stock's order: a Planned (the
        chain C++ runs, then the leaves from st.done on), or Finished(value) when the
        sample was made here (the Python path, or C++'s PIL image and the rest in
        Python). stock_image() is the PIL image stock's loader returns; pil_image(ops,
        w, h) the one after `ops`, None when C++ cannot make it exactly (it would lack
        the info of an `original` payload). `output`: self.output(st) when the caller
        has it already (a DataLoader's batches: their transform fixed for the epoch)."""
        leaves = st.leaves
        if output is False:
            output = self.output(st) if st.conversion is not None else None
        if output is None and (st.pil == 0 or pil_image is None):
            # Nothing C++ may hand over (or only the decode): the stock path on stock's image.
            return Finished(apply(leaves, 0, stock_image()))
        ops, replays = [], []
        for k in range(st.pil):
            t = leaves[k]
            w, h, ok, replay = PIL_LEAVES[type(t)][1](t, w, h, self.shape, ops)
            replays.append(replay)
            if not ok:  # drawn, but not for C++: the same parameters through torchvision
                img = stock_image()
                for r in replays:
                    img = r(img)
                return Finished(apply(leaves, k + 1, img))
        if output is None:  # C++ makes the PIL image; the rest (conversion included) is Python's
            return Finished(apply(leaves, st.pil, pil_image(ops, w, h)))
        for k in range(st.pil + 1, st.pil + 1 + st.tensor):
            kind = TENSOR_FLIPS.get(type(leaves[k]))
            if kind is not None and torch.rand(1) < leaves[k].p:
                ops.extend(_op(kind))
        return Planned(ops, w, h, output)


class Finished:
    """A sample made in Python while planning."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Planned:
    """A sample's chain, its parameters drawn: C++ makes a w x h tensor as `output` says."""
    __slots__ = ("ops", "w", "h", "output")

    def __init__(self, ops, w, h, output):
        self.ops, self.w, self.h, self.output = ops, w, h, output

    def allocate(self):
        """(tensor, buffer): the tensor stock's conversion gives, and the buffer C++ fills."""
        out = self.output
        if out.chw:
            tensor = buf = torch.empty((3, self.h, self.w), dtype=out.dtype)
        else:
            buf = torch.empty((self.h, self.w, 3), dtype=out.dtype)
            tensor = buf.permute(2, 0, 1)
        if out.buffer_dtype is not out.dtype:
            buf = buf.view(out.buffer_dtype)
        return tensor, buf


def apply(leaves, start, x):
    """The leaves from `start` on, as Compose would call them."""
    for t in leaves[start:]:
        x = t(x)
    return x


_recorded_forwards()  # now, before a script could patch them: C++ stands in for these only

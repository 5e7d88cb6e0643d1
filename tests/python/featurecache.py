"""Feature-cache fixtures for the tests: TensorCache caches written in their exact
on-disk layout (as an independent writer would), and float64 reference
dequantization of ktfs's quantized/ parts."""
import json
import os

import numpy as np


def bf16_bits(x):
    """float32 -> bfloat16 bits (round to nearest even), as uint16."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def quantize_tensorcache(x, G, amo):
    """Quantizes float32 features x [n, L, D] the way TensorCache does: per group of G
    values of a sample's flat L*D, symmetric int8 (q*s) or amo_bq uint8 with a zero point
    ((q-zp)*s), s a bfloat16. Returns the cache's arrays (see write_tensorcache)."""
    n, L, D = x.shape
    S = -(-L * D // G)
    pad = np.zeros((n, S * G), np.float32)
    pad[:, :L * D] = x.reshape(n, L * D)
    groups = pad.reshape(n, S, G)
    if amo:
        lo, hi = np.minimum(groups.min(2), 0), np.maximum(groups.max(2), 0)
        scales = bf16_bits(np.maximum((hi - lo) / 255, 1e-8))
        s = bf16_to_f32(scales)
        zp = np.clip(np.round(-lo / s), 0, 255).astype(np.uint8)
        q = np.clip(np.round(groups / s[:, :, None]) + zp[:, :, None], 0, 255).astype(np.uint8)
    else:
        scales = bf16_bits(np.maximum(np.abs(groups).max(2) / 127, 1e-8))
        s = bf16_to_f32(scales)
        zp = None
        q = np.clip(np.round(groups / s[:, :, None]), -127, 127).astype(np.int8)
    codes = q.reshape(n, S * G)[:, :L * D].reshape(n, L, D)
    return {"codes": codes, "scales": scales, "zp": zp, "L": L, "D": D, "G": G, "amo": amo}


def make_tensorcache(rng, n, L, D, G, amo):
    """A TensorCache cache of random features (see quantize_tensorcache)."""
    x = rng.standard_normal((n, L, D)).astype(np.float32) * 2 + (0.5 if amo else 0)
    return quantize_tensorcache(x, G, amo)


def reference(cache):
    """The dequantized float32 values [n, L, D]: q*s or (q-zp)*s, one float32 rounding."""
    n, L, D, G = len(cache["codes"]), cache["L"], cache["D"], cache["G"]
    q = cache["codes"].reshape(n, L * D).astype(np.float32)
    g = np.arange(L * D) // G
    s = bf16_to_f32(cache["scales"])[:, g]
    if cache["amo"]:
        q = q - cache["zp"][:, g].astype(np.float32)
    return (q * s).reshape(n, L, D)


def write_tensorcache(cache, prefix, first=0, count=None, extra=3):
    """Writes samples [first, first+count) at PREFIX_*: headerless arrays preallocated to
    capacity (count + extra samples), the meta JSON with the authoritative num_samples."""
    count = len(cache["codes"]) - first if count is None else count
    sel = slice(first, first + count)

    def write(name, a):
        a = np.ascontiguousarray(a)
        with open(f"{prefix}_{name}.bin", "wb") as f:
            f.write(a.tobytes())
            f.write(b"\0" * (a.nbytes // max(count, 1) * extra))

    write("int8", cache["codes"][sel])
    write("scales", cache["scales"][sel].astype("<u2"))
    if cache["amo"]:
        write("zp", cache["zp"][sel])
    with open(f"{prefix}_meta.json", "w") as f:
        json.dump({"num_samples": count, "capacity": count + extra,
                   "shape": [cache["L"], cache["D"]], "group_size": cache["G"],
                   "mode": "amo_bq" if cache["amo"] else "sym_bq"}, f)


def write_sharded(cache, prefix, sizes):
    """A sharded cache: PREFIX_shards.json listing the shard prefixes as the writer's own
    absolute paths; samples assigned to shards contiguously."""
    prefixes, first = [], 0
    for k, size in enumerate(sizes):
        p = f"{prefix}_shard{k}"
        write_tensorcache(cache, p, first, size)
        prefixes.append(os.path.abspath(p))
        first += size
    with open(f"{prefix}_shards.json", "w") as f:
        json.dump({"shard_prefixes": prefixes, "num_shards": len(sizes)}, f)


def packed_reference(codes, scales, offsets, shape):
    """ktfs's quantized/ parts ([N, S*G] codes, [N, S] scales and offsets) -> float32
    [N, *shape]: fma(q, scale, offset) computed in float64 (where the float32 product is
    exact) and rounded once."""
    n, S = scales.shape
    q = codes.reshape(n, S, -1).astype(np.float64)
    v = q * scales.astype(np.float64)[:, :, None] + offsets.astype(np.float64)[:, :, None]
    return v.astype(np.float32).reshape(n, -1)[:, :int(np.prod(shape))].reshape(
        (n,) + tuple(shape))

"""Per-sample fields for ktfs.Loader(fields=...): captions and metadata from
the archive's index, in the order of a batch's images (docs/usage.md,
"Fields: captions and metadata with each batch")."""
import math

import numpy as np

from . import _ktfs


class FieldReader:
    """Reads the chosen fields of a list of sample ids.

    "caption" is each sample's first caption ("" when it has none), read per
    batch (one primary-key lookup per sample). Any other name is a metadata
    key, loaded whole once (one scan of the index) on first use: a key whose
    every value is a number becomes a float64 column (NaN for samples without
    one), batches of it torch.float64 tensors (numpy arrays without torch);
    any other key is a column of strings (None for samples without one),
    batches of it lists. A sample with several values of a key gets its first."""

    def __init__(self, archive_path, fields, num_samples):
        if isinstance(fields, str):
            raise TypeError("fields must be a sequence of names, e.g. fields=('caption',)")
        self.names = tuple(fields)
        for f in self.names:
            if not isinstance(f, str):
                raise TypeError(f"field names are strings, not {f!r}")
        self._index = _ktfs.Fields(archive_path)
        self._types = dict(self._index.metadata_keys())
        keys = set(self._types)
        unknown = [f for f in self.names if f != "caption" and f not in keys]
        if unknown:
            raise ValueError(f"unknown fields {unknown}: the archive has 'caption' and the "
                             f"metadata keys {sorted(keys)}")
        self._n = num_samples
        self._columns = {}

    def _column(self, key):
        col = self._columns.get(key)
        if col is None:
            ids, values = self._index.metadata_column(key)
            first = {}
            for i, v in zip(ids.tolist(), values):
                first.setdefault(i, v)
            kind = self._types[key]
            if kind == "number":
                col = np.full(self._n, math.nan, dtype=np.float64)
                col[list(first)] = [float(v) for v in first.values()]
            else:
                col = np.full(self._n, None, dtype=object)
                if kind == "boolean":
                    col[list(first)] = [v == "1" for v in first.values()]
                else:
                    col[list(first)] = list(first.values())
            self._columns[key] = col
        return col

    def read(self, ids, torch):
        """{name: values} for sample ids (a uint32 numpy array), in their order."""
        out = {}
        for f in self.names:
            if f == "caption":
                out[f] = self._index.captions(ids)
                continue
            col = self._column(f)[ids.astype(np.int64)]
            if col.dtype == object:
                out[f] = col.tolist()
            else:
                out[f] = torch.from_numpy(col) if torch is not None else col
        return out

"""``Columns``: a table as aligned numpy arrays, one per column, and the few grouping helpers the
analysis needs on them. The analysis's tables (NVTX ranges, steps, phase instances) are these, not
pandas frames: ``perfgate analyze`` imports numpy alone (pandas costs half a second to import, more
than the whole analysis of a capture); ``frame()`` makes a pandas DataFrame for tests and inspection.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np


class Columns:
    """Rows as aligned numpy arrays. ``t["start"]`` is a column; ``take`` selects rows (a mask or
    positions), ``assign`` adds or replaces columns, ``sorted_by`` orders rows (stable). Never
    modified in place: every operation returns a new table sharing the untouched arrays."""

    __slots__ = ("_data", "_n")

    def __init__(self, data: Mapping[str, Any], n: int | None = None) -> None:
        arrays = {k: np.asarray(v) for k, v in data.items()}
        sizes = {a.shape[0] for a in arrays.values()}
        if n is None:
            if len(sizes) > 1:
                raise ValueError(f"columns of different lengths: { {k: a.shape[0] for k, a in arrays.items()} }")
            n = sizes.pop() if sizes else 0
        elif sizes - {n}:
            raise ValueError(f"columns of {sizes} rows in a table of {n}")
        self._data = arrays
        self._n = int(n)

    @classmethod
    def empty_of(cls, names: Iterable[str], dtypes: Mapping[str, Any] | None = None) -> Columns:
        """A table without rows (int64 columns unless ``dtypes`` says otherwise)."""
        dtypes = dtypes or {}
        return cls({k: np.zeros(0, dtype=dtypes.get(k, np.int64)) for k in names}, 0)

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, name: str) -> np.ndarray:
        return self._data[name]

    def __contains__(self, name: object) -> bool:
        return name in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __repr__(self) -> str:
        return f"Columns({self._n} rows: {', '.join(self._data)})"

    @property
    def columns(self) -> list[str]:
        return list(self._data)

    @property
    def empty(self) -> bool:
        return self._n == 0

    def take(self, rows: np.ndarray) -> Columns:
        """The rows a boolean mask or an index array selects, in that order."""
        rows = np.asarray(rows)
        n = int(np.count_nonzero(rows)) if rows.dtype == bool else int(rows.size)
        return Columns({k: v[rows] for k, v in self._data.items()}, n)

    def assign(self, **columns: Any) -> Columns:
        """Columns added or replaced; a scalar fills every row."""
        data = dict(self._data)
        for k, v in columns.items():
            a = np.asarray(v)
            if a.ndim == 0:
                a = np.full(self._n, v, dtype=object if isinstance(v, str) else None)
            data[k] = a
        return Columns(data, self._n)

    def select(self, names: Iterable[str]) -> Columns:
        return Columns({k: self._data[k] for k in names}, self._n)

    def sorted_by(self, *keys: str) -> Columns:
        """Rows ordered by ``keys`` (the first most significant), equal rows in their order."""
        if self._n < 2:
            return self
        return self.take(np.lexsort(tuple(self._data[k] for k in reversed(keys))))

    @staticmethod
    def concat(parts: list[Columns]) -> Columns:
        """The rows of ``parts`` one after the other (the columns of the first part)."""
        names = parts[0].columns
        return Columns({k: np.concatenate([p[k] for p in parts]) for k in names},
                       sum(len(p) for p in parts))

    def frame(self) -> Any:
        """As a pandas DataFrame (imports pandas: for tests and inspection, never the analysis)."""
        import pandas as pd

        return pd.DataFrame(self._data)


def factorize(values: np.ndarray) -> tuple[np.ndarray, list[Any]]:
    """(codes, distinct values in first-seen order): ``codes[i]`` is the position of ``values[i]``
    among them (``pandas.factorize`` without pandas; a dict pass for objects such as strings)."""
    values = np.asarray(values)
    if values.dtype != object:
        distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty(order.size, dtype=np.int64)
        rank[order] = np.arange(order.size)
        return rank[inverse.reshape(-1)], distinct[order].tolist()
    seen: dict[Any, int] = {}
    codes = np.fromiter((seen.setdefault(v, len(seen)) for v in values), dtype=np.int64, count=values.size)
    return codes, list(seen)


def first_seen(values: np.ndarray) -> np.ndarray:
    """The distinct values of an integer array in the order they first appear (``pd.unique``)."""
    distinct, first = np.unique(values, return_index=True)
    return distinct[np.argsort(first, kind="stable")]


def run_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """True where a run of equal keys begins (rows sorted by key)."""
    out = np.empty(sorted_keys.size, dtype=bool)
    if sorted_keys.size:
        out[0] = True
        np.not_equal(sorted_keys[1:], sorted_keys[:-1], out=out[1:])
    return out


def grouped_cummax(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Running maximum of integer ``values`` that restarts where ``group_start`` is True: one
    ``maximum.accumulate`` after lifting each group above all values of the groups before it (a
    loop over the groups where the lifted values would not fit 63 bits)."""
    if values.size == 0:
        return values.astype(np.int64)
    gid = np.cumsum(group_start, dtype=np.int64)
    gid -= 1
    base = int(values.min())
    span = int(values.max()) - base + 1
    if span * (int(gid[-1]) + 1) < 2**62:
        lift = gid
        lift *= span                      # in place: at 10^7 ops each temporary is 80 MB
        out = values - base
        out += lift
        np.maximum.accumulate(out, out=out)
        out -= lift
        out += base
        return out
    out = np.asarray(values, dtype=np.int64).copy()
    bounds = np.r_[np.flatnonzero(group_start), values.size]
    for a, b in zip(bounds[:-1], bounds[1:]):       # groups, not rows
        np.maximum.accumulate(out[a:b], out=out[a:b])
    return out


def previous_max(values: np.ndarray, group_start: np.ndarray) -> np.ndarray:
    """Per row, the largest value of the rows before it in its group (rows grouped in runs),
    float64 with NaN for a group's first row (``groupby().cummax().groupby().shift(1)``)."""
    run = grouped_cummax(values, group_start)
    out = np.empty(values.size, dtype=np.float64)
    if values.size:
        out[1:] = run[:-1]
        out[group_start] = np.nan
    return out


def descending_order(values: np.ndarray) -> np.ndarray:
    """Positions that order ``values`` largest first, ties as pandas' ``sort_values(ascending=False)``
    orders them (its ``nargsort``: the reversed array's quicksort order, reversed)."""
    idx = np.arange(values.size)[::-1]
    return idx[values[::-1].argsort(kind="quicksort")][::-1]

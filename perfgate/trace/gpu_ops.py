"""GPU operations of an export as aligned numpy columns (``GpuOps``): kernels, memcpys, memsets and
CUDA-graph launches, read once in chunks into preallocated arrays, then joined to the CUDA API
calls that launched them (``perfgate.trace.api_calls.scan_runtime`` fills the ``api_*`` columns)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from perfgate.trace.database import stream_integers
from perfgate.trace.read_ahead import GPU_OP_TABLES, op_columns

KIND_CODES = {"kernel": 0, "memcpy": 1, "memset": 2, "graph": 3}
KERNEL, MEMCPY, MEMSET, GRAPH = 0, 1, 2, 3
PID_MASK = -0x1000000  # globalTid & ~0xFFFFFF == globalPid (as a signed 64-bit integer)
PID_BITS = 0xFFFFFF << 24
# narrow types where the values are small: at 10^7 ops every byte per op is 10 MB
DTYPES = {"kind": np.int8, "device_id": np.int32, "stream_id": np.int32, "pid": np.int32,
          "name_id": np.int32, "copy_kind": np.int8, "src_kind": np.int8, "dst_kind": np.int8,
          "correlation_id": np.int32, "bytes": np.int32}
# read as int32, widened to int64 (once, in place of the column) where a value does not fit
WIDENED = ("correlation_id", "bytes")
CALL_COLUMNS = ("api_start", "api_end", "api_tid")

@dataclass(frozen=True, eq=False)
class GpuOps:
    """One row per GPU operation, tables in the order of GPU_OP_TABLES, each in its export order.
    ``kind``: KIND_CODES; ``-1`` where a column does not apply or the launch was not traced.
    ``api_start, api_end, api_tid``: the launching CUDA API call (same correlationId, globalPid).
    ``pid_rest``: the bits of globalPid other than the pid's (``global_pid``: both), one value
    of no memory where every op has the same (a capture of one host)."""

    kind: np.ndarray
    start: np.ndarray
    end: np.ndarray
    device_id: np.ndarray
    stream_id: np.ndarray
    correlation_id: np.ndarray
    pid_rest: np.ndarray
    pid: np.ndarray
    name_id: np.ndarray
    bytes: np.ndarray
    copy_kind: np.ndarray
    src_kind: np.ndarray
    dst_kind: np.ndarray
    api_start: np.ndarray
    api_end: np.ndarray
    api_tid: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, rows: np.ndarray) -> GpuOps:
        """The ops selected by a boolean mask or an index array, in that order."""
        return GpuOps(**{f.name: getattr(self, f.name)[rows] for f in fields(self)})

    @property
    def global_pid(self) -> np.ndarray:
        """The ops' globalPid (made when asked for: 8 bytes per op)."""
        return (self.pid.astype(np.int64) << 24) | self.pid_rest

    def call_time(self, rows: Any = slice(None)) -> np.ndarray:
        """When each op (of ``rows``: an index array, a mask or a slice) was launched: its API call's
        start, its own start where that was not traced."""
        api = self.api_start[rows]
        return np.where(api >= 0, api, self.start[rows])

    def with_calls(self, api_start: np.ndarray, api_end: np.ndarray, api_tid: np.ndarray) -> GpuOps:
        return replace(self, api_start=api_start, api_end=api_end, api_tid=api_tid)

    def frame(self) -> Any:
        """As a pandas DataFrame (``kind`` categorical by name), for inspection and tests."""
        import pandas as pd

        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "pid_rest"}
        data["global_pid"] = self.global_pid
        data["kind"] = pd.Categorical.from_codes(self.kind.astype(np.int64), categories=list(KIND_CODES))
        return pd.DataFrame(data)


def empty_ops() -> GpuOps:
    return GpuOps(**{f.name: np.zeros(0, dtype=DTYPES.get(f.name, np.int64)) for f in fields(GpuOps)})


def no_call(n: int) -> np.ndarray:
    """An API-call column of ``n`` ops none of which is joined yet: -1 everywhere, no memory."""
    return np.broadcast_to(np.int64(-1), (n,))


def read_gpu_ops(con: Any, tables: frozenset[str], columns: Callable[[str], set[str]],
                 capacity: Callable[[str], int]) -> GpuOps:
    """Every GPU op of the export (API-call columns -1 until joined). Each table is streamed into
    arrays allocated for at most ``capacity(table)`` rows (its largest rowid), so nothing is held
    twice."""
    present = []
    for kind, table in GPU_OP_TABLES.items():
        exprs = op_columns(columns(table)) if table in tables else None
        if exprs is not None:
            present.append((kind, table, exprs))
    n = int(sum(capacity(t) for _, t, _ in present))
    out = {f.name: np.full(n, -1, dtype=DTYPES.get(f.name, np.int64)) for f in fields(GpuOps)
           if f.name not in ("kind", "pid", "pid_rest", *CALL_COLUMNS)}
    out["global_pid"] = np.full(n, -1, dtype=np.int64)
    kind_col = np.zeros(n, dtype=np.int8)
    at = 0
    for kind, table, exprs in present:
        # only the columns the table has: the others stay -1 as allocated (a kernel has no copy kind)
        for chunk in stream_integers(con, table, exprs):
            k = chunk["start"].size
            for dst, values in chunk.items():
                if dst in WIDENED and out[dst].dtype != np.int64 and values.size and not _fits(values):
                    out[dst] = out[dst].astype(np.int64)
                out[dst][at:at + k] = values
            kind_col[at:at + k] = KIND_CODES[kind]
            at += k
    out = {k: v[:at] for k, v in out.items()}
    global_pid = out.pop("global_pid")
    out["pid"] = ((global_pid >> 24) & 0xFFFFFF).astype(np.int32)
    rest = global_pid & ~PID_BITS
    del global_pid
    # one value on one host (nsys sets a hardware/VM id above the pid): held once, not per op
    out["pid_rest"] = np.broadcast_to(rest[0], (at,)) if at and (rest == rest[0]).all() else rest
    return GpuOps(kind=kind_col[:at], **out, **{c: no_call(at) for c in CALL_COLUMNS})


def _fits(values: np.ndarray) -> bool:
    """Whether every value fits in an int32."""
    return bool(values.min() >= -2**31 and values.max() < 2**31)

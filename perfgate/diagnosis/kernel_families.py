"""The kernels of a trace's measured window by place and family (``TraceFacts.kernels_by_family``:
place -> family -> kernel name -> [launches, ms] per step), the families of
perfgate.diagnosis.mechanisms told from each kernel's demangled name.

A short name (``multi_tensor_apply_kernel``, ``softmax_warp_forward``, ``Kernel2``) can stand for
kernels of several families (a fused Adam or a foreach add; a softmax or the loss's log-softmax;
any CUTLASS template): the demangled names of those short names are read kernel by kernel (joined
on process, correlation id and start); every other short name has one family, read once."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from perfgate.analysis import intervals
from perfgate.diagnosis.mechanisms import GRAPH_NAME, PER_PARAMETER, display_name, family_of

if TYPE_CHECKING:
    from perfgate.trace.export import Trace

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
Label = tuple[str | None, str]            # (family without its place, name shown)


def _labels_of_short_names(trace: Trace, lo: int, hi: int) -> dict[int, list[tuple[int, Label]]]:
    """Short name id -> [(demangled id, label)] of the kernels starting in [lo, hi]."""
    from perfgate.trace import database

    rows = database.fetch(trace._con, (
        f"SELECT shortName AS s, coalesce(demangledName, -1) AS d FROM {database.CATALOG}.{KERNEL_TABLE} "
        f"WHERE start >= {int(lo)} AND start <= {int(hi)} GROUP BY shortName, demangledName"))
    out: dict[int, list[tuple[int, Label]]] = {}
    for s, d in zip(rows["s"].tolist(), rows["d"].tolist()):
        short = trace.string(int(s))
        demangled = trace.string(int(d)) if int(d) >= 0 else None
        out.setdefault(int(s), []).append((int(d),
                                           (family_of(demangled or short), display_name(short, demangled))))
    return out


def kernel_labels(trace: Trace, pid: np.ndarray, correlation: np.ndarray, start: np.ndarray,
                  short: np.ndarray) -> tuple[np.ndarray, list[Label]]:
    """Per kernel a code into the labels (family, name shown); from the short names alone where
    the export has no demangled names."""
    labels: list[Label] = []
    index: dict[Label, int] = {}
    codes = np.full(short.size, -1, dtype=np.int64)
    demangled = (trace._con is not None and KERNEL_TABLE in trace.tables
                 and {"demangledName", "shortName"} <= set(trace._columns(KERNEL_TABLE)) and start.size > 0)
    lo, hi = (int(start.min()), int(start.max())) if start.size else (0, 0)
    by_short = _labels_of_short_names(trace, lo, hi) if demangled else {}

    def code(label: Label) -> int:
        if label not in index:
            index[label] = len(labels)
            labels.append(label)
        return index[label]

    one = {s: code(v[0][1]) for s, v in by_short.items() if len({label for _, label in v}) == 1}
    if one and short.size:                 # a lookup table by short-name id: one pass over the kernels
        lut = np.full(max(int(short.max()), max(one)) + 2, -1, dtype=np.int64)
        lut[np.fromiter(one, dtype=np.int64) + 1] = np.fromiter(one.values(), dtype=np.int64)
        codes = lut[np.clip(short.astype(np.int64) + 1, 0, lut.size - 1)]
    ambiguous = [s for s in by_short if s not in one]
    if ambiguous:
        from perfgate.trace import database

        rows = database.fetch(trace._con, (
            f"SELECT globalPid AS g, correlationId AS c, start AS t, coalesce(demangledName, -1) AS d FROM "
            f"{database.CATALOG}.{KERNEL_TABLE} WHERE start >= {lo} AND start <= {hi} AND shortName IN "
            f"({', '.join(str(s) for s in ambiguous)})"))
        label_of = {d: label for s in ambiguous for d, label in by_short[s]}
        found = {(int(g) >> 24 & 0xFFFFFF, int(c), int(t)): code(label_of[int(d)])
                 for g, c, t, d in zip(rows["g"].tolist(), rows["c"].tolist(), rows["t"].tolist(), rows["d"].tolist())}
        for i in np.flatnonzero(np.isin(short, ambiguous)).tolist():
            codes[i] = found.get((int(pid[i]), int(correlation[i]), int(start[i])), -1)
    for i in np.flatnonzero(codes < 0).tolist():   # not matched: its short name alone
        name = trace.string(int(short[i]))
        codes[i] = code((family_of(name), name))
    return codes, labels


def by_family(place: np.ndarray, places: list[str], label: np.ndarray, labels: list[Label], dur_ns: np.ndarray,
              n: int, graph_place: np.ndarray | None = None,
              graph_ns: np.ndarray | None = None) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Place -> family -> name -> [launches, ms] per step, of the kernels with place codes
    ``place`` (into ``places``; -1 outside the measured iterations) and label codes ``label``;
    CUDA graph launches (``graph_place``, ``graph_ns``) as the family ``graph``. Kernels of no
    known family are left out."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    keep = place >= 0
    if keep.any():
        key = place[keep].astype(np.int64) * max(len(labels), 1) + label[keep]
        keys, counts, totals = intervals.group_sums(key, dur_ns[keep])
        for k, c, t in zip(keys.tolist(), counts.tolist(), totals.tolist()):
            where, code = divmod(k, max(len(labels), 1))
            family, name = labels[code]
            if family is None:
                continue
            if family == "elementwise" and family_of("elementwise", places[where]) == PER_PARAMETER.id:
                family = PER_PARAMETER.id
            out.setdefault(places[where], {}).setdefault(family, {})[name] = [c / n, t / 1e6 / n]
    if graph_place is not None and graph_ns is not None and (graph_place >= 0).any():
        keep = graph_place >= 0
        keys, counts, totals = intervals.group_sums(graph_place[keep].astype(np.int64), graph_ns[keep])
        for where, c, t in zip(keys.tolist(), counts.tolist(), totals.tolist()):
            out.setdefault(places[where], {})["graph"] = {GRAPH_NAME: [c / n, t / 1e6 / n]}
    return out

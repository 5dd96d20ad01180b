"""Per-name NVTX range totals that equal ``nsys stats -r nvtx_sum`` (``nvtxsum`` on 2022.4)."""
from __future__ import annotations

import numpy as np

from perfgate.analysis.intervals import group_sums
from perfgate.records.model import RangeStat
from perfgate.trace.columns import Columns, factorize


def range_stats(nvtx: Columns) -> dict[str, RangeStat]:
    """Count and total ns per range name, as nsys prints the name minus a leading ':'.

    Both push/pop and start/end ranges count; an unterminated range ends at the largest NVTX
    timestamp (``Trace.nvtx`` already applies that rule). nsys prints one row per (name, style):
    a name used in both styles is summed here. Ordered by total time, largest first."""
    if nvtx.empty:
        return {}
    # names made and grouped once per distinct name, not once per range
    codes, names = factorize(nvtx["name"])
    key_codes, keys = factorize(np.array([n.removeprefix(":") for n in names], dtype=object))
    _, count, total = group_sums(key_codes[codes], nvtx["end"] - nvtx["start"])   # every key has a range
    # largest total first, then most ranges, then by name
    ranked = sorted(zip(keys, count.tolist(), total.tolist()), key=lambda r: (-r[2], -r[1], r[0]))
    return {str(k): RangeStat(count=c, total_ns=t) for k, c, t in ranked}

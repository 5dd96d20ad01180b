"""Per-name NVTX range totals that equal ``nsys stats -r nvtx_sum`` (``nvtxsum`` on 2022.4)."""
from __future__ import annotations

import pandas as pd

from perfgate.model import RangeStat


def range_stats(nvtx: pd.DataFrame) -> dict[str, RangeStat]:
    """Count and total ns per range name, as nsys prints the name minus a leading ':'.

    Both push/pop and start/end ranges count; an unterminated range ends at the largest NVTX
    timestamp (``Trace.nvtx`` already applies that rule). nsys prints one row per (name, style):
    a name used in both styles is summed here. Ordered by total time, largest first."""
    if nvtx.empty:
        return {}
    names = nvtx["name"].str.removeprefix(":")
    g = (nvtx.assign(key=names, dur=nvtx["end"] - nvtx["start"])
         .groupby("key").agg(count=("dur", "size"), total=("dur", "sum"))
         .sort_values(["total", "count"], ascending=False))
    return {str(k): RangeStat(count=int(c), total_ns=int(t))
            for k, c, t in zip(g.index, g["count"].to_numpy(), g["total"].to_numpy())}

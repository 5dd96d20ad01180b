"""Per-name NVTX range totals that equal ``nsys stats -r nvtx_sum`` (``nvtxsum`` on 2022.4)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from perfgate.model import RangeStat


def range_stats(nvtx: pd.DataFrame) -> dict[str, RangeStat]:
    """Count and total ns per range name, as nsys prints the name minus a leading ':'.

    Both push/pop and start/end ranges count; an unterminated range ends at the largest NVTX
    timestamp (``Trace.nvtx`` already applies that rule). nsys prints one row per (name, style):
    a name used in both styles is summed here. Ordered by total time, largest first."""
    if nvtx.empty:
        return {}
    # names made and grouped once per distinct name, not once per range
    codes, names = pd.factorize(nvtx["name"].to_numpy())
    key_codes, keys = pd.factorize(pd.Index(names).str.removeprefix(":"))
    key = key_codes[codes]
    dur = (nvtx["end"] - nvtx["start"]).to_numpy()
    order = np.argsort(key, kind="stable")
    first = np.flatnonzero(np.r_[True, key[order][1:] != key[order][:-1]])
    g = pd.DataFrame({"count": np.diff(np.r_[first, key.size]), "total": np.add.reduceat(dur[order], first)},
                     index=keys[key[order][first]]).sort_index().sort_values(["total", "count"], ascending=False)
    return {str(k): RangeStat(count=int(c), total_ns=int(t))
            for k, c, t in zip(g.index, g["count"].to_numpy(), g["total"].to_numpy())}

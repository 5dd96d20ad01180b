"""``calibration.json`` read back for ``perfgate calibrate --from-json`` (what ``calibrate`` writes:
the launches' metrics per pool, the injected fractions, the launches' wall times), checked."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from perfgate.errors import PerfgateError

AA = "aa"        # the A/A pool's label


def read_calibration(path: Path) -> dict[str, Any]:
    """A ``calibration.json`` read back for ``--from-json``, checked: ``pools`` (label -> launches'
    metrics, with the A/A pool), ``injected`` (label -> fraction) and ``launch_wall_s``, every value
    a finite, non-negative number; PerfgateError naming the file and the field otherwise."""
    from perfgate.baselines.store import checked_metrics, measured_number
    from perfgate.errors import BaselineError

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PerfgateError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:
        raise PerfgateError(f"{path}: not a calibration.json ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("pools"), dict) or AA not in data["pools"]:
        raise BaselineError(f"{path}: not a calibration.json (expected \"pools\" with an {AA!r} pool)")
    injected = data.get("injected")
    if not isinstance(injected, dict):
        raise BaselineError(f"{path}: injected: expected an object of label -> fraction")
    fractions = {str(k): measured_number(v, f"{path}: injected.{k}") for k, v in injected.items()}
    pools: dict[str, list[dict[str, float]]] = {}
    for label, launches in data["pools"].items():
        if label != AA and label not in fractions:
            raise BaselineError(f"{path}: pools.{label}: no injected fraction for this pool")
        if not isinstance(launches, list):
            raise BaselineError(f"{path}: pools.{label}: expected a list of launches")
        pools[str(label)] = [checked_metrics(m, f"{path}: pools.{label}[{k}]") for k, m in enumerate(launches)]
    walls = data.get("launch_wall_s", [])
    if not isinstance(walls, list):
        raise BaselineError(f"{path}: launch_wall_s: expected a list of seconds")
    seconds = [measured_number(w, f"{path}: launch_wall_s[{k}]") for k, w in enumerate(walls)]
    phase = data.get("phase")
    return {"pools": pools, "injected": fractions, "launch_wall_s": seconds,
            "phase": phase if isinstance(phase, str) else None}

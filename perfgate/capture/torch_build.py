"""Which build of torch a workload runs with, asked only when a capture recorded no NVTX ranges.

A CPU-only build of torch (``torch.version.cuda`` None, no ``torch._C._nvtx``) cannot emit NVTX
ranges: perfgate's autostep hooks and ``perfgate.nvtx`` (without the ``nvtx`` package) then do
nothing, and the trace has no NVTX at all. The analysis can only say that the ranges are missing;
this module names the cause, by running the workload's interpreter once."""
from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.errors import CaptureError

PROBE = ("import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
         "'nvtx': hasattr(torch._C, '_nvtx')}))")
PROBE_TIMEOUT_S = 120.0


def probe(python: str, cwd: Path | None = None, env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``{"version", "cuda", "nvtx"}`` of the torch ``python`` imports; None without torch (or when
    the probe fails)."""
    try:
        done = subprocess.run([python, "-c", PROBE], cwd=cwd, env=None if env is None else dict(env),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False)
        info = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    return info if isinstance(info, dict) else None


def cpu_only_message(info: Mapping[str, Any], python: str) -> str | None:
    """The cause, when ``info`` (from probe) is a torch that cannot emit NVTX ranges."""
    if info.get("cuda") is not None or info.get("nvtx"):
        return None
    return (f"torch {info.get('version')} of {python} is a CPU-only build (torch.version.cuda is None, "
            "torch._C._nvtx is missing): it emits no NVTX ranges, so neither perfgate's autostep hooks nor "
            "perfgate.nvtx can mark steps. Install a CUDA build of torch (PyPI's default Linux wheels are; "
            "they run without a GPU too)")


def has_nvtx_ranges(sqlite: Path) -> bool:
    """Whether an nsys export holds any NVTX event (True when it cannot be read: the analysis
    reports that file's problem)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)) as conn:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='NVTX_EVENTS'").fetchone() is None:
                return False
            return conn.execute("SELECT 1 FROM NVTX_EVENTS LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return True


def check_ranges_recorded(sqlite: Path, python: str, cwd: Path | None = None) -> None:
    """CaptureError naming a CPU-only torch as the cause when the capture at ``sqlite`` recorded no
    NVTX ranges and the workload's interpreter ``python`` has such a torch; nothing otherwise."""
    if not sqlite.is_file() or has_nvtx_ranges(sqlite):
        return
    info = probe(python, cwd)
    cause = cpu_only_message(info, python) if info else None
    if cause:
        raise CaptureError(f"{sqlite}: the capture recorded no NVTX ranges: {cause}")

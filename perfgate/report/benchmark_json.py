"""pytest-benchmark-compatible JSON of the measured step times, in SECONDS (its unit).

One benchmark per workload whose rounds are the measured steps of all current launches, so
``pytest-benchmark compare benchmark.json`` lists them and github-action-benchmark's ``pytest``
tool (which reads ``benchmarks[].fullname``, ``stats.ops``, ``stats.stddev``, ``stats.mean``,
``stats.rounds``) can chart step time over commits. The statistics are computed by
pytest-benchmark's own ``Stats`` class, so every field means exactly what it means there.
"""
from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from pytest_benchmark import __version__ as PYTEST_BENCHMARK_VERSION
from pytest_benchmark.stats import Stats

from perfgate.records.model import MachineInfo, WorkloadResult

GROUP = "perfgate step time"


def fullname(result: WorkloadResult) -> str:
    """The stable benchmark id github-action-benchmark keys its history on."""
    return f"perfgate::{result.name}"


def step_times_s(result: WorkloadResult) -> list[float]:
    """Measured step durations of all current launches, in seconds, launch by launch."""
    return [ms / 1000.0 for a in result.analyses for ms in a.steps.durations_ms]


def _stats(data_s: Sequence[float]) -> dict[str, Any]:
    stats = Stats()
    for value in data_s:
        stats.update(value)
    out: dict[str, Any] = stats.as_dict()
    out["iterations"] = 1
    out["data"] = list(data_s)
    return out


def benchmark_entry(result: WorkloadResult) -> dict[str, Any] | None:
    """The ``benchmarks[]`` entry of one workload, or None when it has no measured steps."""
    data = step_times_s(result)
    if not data:
        return None
    return {
        "group": GROUP,
        "name": result.name,
        "fullname": fullname(result),
        "params": {"variant": result.variant} if result.variant else None,
        "param": result.variant,
        "extra_info": {
            "verdict": str(result.verdict),
            "launches": len(result.analyses),
            "unit": "seconds per training step",
            "metrics": {c.metric: c.current for c in result.comparisons},
            "baseline": {c.metric: c.baseline for c in result.comparisons},
        },
        "options": {"timer": "nsys NVTX step range", "min_rounds": None, "max_time": None,
                    "min_time": None, "warmup": False, "disable_gc": False},
        "stats": _stats(data),
    }


def machine_info_of(results: Sequence[WorkloadResult]) -> dict[str, Any]:
    """pytest-benchmark's machine_info keys that perfgate knows, plus perfgate's MachineInfo."""
    machine: MachineInfo | None = next((r.machine for r in results if r.machine), None)
    if machine is None:
        return {}
    return {"node": machine.hostname, "processor": machine.cpu, "python_version": machine.python,
            "perfgate": asdict(machine)}


def render_benchmark_json(results: Sequence[WorkloadResult],
                          machine_info: Mapping[str, Any] | None = None,
                          commit_info: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The whole document (``json.dump`` it). Workloads without measured steps are left out."""
    entries = [e for e in (benchmark_entry(r) for r in results) if e is not None]
    return {
        "machine_info": dict(machine_info) if machine_info is not None else machine_info_of(results),
        "commit_info": dict(commit_info or {}),
        "benchmarks": entries,
        "datetime": _dt.datetime.now(_dt.timezone.utc).isoformat(),
        "version": PYTEST_BENCHMARK_VERSION,
    }

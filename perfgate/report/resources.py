"""Peak GPU memory and energy of a WorkloadResult as every renderer shows them (issue 18).

Per launch: each memory source's peak, energy per sample and per step, mean and peak power, SM
clock and where the energy came from (perfgate.analysis.resources, perfgate.analysis.energy). Per workload: the
headline memory (allocated, else traced, else reserved: the cell names which) and energy per sample,
baseline -> current, with the current launches' spread (``result.analyses``: measured in this
process, or read back from ``perfgate-report.json``).
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from perfgate.analysis.resources import MEMORY_SOURCES, SHORT_SOURCES
from perfgate.gate.wording import fmt_change, fmt_number
from perfgate.records.resources import LaunchEnergy
from perfgate.records.model import Analysis, MetricComparison, WorkloadResult

ENERGY_METRIC = "energy.per_sample_j"
#: Why energy was measured but not per sample (perfgate.analysis.energy: no batch size).
NO_PER_SAMPLE = ("measured per step, not per sample: no batch size (none in a self-report, none configured: "
                 "batch_size in the workload's table)")
MEMORY_COLUMNS = ("peak GPU memory", "energy/sample")


def _launch(a: Analysis) -> dict[str, Any]:
    return {"metrics": a.metrics(), "energy": a.launch.energy, "gpu_memory": a.launch.gpu_memory}


def launches(result: WorkloadResult) -> list[dict[str, Any]]:
    """One dict per current timing launch: ``metrics``, ``energy`` and ``gpu_memory`` (as analysis
    dicts hold them)."""
    return [_launch(a) for a in result.analyses]


def _row(result: WorkloadResult, metric: str) -> MetricComparison | None:
    return next((c for c in result.comparisons if c.metric == metric), None)


def _current(result: WorkloadResult, metric: str) -> list[float]:
    """The current launches' values of ``metric``: the timing launches', else the profile launch's
    (what only CUDA tracing measures, e.g. the traced peak memory), else none."""
    values = [float(la["metrics"][metric]) for la in launches(result) if metric in la["metrics"]]
    if not values and result.profile is not None and metric in (profile := result.profile.metrics()):
        values = [float(profile[metric])]
    return values


def _headline(result: WorkloadResult, metric: str) -> dict[str, Any] | None:
    """``metric`` baseline -> current, or None when this run did not measure it: a metric the current
    launches lack is absent, whatever the baseline had (a gate run that PASSed without a profile
    launch has no traced memory; a workload without a self-report has no allocator figures)."""
    row = _row(result, metric)
    values = _current(result, metric)
    current = row.current if row is not None and row.current is not None else (
        statistics.median(values) if values else None)
    if current is None:
        return None
    spread = None
    if len(values) >= 2:
        mean = statistics.fmean(values)
        spread = {"min": min(values), "max": max(values),
                  "cv": statistics.stdev(values) / mean if mean else None}
    return {"metric": metric, "baseline": row.baseline if row else None, "current": current,
            "change": row.change if row else None, "verdict": str(row.verdict) if row else None,
            "gating": row.gating if row else None, "launches": values, "spread": spread}


def memory_summary(result: WorkloadResult) -> dict[str, Any] | None:
    """The headline memory metric (its source named), baseline -> current."""
    for metric in MEMORY_SOURCES:
        found = _headline(result, metric)
        if found is not None:
            return {**found, "source": MEMORY_SOURCES[metric], "short": SHORT_SOURCES[metric]}
    return None


def energy_summary(result: WorkloadResult) -> dict[str, Any] | None:
    """Energy per sample, baseline -> current, with the launch-to-launch spread and the source;
    None without NVML (``why`` is then in each launch's ``energy``)."""
    found = _headline(result, ENERGY_METRIC)
    if found is None:
        return None
    sources = sorted({e.report.source for la in launches(result)
                      if (e := la["energy"]) is not None and e.report is not None and e.report.source})
    return {**found, "source": ", ".join(sources) or None}


def unavailable_energy(result: WorkloadResult) -> str | None:
    """Why a result has no energy (the first launch's reason), None when it has some."""
    for la in launches(result):
        e = la["energy"]
        if e is not None and e.unavailable:
            return e.unavailable
    return None


def energy_per_step(result: WorkloadResult) -> bool:
    """Whether a current launch measured energy per step (``energy.per_step_j``)."""
    return bool(_current(result, "energy.per_step_j"))


def measured_resources(result: WorkloadResult) -> bool:
    """Whether a launch of ``result`` (timing or profile) measured peak memory or energy."""
    every = [*launches(result), *([_launch(result.profile)] if result.profile is not None else [])]
    return any(la["gpu_memory"] is not None and la["gpu_memory"].peaks
               or la["energy"] is not None and la["energy"].report is not None and la["energy"].report.source
               for la in every)


def resources_dict(result: WorkloadResult) -> dict[str, Any]:
    """``perfgate-report.json``'s ``resources`` object of one result."""
    profile = None if result.profile is None else _launch(result.profile)
    return {"gpu_memory": memory_summary(result), "energy": energy_summary(result),
            "energy_unavailable": unavailable_energy(result),
            "launches": [_written(la) for la in launches(result)],
            "profile": None if profile is None else _written(profile)}


def _written(la: Mapping[str, Any]) -> dict[str, Any]:
    """A launch's ``gpu_memory`` and ``energy`` as the report writes them."""
    return {"gpu_memory": None if la["gpu_memory"] is None else la["gpu_memory"].to_dict(),
            "energy": None if la["energy"] is None else la["energy"].to_dict()}


def _cell(summary: dict[str, Any] | None, unit: str, digits: int = 3) -> str:
    if summary is None:
        return "-"
    text = f"{fmt_number(summary['current'], digits)} {unit}"
    if summary["baseline"] is not None and summary["change"] is not None:
        text = f"{fmt_number(summary['baseline'], digits)} -> {text} ({fmt_change(summary['change'])})"
    return text


def memory_cell(result: WorkloadResult) -> str:
    """``4,096 -> 4,915 MiB (+20.0 %) allocated`` or ``-``."""
    m = memory_summary(result)
    return "-" if m is None else f"{_cell(m, 'MiB')} {m['short']}"


def energy_cell(result: WorkloadResult) -> str:
    """``0.512 -> 0.574 J (+12.1 %)`` or ``-``."""
    return _cell(energy_summary(result), "J")


def launch_rows(result: WorkloadResult) -> list[list[str]]:
    """Per launch (the timing launches, then the profile launch): memory by source, J/sample, J/step,
    mean/peak W, SM MHz, energy source."""
    rows = []
    labelled = [(str(k), la) for k, la in enumerate(launches(result), 1)]
    if result.profile is not None:
        labelled.append(("profile", _launch(result.profile)))
    for k, la in labelled:
        m, energy = la["metrics"], la["energy"] or LaunchEnergy()
        e = energy.report
        memory = ", ".join(f"{SHORT_SOURCES[x]} {fmt_number(m[x], 4)}" for x in MEMORY_SOURCES if x in m) or "-"
        power = "-" if e is None else f"{fmt_number(e.power_mean_w)} / {fmt_number(e.power_peak_w)}"
        if e is None:
            rows.append([k, memory, "-", "-", power, "-", energy.unavailable or "-"])
        else:
            rows.append([k, memory, fmt_number(e.j_per_sample, 4), fmt_number(e.j_per_step, 4), power,
                         fmt_number(e.sm_mhz_mean, 4), e.source or energy.unavailable or "-"])
    return rows


LAUNCH_HEADER = ("launch", "peak GPU memory (MiB)", "J/sample", "J/step", "power mean / peak (W)",
                 "SM clock (MHz)", "energy source")

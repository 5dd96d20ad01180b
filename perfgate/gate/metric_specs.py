"""The gate's vocabulary: what each metric means to it (unit, direction, default tolerance, whether
it gates), the tolerance grammar (``"5%"``, ``"10% + 0.5"``, ``"+0.02"``, ``"off"``) and the range
of the false-alarm budget ``alpha``. No numpy: perfgate.settings.config parses tolerances and checks
``alpha`` with it before anything runs; perfgate.gate.compare decides verdicts with it.
"""
from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass

from perfgate.errors import ConfigError
from perfgate.records.model import Direction, Tolerance

__all__ = [
    "ALPHA_MAX", "FALLBACK_SPEC", "HIGHER", "LOWER", "METRIC_SPECS", "OFF", "MetricSpec", "alpha_problem",
    "format_tolerance", "parse_tolerance", "spec_for",
]

LOWER = Direction.LOWER_IS_BETTER
HIGHER = Direction.HIGHER_IS_BETTER

#: The tolerance "off": never regressed (the metric is reported only).
OFF = Tolerance(rel=math.inf, abs=None)


# --------------------------------------------------------------------------- metric specs


@dataclass(frozen=True)
class MetricSpec:
    """What a metric means to the gate. ``name_pattern`` is an fnmatch pattern (``phase.*.cpu_ms``).

    ``gating``: a regression of it can fail the build. ``primary``: one of the step-time metrics the
    overall verdict rests on (tested at alpha each); gating non-primary metrics form the secondary
    family (Holm-adjusted). ``log_scale``: compare ratios (log values); False for bounded/absolute
    metrics such as the idle fraction, compared as differences. ``alone``: gates on its own, not
    behind a worse step time (memory, energy: a change can cost them while training is as fast);
    these form their own Holm family (docs/statistics.md).
    """

    name_pattern: str
    unit: str
    direction: Direction
    default_tolerance: Tolerance
    gating: bool
    primary: bool = False
    log_scale: bool = True
    description: str = ""
    alone: bool = False


METRIC_SPECS: tuple[MetricSpec, ...] = (
    MetricSpec("step_time_ms", "ms", LOWER, Tolerance(rel=0.03), gating=True, primary=True,
               description="iteration period of measured steps (step start to next step start, and its GPU work done), "
                           "the median over runs of up to 24 consecutive steps of their mean (per launch; "
                           "analysis/periods.py): a cycle of fast and slow steps gives its mean, one slow step moves it little"),
    MetricSpec("step_time_mean_ms", "ms", LOWER, Tolerance(rel=0.03), gating=True, primary=True,
               description="mean of measured steps: catches a slowdown in one step of ten that the median hides"),
    MetricSpec("step_range_ms", "ms", LOWER, Tolerance(rel=0.03), gating=False,
               description="median duration of the step NVTX ranges themselves (reported only: the "
                           "iteration period is what is gated)"),
    MetricSpec("step_time_p90_ms", "ms", LOWER, Tolerance(rel=0.10), gating=False,
               description="90th percentile of steps (diagnostic for periodic stalls)"),
    MetricSpec("samples_per_s", "samples/s", HIGHER, Tolerance(rel=0.05), gating=False,
               description="throughput; redundant with step time, reported only"),
    MetricSpec("gpu_idle_fraction", "fraction", LOWER, Tolerance(abs=0.03), gating=True, log_scale=False,
               description="share of the window in which a GPU ran nothing; absolute tolerance"),
    MetricSpec("phase.*.cpu_ms", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=True,
               description="CPU time of a phase per step; the floor keeps sub-ms phases from failing on noise"),
    MetricSpec("phase.*.gpu_ms", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=True,
               description="GPU time attributed to a phase per step"),
    MetricSpec("kernels_per_step", "kernels", LOWER, Tolerance(rel=0.10, abs=1.0), gating=False, log_scale=False,
               description="kernel launches per step (diagnostic)"),
    MetricSpec("h2d_ms_per_step", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=False,
               description="host-to-device copy time per step (diagnostic; its cost shows in step time)"),
    MetricSpec("sync_calls_per_step", "calls", LOWER, Tolerance(abs=0.5), gating=False, log_scale=False,
               description="synchronize calls per step (diagnostic: a new sync shows here)"),
    MetricSpec("cuda_api_ms_per_step", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=False,
               description="CUDA API time per step (diagnostic)"),
    # issue 18: memory and energy gate on their own (perfgate/analysis/resources.py says where each comes from)
    MetricSpec("gpu_memory.*_mib", "MiB", LOWER, Tolerance(rel=0.10, abs=64.0), gating=True, alone=True,
               description="peak GPU memory of a launch: allocated/reserved (the workload's torch allocator) or traced (nsys)"),
    MetricSpec("energy.per_sample_j", "J", LOWER, Tolerance(rel=0.05), gating=True, alone=True,
               description="GPU energy per sample over the measured steps (NVML)"),
    MetricSpec("energy.per_step_j", "J", LOWER, Tolerance(rel=0.05), gating=False,
               description="GPU energy per step over the measured steps (NVML; reported only)"),
    MetricSpec("energy.power_*_w", "W", LOWER, Tolerance(rel=0.10), gating=False,
               description="mean and peak GPU power over the measured steps (NVML; reported only)"),
    MetricSpec("step_time_p99_ms", "ms", LOWER, Tolerance(rel=0.10), gating=False,
               description="99th percentile of steps (an inference workload's p99 batch latency)"),
    # issue 19: a multi-process job's ranks (perfgate/analysis/ranks.py); the job's step time gates
    MetricSpec("rank.*.step_time_ms", "ms", LOWER, Tolerance(rel=0.03), gating=False,
               description="median iteration period of one rank's measured steps (reported only)"),
    MetricSpec("rank_skew_ms", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=False,
               description="median over steps of the slowest minus the fastest rank's period (reported only)"),
    # NCCL kernels (perfgate/analysis/comm.py), per step and rank; reported only: the job's step time
    # carries what communication costs, and an NCCL kernel's time includes waiting for the other ranks
    MetricSpec("comm_ms", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=False,
               description="GPU time of NCCL kernels per step and rank (union per GPU; reported only)"),
    MetricSpec("comm_exposed_ms", "ms", LOWER, Tolerance(rel=0.10, abs=0.5), gating=False,
               description="NCCL kernel time per step and rank with no compute kernel running on that GPU"),
    MetricSpec("comm_overlap_fraction", "fraction", HIGHER, Tolerance(abs=0.05), gating=False, log_scale=False,
               description="share of NCCL kernel time overlapped by compute kernels on the same GPU"),
    MetricSpec("comm_kernels_per_step", "kernels", LOWER, Tolerance(rel=0.10, abs=1.0), gating=False,
               log_scale=False, description="NCCL kernels per step and rank (collectives, DDP buckets)"),
    # NCCL's calls from its own NVTX ranges, in every launch (the timing launches too); reported only
    # and said in the summary when beyond tolerance, whatever the verdict (perfgate.diagnosis.comm);
    # gate_alone = ["collectives_per_step"] fails a run on it
    MetricSpec("collectives_per_step", "calls", LOWER, Tolerance(rel=0.10, abs=1.0), gating=False,
               log_scale=False, description="NCCL calls (collectives, sends, receives) per step and rank, "
                                            "from NCCL's NVTX ranges"),
)

FALLBACK_SPEC = MetricSpec("*", "", LOWER, Tolerance(rel=0.10), gating=False,
                           description="a metric perfgate does not know: reported only")


def spec_for(metric: str) -> MetricSpec:
    """The first spec of METRIC_SPECS whose pattern matches ``metric`` (fnmatch), else FALLBACK_SPEC."""
    for spec in METRIC_SPECS:
        if fnmatch.fnmatchcase(metric, spec.name_pattern):
            return spec
    return FALLBACK_SPEC


# --------------------------------------------------------------------------- tolerances

_NUM = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_TOL_RE = re.compile(rf"^(?:(?P<rel>{_NUM})\s*%)?\s*(?:\+\s*(?P<abs>{_NUM}))?$")
_GRAMMAR = "write e.g. '5%', '5% + 0.5' (relative and absolute floor in the metric's unit), '+0.02' or 'off'"


def parse_tolerance(text: str | float | int, where: str = "tolerance") -> Tolerance:
    """Parse "5%", "5%+0.5", "5% + 0.5", "+0.02", "0" (any significant worsening fails) or "off"."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise ConfigError(f"{where}: expected a string like '5%', got {text!r}")
    if not isinstance(text, str):
        if text == 0:
            return Tolerance(rel=0.0)
        raise ConfigError(f"{where}: bare number {text!r} is ambiguous; {_GRAMMAR}")
    s = text.strip().lower()
    if s in ("off", "none"):
        return OFF
    if s in ("0", "0%", "0.0"):
        return Tolerance(rel=0.0)
    m = _TOL_RE.match(s)
    if not s or m is None or (m.group("rel") is None and m.group("abs") is None):
        raise ConfigError(f"{where}: cannot parse tolerance {text!r}; {_GRAMMAR}")
    rel = float(m.group("rel")) / 100.0 if m.group("rel") is not None else None
    abs_ = float(m.group("abs")) if m.group("abs") is not None else None
    if rel is not None and rel >= 10.0:
        raise ConfigError(f"{where}: tolerance {text!r} is over 1000%; {_GRAMMAR}")
    return Tolerance(rel=rel, abs=abs_)


def _fmt_abs(value: float, unit: str) -> str:
    s = f"{value:g}"
    return f"{s} {unit}" if unit and unit != "fraction" else s


def format_tolerance(tolerance: Tolerance, unit: str = "") -> str:
    """'10% + 0.5 ms', '5%', '+0.03', 'off' or '0'."""
    if tolerance.rel is not None and math.isinf(tolerance.rel):
        return "off"
    parts = []
    if tolerance.rel is not None:
        parts.append(f"{tolerance.rel * 100:g}%")
    if tolerance.abs is not None:
        parts.append(("+ " if parts else "+") + _fmt_abs(tolerance.abs, unit))
    return " ".join(parts) if parts else "0"


# --------------------------------------------------------------------------- alpha

#: ``alpha`` is a one-sided false-alarm budget: above 0, below this.
ALPHA_MAX = 0.5


def alpha_problem(alpha: float) -> str | None:
    """What is wrong with ``alpha`` as a false-alarm budget, or None."""
    return None if 0.0 < alpha < ALPHA_MAX else f"expected a number between 0 and {ALPHA_MAX:g}"

"""The records of a launch's steps: ``Summary`` (of a sample of values) and ``StepStats`` (the
measured iterations, their periods and the gated step time), with the ``steps`` object of the
analysis record written and read side by side (``StepStats.to_dict`` / ``from_dict``).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Summary:
    """Summary of a sample of values (one unit for all fields, named by the owner)."""

    count: int
    mean: float
    median: float
    stdev: float          # sample standard deviation (ddof=1); 0.0 when count < 2
    p10: float
    p90: float
    min: float
    max: float


@dataclass(frozen=True)
class StepStats:
    """The measured steps of one launch (warm-up steps excluded). A step's duration is its
    iteration period: from the start of its step range to the start of the next one."""

    range_name: str                   # folded NVTX name of the step range, e.g. "step"
    count: int
    warmup_skipped: int
    durations_ms: tuple[float, ...]   # iteration period per measured step, in time order (per process, concatenated)
    summary_ms: Summary
    window_start_ns: int              # start of the first measured step
    window_end_ns: int                # end of the last measured step's period (the next step's start)
    batch_size: int | None = None
    samples_per_s: float | None = None
    source: str = "nvtx"              # where the steps come from: "nvtx" (the workload's ranges), "autostep", "nsys-pytorch"
    range_durations_ms: tuple[float, ...] = ()   # the step ranges' own durations (reported, not gated)
    range_summary_ms: Summary | None = None

    #: What ``durations_ms`` measures; baselines and results record it, and compare refuses to
    #: compare a period with a range duration.
    basis: str = "period"
    location_ms: float | None = None  # the gated step time (``statistic`` of the durations); None: the median
    statistic: str = "median"         # how ``location_ms`` is computed (analysis/periods.py)
    marker: str = ""                  # which event ends an iteration, and why (analysis/loop.py, steps.py)
    batch_source: str | None = None   # "given" (configuration, self-report) or "dataloader" (autostep)
    interludes: int = 0               # measured periods left out: they held an evaluation or a checkpoint
    interlude_mean_ms: float | None = None

    @property
    def time_ms(self) -> float:
        """The gated step time: ``location_ms``, the summary's median for records without one."""
        return self.summary_ms.median if self.location_ms is None else self.location_ms

    def to_dict(self) -> dict[str, Any]:
        """The ``steps`` object of an analysis record."""
        s, r = self.summary_ms, self.range_summary_ms
        return {"range": self.range_name, "source": self.source, "basis": self.basis, "count": self.count,
                "warmup_skipped": self.warmup_skipped, "median_ms": s.median, "mean_ms": s.mean, "p10_ms": s.p10,
                "p90_ms": s.p90, "stdev_ms": s.stdev, "min_ms": s.min, "max_ms": s.max, "batch_size": self.batch_size,
                "samples_per_s": self.samples_per_s, "durations_ms": list(self.durations_ms),
                "range_median_ms": None if r is None else r.median, "range_mean_ms": None if r is None else r.mean,
                "window_start_ns": self.window_start_ns, "window_end_ns": self.window_end_ns,
                "time_ms": self.location_ms, "statistic": self.statistic, "marker": self.marker,
                "batch_source": self.batch_source, "interludes": self.interludes,
                "interlude_mean_ms": self.interlude_mean_ms}

    @classmethod
    def from_dict(cls, st: Mapping[str, Any], metrics: Mapping[str, Any]) -> StepStats:
        """StepStats of a ``steps`` object. A baseline's launch record keeps no summary and no
        durations there: the summary comes from the record's ``metrics`` (median, mean, p90), the
        other quantiles default to the median. Records from before ``basis`` measured the range."""
        durations = tuple(float(x) for x in st.get("durations_ms") or ())
        median = st.get("median_ms", metrics.get("step_time_ms"))
        mean = st.get("mean_ms", metrics.get("step_time_mean_ms"))
        if mean is None:
            mean = sum(durations) / len(durations) if durations else (median or 0.0)
        median = float(mean if median is None else median)
        count = int(st.get("count") or len(durations))
        summary = Summary(count=count, mean=float(mean), median=median, stdev=float(st.get("stdev_ms") or 0.0),
                          p10=float(st.get("p10_ms") or median),
                          p90=float(st.get("p90_ms") or metrics.get("step_time_p90_ms") or median),
                          min=float(st.get("min_ms") or median), max=float(st.get("max_ms") or median))
        rm = st.get("range_median_ms", metrics.get("step_range_ms"))
        range_summary = None if rm is None else Summary(count, float(st.get("range_mean_ms") or rm), float(rm),
                                                        0.0, float(rm), float(rm), float(rm), float(rm))
        return cls(range_name=str(st.get("range", "step")), count=count,
                   warmup_skipped=int(st.get("warmup_skipped") or 0), durations_ms=durations,
                   summary_ms=summary, window_start_ns=int(st.get("window_start_ns") or 0),
                   window_end_ns=int(st.get("window_end_ns") or 0), batch_size=st.get("batch_size"),
                   samples_per_s=st.get("samples_per_s"), source=str(st.get("source") or "nvtx"),
                   range_summary_ms=range_summary, basis=str(st.get("basis") or "range"),
                   location_ms=_float_or_none(st.get("time_ms", metrics.get("step_time_ms") if "statistic" in st else None)),
                   statistic=str(st.get("statistic") or "median"), marker=str(st.get("marker") or ""),
                   batch_source=st.get("batch_source"), interludes=int(st.get("interludes") or 0),
                   interlude_mean_ms=_float_or_none(st.get("interlude_mean_ms")))


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)

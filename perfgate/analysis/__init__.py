"""Trace -> Analysis: steps, phases, NVTX range totals, GPU idle and GPU work, and the facts the
diagnosis reads from the raw events (TraceFacts): the diagnosis takes the Analysis alone.

``analyze_trace(path, AnalysisOptions())`` is the entry point; docs/analysis.md defines every
number it produces."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from perfgate.analysis.comm import collective_calls, comm_stats
from perfgate.analysis.facts import trace_facts
from perfgate.analysis.gpu_work import gpu_work
from perfgate.analysis.idle import busy_intervals, device_label, gpu_idle
from perfgate.analysis.loop import batch_sizes
from perfgate.analysis.periods import iteration_periods, step_stats
from perfgate.analysis.phases import attribute_gpu_time, phase_instances, phase_stats
from perfgate.analysis.projection import project_ranges
from perfgate.analysis.ranges import range_stats
from perfgate.analysis.ranks import node_spread_ms, rank_stats, relabeled_comm
from perfgate.analysis.steps import SOURCE_NVTX, StepSelection, select_steps
from perfgate.errors import ConfigError
from perfgate.records.model import Analysis
from perfgate.trace.export import Trace, load_trace

DEFAULT_SKIP_STEPS = 5

__all__ = ["AnalysisOptions", "analyze", "analyze_trace", "DEFAULT_SKIP_STEPS"]


@dataclass(frozen=True)
class AnalysisOptions:
    """How to read a trace. ``step_pattern`` None uses the default step names (see steps.py);
    a given pattern must match a whole NVTX message (Python ``re.fullmatch``)."""

    step_pattern: str | None = None
    skip_steps: int = DEFAULT_SKIP_STEPS     # step ranges of each process skipped before measuring
    batch_size: int | None = None
    top_kernels: int = 10
    longest_gaps: int = 5

    def __post_init__(self) -> None:
        if self.skip_steps < 0:
            raise ConfigError(f"skip_steps must be >= 0, got {self.skip_steps}")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ConfigError(f"batch_size must be a positive integer, got {self.batch_size}")
        if self.top_kernels < 0 or self.longest_gaps < 0:
            raise ConfigError("top_kernels and longest_gaps must be >= 0")

    @classmethod
    def given(cls, step_pattern: str | None, skip_steps: int | None, batch_size: int | None) -> AnalysisOptions:
        """The options a workload's table or a command's options give (None: not given, the default)."""
        return cls(step_pattern=step_pattern, batch_size=batch_size,
                   skip_steps=DEFAULT_SKIP_STEPS if skip_steps is None else skip_steps)


def analyze_trace(path: str | Path, options: AnalysisOptions = AnalysisOptions()) -> Analysis:
    """Analyze an nsys SQLite export (or an ``.nsys-rep``, exported to SQLite beside it first)."""
    path = Path(path)
    if path.suffix in (".nsys-rep", ".qdrep"):
        from perfgate.system.nsys import export_sqlite

        path = export_sqlite(path)
    return analyze(load_trace(path), options)


def analyze(trace: Trace, options: AnalysisOptions = AnalysisOptions()) -> Analysis:
    """The analysis of an already loaded trace (pure: the trace's frames are not modified), with
    the TraceFacts of its measured window (``Analysis.facts``)."""
    sel = select_steps(trace.nvtx, options.step_pattern, options.skip_steps, str(trace.path), trace.marks)
    measured = sel.measured
    lo, hi = sel.window
    busy = projected = work = None
    ops = trace.ops
    if len(ops):
        ops, api = trace.gpu((lo, hi))       # joined once, shared with the facts
    period_ns = iteration_periods(sel, ops if len(ops) else None)
    batches = batch_sizes(trace.nvtx, trace.marks) if options.batch_size is None else None
    steps = step_stats(sel, options.batch_size, period_ns, batches)
    total_step_ns = int(period_ns.sum())
    instances = phase_instances(trace.nvtx, measured)
    if len(ops):
        busy = attribute_gpu_time(instances, ops)
        # only the phase instances' own ranges are looked up in the projection
        projected = project_ranges(trace.nvtx.take(np.isin(trace.nvtx["row_id"], instances["row_id"])), ops)
        assert api is not None  # trace.gpu aggregates the API calls of every window it is given
        work = gpu_work(ops, api, trace.strings, trace.memory_events, lo, hi, steps.count,
                        options.top_kernels)
    phases = phase_stats(instances, steps.count, total_step_ns, busy, projected)
    # the devices' busy intervals in the window, shared with the facts
    device_busy = busy_intervals(ops, lo, hi) if len(ops) else None
    idle = gpu_idle(ops, trace.nvtx, lo, hi, options.longest_gaps, device_busy)
    devices = tuple(device_label(d) for d in np.unique(ops.device_id))
    ranks, skew = rank_stats(measured, period_ns, instances, trace.processes)
    spread = node_spread_ms(measured, trace.processes) if trace.processes else None
    nodes = () if spread is None else (f"after that alignment the nodes' k-th measured steps start {spread:.3f} ms "
                                       "apart (median over steps; DDP keeps ranks in step: about the alignment's "
                                       "error)",)
    comm = relabeled_comm(comm_stats(ops, trace.strings, measured), ranks) if len(ops) else None
    ranges = range_stats(trace.nvtx)
    collectives = collective_calls(trace.nvtx, measured, instances, ranges)
    del ops, busy, projected
    facts = trace_facts(trace, steps, work, measured, instances, device_busy)
    return Analysis(
        source=str(trace.path),
        nsys_version=trace.nsys_version,
        schema_version=trace.schema_version,
        steps=steps,
        phases=phases,
        ranges=ranges,
        gpu_idle=idle,
        gpu=work,
        processes=int(np.unique(sel.measured["pid"]).size),
        devices=devices,
        warnings=trace.notes + nodes + sel.warnings + _source_note(sel),
        ranks=ranks,
        rank_skew_ms=skew,
        comm=comm,
        collectives=collectives,
        extra={} if spread is None else {"node_step_spread_ms": spread},
        facts=facts,
    )


def _source_note(sel: StepSelection) -> tuple[str, ...]:
    """Notes on where the steps came from when they are not the workload's own ranges, and on the
    interludes left out."""
    notes: tuple[str, ...] = () if sel.source == SOURCE_NVTX else (f"steps from {sel.description}",)
    if sel.interlude_ns.size:
        n = sel.interlude_ns.size
        notes += (f"{n} interlude{'s' if n != 1 else ''} (evaluation or checkpoint, mean "
                  f"{sel.interlude_ns.mean() / 1e6:.4g} ms) left out of the measured steps",)
    return notes

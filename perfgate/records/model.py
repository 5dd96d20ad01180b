"""Typed records passed between perfgate's stages:

    capture ──► trace ──► analysis ──► compare ──► report
    Capture     Trace     Analysis     WorkloadResult

Records layer (imports only the other modules of perfgate.records). Records are frozen
dataclasses; every field that carries a quantity has its unit in its name (``_ms``, ``_ns``, ``_bytes``, ``_fraction``).
``to_dict()`` gives the JSON record that the CLI, the reports and the baselines write, and
``from_dict()`` beside it reads it back (versioned: perfgate.records.version, docs/schema.md).
"""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field, fields, replace
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfgate.records.confirmation import Confirmation
from perfgate.records.diagnosis import Attribution
from perfgate.records.facts import TraceFacts, stored_facts
from perfgate.records.launch import Launch, split_warnings
from perfgate.records.noise import NoiseReport
from perfgate.records.notes import Note
from perfgate.records.ranks import CollectiveCalls, CommStats, RankStats
from perfgate.records.staleness import Staleness
from perfgate.records.steps import StepStats
from perfgate.records.version import RECORD_VERSION, VERSION_KEY, check_record_version, from_record

# the multi-process and the step records, here with the others
__all__ = []


# --------------------------------------------------------------------------- capture


@dataclass(frozen=True)
class Capture:
    """One process launch of a workload under nsys, and where its artifacts are."""

    workload: str
    run_dir: Path
    command: tuple[str, ...]          # the full nsys command line that ran
    report_path: Path | None          # the .nsys-rep
    sqlite_path: Path | None          # the SQLite export
    log_path: Path                    # workload's stdout+stderr (and nsys's)
    returncode: int
    wall_s: float                     # wall time of the whole nsys run
    self_report: dict[str, Any] | None = None  # the workload's own PERFGATE_SELF_REPORT line, parsed
    retried: tuple[str, ...] = ()     # why nsys failed in the attempts before this one (capture.ATTEMPTS)
    node_sqlite: tuple[Path, ...] = ()  # a job of several nodes: each node's export (sqlite_path: node 0's)


# --------------------------------------------------------------------------- analysis


@dataclass(frozen=True)
class PhaseStats:
    """A phase: NVTX ranges inside the measured steps that share a folded name."""

    name: str
    count: int                        # instances inside the measured window
    cpu_total_ms: float
    cpu_median_ms: float
    cpu_mean_ms: float
    cpu_per_step_ms: float            # cpu_total_ms / measured steps
    share_of_step: float              # cpu_total_ms / total measured step time
    gpu_ms: float | None = None       # GPU time attributed to the phase (see docs), None without GPU activity
    gpu_per_step_ms: float | None = None
    gpu_thread_proj_ms: float | None = None  # nsys nvtx_gpu_proj_sum-style projection by launching thread


@dataclass(frozen=True)
class RangeStat:
    """One line of ``nsys stats -r nvtx_sum``: name exactly as nsys prints it, minus a leading ':'."""

    count: int
    total_ns: int


@dataclass(frozen=True)
class IdleGap:
    device: str
    start_ns: int
    duration_ms: float
    cpu_ranges: tuple[str, ...]       # NVTX ranges open on the CPU during the gap, outermost first


@dataclass(frozen=True)
class GpuIdle:
    """GPU-idle share of the measured window: time in which a GPU ran no kernel, copy or memset."""

    fraction: float                   # over all GPUs: sum of idle time / (window * number of GPUs)
    per_device: dict[str, float]
    window_ms: float
    longest_gaps: tuple[IdleGap, ...] = ()


@dataclass(frozen=True)
class KernelStat:
    name: str
    count: int
    total_ms: float


@dataclass(frozen=True)
class GpuWork:
    """What users look at after step and idle time, per measured step unless named otherwise."""

    kernels_per_step: float
    kernel_ms_per_step: float
    top_kernels: tuple[KernelStat, ...]
    cuda_api_ms_per_step: float
    h2d_bytes_per_step: float
    h2d_ms_per_step: float
    pageable_copies: int              # H2D memcpys from pageable host memory launched in the window
    sync_calls_per_step: float        # cudaStreamSynchronize/cudaDeviceSynchronize (and driver twins)
    peak_memory_bytes: int | None = None   # CUDA_GPU_MEMORY_USAGE_EVENTS (nsys --cuda-memory-usage=true)
    graph_launches_per_step: float = 0.0   # CUDA graph launches (their kernels are not in kernels_per_step)


@dataclass(frozen=True)
class Analysis:
    """Everything perfgate reads out of one trace. ``metrics()`` is what the gate compares."""

    source: str                       # the trace file
    nsys_version: str | None
    schema_version: str | None
    steps: StepStats
    phases: dict[str, PhaseStats]
    ranges: dict[str, RangeStat]
    gpu_idle: GpuIdle | None = None
    gpu: GpuWork | None = None
    processes: int = 1
    devices: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of an analysis record, kept as read
    ranks: tuple[RankStats, ...] = ()  # per process, when 2+ processes have measured steps
    rank_skew_ms: float | None = None  # median over steps of slowest minus fastest rank's period
    comm: CommStats | None = None      # NCCL kernels in the measured steps, when there are any
    collectives: CollectiveCalls | None = None  # NCCL's calls in them (its NVTX ranges), when there are any
    # what the diagnosis reads from the raw events (perfgate.analysis.facts); written inside the
    # diagnosis record, not by to_dict (records/facts.py)
    facts: TraceFacts | None = None
    launch: Launch = field(default_factory=Launch)  # the gate's facts of the launch (records/launch.py)

    def metrics(self) -> dict[str, float]:
        """Flat metric values, named as in METRICS / tolerances (``phase.<name>.cpu_ms``...)."""
        s = self.steps.summary_ms
        out: dict[str, float] = {
            "step_time_ms": self.steps.time_ms,
            "step_time_mean_ms": s.mean,
            "step_time_p90_ms": s.p90,
        }
        if self.steps.range_summary_ms is not None:
            out["step_range_ms"] = self.steps.range_summary_ms.median
        if self.steps.samples_per_s is not None:
            out["samples_per_s"] = self.steps.samples_per_s
        if self.gpu_idle is not None:
            out["gpu_idle_fraction"] = self.gpu_idle.fraction
        for name, p in self.phases.items():
            out[f"phase.{name}.cpu_ms"] = p.cpu_per_step_ms
            if p.gpu_per_step_ms is not None:
                out[f"phase.{name}.gpu_ms"] = p.gpu_per_step_ms
        if self.gpu is not None:
            out["kernels_per_step"] = self.gpu.kernels_per_step
            out["h2d_ms_per_step"] = self.gpu.h2d_ms_per_step
            out["sync_calls_per_step"] = self.gpu.sync_calls_per_step
            out["cuda_api_ms_per_step"] = self.gpu.cuda_api_ms_per_step
            if self.gpu.peak_memory_bytes is not None:
                out["gpu_memory.peak_traced_mib"] = self.gpu.peak_memory_bytes / 2**20
        for r in self.ranks:
            out[f"rank.{r.rank}.step_time_ms"] = r.step_time_ms
        if self.rank_skew_ms is not None:
            out["rank_skew_ms"] = self.rank_skew_ms
        if self.comm is not None:
            out.update({"comm_ms": self.comm.comm_ms, "comm_exposed_ms": self.comm.exposed_ms,
                        "comm_kernels_per_step": self.comm.kernels_per_step})
            if self.comm.overlap_fraction is not None:
                out["comm_overlap_fraction"] = self.comm.overlap_fraction
        if self.collectives is not None:
            out["collectives_per_step"] = self.collectives.per_step
        if len(self.steps.durations_ms) >= 2:
            out["step_time_p99_ms"] = _percentile(self.steps.durations_ms, 0.99)
        # memory from the workload's allocator, energy and power from NVML (perfgate.analysis.resources)
        out.update(self.launch.resource_metrics or {})
        return out

    def to_dict(self) -> dict[str, Any]:
        """The analysis record: the ``perfgate analyze --format json`` object, each analysis of a
        result (``extra`` and the launch's keys merged into the top level); ``from_dict`` reads it back."""
        idle, gpu = self.gpu_idle, self.gpu
        d: dict[str, Any] = {
            VERSION_KEY: RECORD_VERSION, "source": self.source, "nsys_version": self.nsys_version,
            "schema_version": self.schema_version, "steps": self.steps.to_dict(),
            "gpu_idle_fraction": None if idle is None else idle.fraction,
            "gpu_idle": None if idle is None else asdict(idle),
            "phases": {n: asdict(p) for n, p in self.phases.items()},
            "ranges": {n: asdict(r) for n, r in self.ranges.items()},
            "gpu": None if gpu is None else asdict(gpu), "processes": self.processes,
            "devices": list(self.devices), "warnings": [*self.warnings, *self.launch.notes],
            "metrics": self.metrics(),
        }
        if self.ranks:
            d["ranks"] = [asdict(r) for r in self.ranks]
            d["rank_skew_ms"] = self.rank_skew_ms
        if self.comm is not None:
            d["comm"] = asdict(self.comm)
        if self.collectives is not None:
            d["collectives"] = asdict(self.collectives)
        d.update(self.extra)
        d.update(self.launch.to_dict())
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str = "analysis record") -> Analysis:
        """The Analysis of an analysis record (``to_dict``; a baseline's launch record is one whose
        ``steps`` holds no summary: StepStats.from_dict). The launch's keys go to ``launch``
        (``Launch.split``), keys it does not know to ``extra``;
        ``facts`` are those its diagnosis keeps (``stored_facts``). PerfgateError naming ``where``
        for a record of a newer version (perfgate.records.version)."""
        check_record_version(d, where)
        metrics = d.get("metrics") or {}
        own = {f.name for f in fields(cls)} - {"extra", "facts", "launch"} | {VERSION_KEY, "gpu_idle_fraction", "metrics"}
        launch, extra = Launch.split({k: v for k, v in d.items() if k not in own})
        warnings, launch_notes = split_warnings([str(w) for w in d.get("warnings") or ()])
        return cls(
            source=str(d.get("source", "<dict>")), nsys_version=d.get("nsys_version"),
            schema_version=d.get("schema_version"), steps=StepStats.from_dict(d.get("steps") or {}, metrics),
            phases={n: from_record(PhaseStats, {**p, "name": n}) for n, p in (d.get("phases") or {}).items()},
            ranges={n: from_record(RangeStat, r) for n, r in (d.get("ranges") or {}).items()},
            gpu_idle=from_record(GpuIdle, d["gpu_idle"]) if d.get("gpu_idle") else None,
            gpu=from_record(GpuWork, d["gpu"]) if d.get("gpu") else None,
            processes=int(d.get("processes") or 1), devices=tuple(d.get("devices") or ()),
            warnings=warnings, extra=extra, launch=replace(launch, notes=launch_notes),
            ranks=tuple(from_record(RankStats, r) for r in d.get("ranks") or ()),
            rank_skew_ms=d.get("rank_skew_ms"), comm=from_record(CommStats, d["comm"]) if d.get("comm") else None,
            collectives=from_record(CollectiveCalls, d["collectives"]) if d.get("collectives") else None,
            facts=stored_facts(d))


def _percentile(values: tuple[float, ...], q: float) -> float:
    """The ``q`` quantile with linear interpolation between order statistics (numpy's default)."""
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


# --------------------------------------------------------------------------- machine


@dataclass(frozen=True)
class MachineInfo:
    """Identity of the machine a measurement was taken on. ``machine_class`` keys baselines."""

    machine_class: str                # e.g. "nvidia-h100-80gb-hbm3-x1" or "cpu-x86_64"
    gpu_model: str | None
    gpu_count: int
    driver: str | None
    cuda: str | None
    torch: str | None
    nsys: str | None
    hostname: str | None = None
    cpu: str | None = None
    python: str | None = None


# --------------------------------------------------------------------------- compare


class Verdict(str, enum.Enum):
    PASS = "PASS"
    REGRESSED = "REGRESSED"
    IMPROVED = "IMPROVED"
    NEW = "NEW"
    NO_DATA = "NO-DATA"
    INCONCLUSIVE = "INCONCLUSIVE"
    ERROR = "ERROR"

    def __str__(self) -> str:  # "REGRESSED", not "Verdict.REGRESSED"
        return self.value


def fails(verdict: Verdict, strict: bool = False) -> bool:
    """The gate's one rule for whether a verdict fails the build: REGRESSED and ERROR fail; NEW
    (no baseline for this machine class) fails under strict mode. Everything that reports a
    failure (the pytest item, the CLI's exit status, the JSON report, JUnit, annotations, the
    commit status) asks this, through ``WorkloadResult.failed`` or ``compare.Outcome.failed``."""
    return verdict in (Verdict.REGRESSED, Verdict.ERROR) or (strict and verdict is Verdict.NEW)


class Direction(str, enum.Enum):
    LOWER_IS_BETTER = "lower_is_better"
    HIGHER_IS_BETTER = "higher_is_better"


@dataclass(frozen=True)
class Tolerance:
    """A metric fails when it got worse by more than ``rel`` (0.05 = 5 %) AND by more than ``abs``
    (the absolute floor, in the metric's own unit). Either may be None (not checked)."""

    rel: float | None = None
    abs: float | None = None


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    unit: str
    direction: Direction
    baseline: float | None
    current: float | None
    change: float | None              # relative: current / baseline - 1
    delta: float | None               # absolute: current - baseline
    tolerance: Tolerance
    verdict: Verdict
    gating: bool = True               # False: reported, never fails the build
    p_value: float | None = None
    ci_low: float | None = None       # confidence interval of ``change``
    ci_high: float | None = None
    note: str = ""


@dataclass(frozen=True)
class LookRecord:
    """One look of a gate run (perfgate.gate.sequential_looks.run_looks), as its result records it:
    the timing launches taken, the verdict then and the seconds since the run began."""

    launches: int
    verdict: str
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"launches": self.launches, "verdict": self.verdict, "elapsed_s": self.elapsed_s}

    @classmethod
    def from_dict(cls, d: Any) -> LookRecord | None:
        """The look of ``d`` when it is exactly one (``to_dict``'s keys and kinds), else None."""
        if not isinstance(d, Mapping) or set(d) != {"launches", "verdict", "elapsed_s"}:
            return None
        launches, verdict, elapsed = d["launches"], d["verdict"], d["elapsed_s"]
        if (isinstance(launches, int) and not isinstance(launches, bool) and isinstance(verdict, str)
                and isinstance(elapsed, (int, float)) and not isinstance(elapsed, bool)):
            return cls(launches, verdict, elapsed)
        return None


@dataclass(frozen=True)
class WorkloadResult:
    """The outcome for one workload (or variant): verdict, per-metric comparisons, the analyses of
    the current launches, and where the artifacts are. Reports render only from this. Frozen: the
    gate run (perfgate.pipeline.workload_run) makes each stage's result with ``replace``."""

    workload: str
    verdict: Verdict
    comparisons: list[MetricComparison] = field(default_factory=list)
    analyses: list[Analysis] = field(default_factory=list)   # the timing launches
    machine: MachineInfo | None = None
    baseline_path: Path | None = None
    baseline_step_times_ms: list[float] = field(default_factory=list)  # for per-step charts
    run_dir: Path | None = None
    error: str | None = None
    notes: tuple[Note, ...] = ()      # the explanation (which phase regressed and why), one typed note a line
    variant: str | None = None
    wall_s: float | None = None
    strict: bool = False              # judged in strict mode: a missing baseline (NEW) fails
    profile: Analysis | None = None   # the CUDA-traced profile launch (GPU metrics, diagnosis), if taken
    # what the gate run says besides its verdict, each written under the result record's "extra"
    record_command: str | None = None  # how this command records the workload's baseline
    looks: tuple[LookRecord, ...] = ()  # the gate's looks, one after each timing launch
    stopped: str | None = None        # why the launches stopped
    baseline_updated: bool = False    # the run recorded the baseline
    provenance: Staleness | None = None   # how the baseline differs from this run, when it does
    noise: NoiseReport | None = None      # the baseline's noise at the budget
    attribution: Attribution | None = None  # the reasons of a change
    confirmation: Confirmation | None = None  # the base measured in this job, when it was asked to confirm
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of a result record's "extra", kept as read

    @property
    def name(self) -> str:
        return self.workload if not self.variant else f"{self.workload}[{self.variant}]"

    @property
    def failed(self) -> bool:
        """Whether this result fails the build (:func:`fails`)."""
        return fails(self.verdict, self.strict)

"""Versioned baseline files: ``baselines/<workload>/<machine_class>.json``.

One file per workload (variants: ``baselines/<workload>/<variant>/<machine_class>.json``) and
machine class, written only on request, atomically, as diff-friendly JSON (indent 2, sorted
keys, trailing newline). It holds the machine, provenance, each launch's metrics and step
durations, and per-metric summaries across launches. A recording holds its folder's lock
(perfgate.baselines.lock): a second recording of the same baseline at once stops at its start.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from perfgate.analysis.periods import window_location
from perfgate.errors import BaselineError, StaleBaselineError
from perfgate.gate.sequential_looks import launch_noise
from perfgate.records.model import Analysis, GpuIdle, MachineInfo, PhaseStats
from perfgate.records.noise import NOISE_METRIC
from perfgate.records.safe_names import RULE, check_name, is_safe_name
from perfgate.records.version import RECORD_VERSION, VERSION_KEY, check_record_version

FORMAT = "perfgate-baseline"
#: 2: step time is the iteration period (start of a step range to the next one's start); version 1
#: measured the step range's duration, which a period must never be compared with.
VERSION = 2
#: Every launch of a baseline must have it: the gate's verdict rests on it (perfgate.gate.compare).
PRIMARY_METRIC = "step_time_ms"


#: What a baseline's launch record keeps of the analysis record (besides ``metrics``, the measured
#: step durations, ``capture`` and, for 2+ processes, ``ranks``, NCCL ``comm`` and NCCL's ``collectives``): what diagnosis.explain_regression
#: diffs against (phases, GPU work, idle gaps, the rules that fired) ...
LAUNCH_KEYS = ("nsys_version", "phases", "gpu", "gpu_idle", "diagnosis")
#: ... and of its ``steps``: no summary (the metrics hold it) and no durations (``step_durations_ms``).
STEP_KEYS = ("range", "source", "basis", "count", "warmup_skipped", "batch_size", "statistic", "marker",
             "batch_source", "interludes")
#: ... and, where the launch measured them, the machine beside it: its GPU's clocks and its machine
#: state (perfgate.gate.machine_states compares the baseline's with the current launches').
MACHINE_KEYS = ("gpu_clocks", "machine_state")
#: The profile launch's metrics hold no step times (the timing launches measure them), so its
#: ``steps`` keeps its own summary: the diagnosis compares its phases with its own step.
STEP_SUMMARY_KEYS = ("median_ms", "mean_ms", "p10_ms", "p90_ms", "stdev_ms", "min_ms", "max_ms")


@dataclass(frozen=True)
class BaselineLaunch:
    """One recorded launch. Its record (``to_dict``, read back by ``from_dict``) is an analysis
    record (perfgate.records.version, docs/schema.md) reduced to what a later comparison reads: the metrics,
    the measured step durations (``step_durations_ms``), ``steps`` without summary or durations,
    the phases, GPU work and idle, the diagnosis, per-rank statistics, the launch kind and the
    machine beside it."""

    metrics: dict[str, float]
    step_durations_ms: tuple[float, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)   # the record's other keys

    @classmethod
    def of(cls, a: Analysis, metrics: dict[str, float], *, step_summary: bool = False) -> BaselineLaunch:
        """The launch record of ``a``, with ``metrics`` (those of its metrics the baseline keeps):
        its analysis record (``Analysis.to_dict``) projected onto LAUNCH_KEYS and STEP_KEYS (and
        STEP_SUMMARY_KEYS with ``step_summary``: a launch whose metrics hold no step time), and
        MACHINE_KEYS where it has them."""
        record = a.to_dict()
        steps = STEP_KEYS + (STEP_SUMMARY_KEYS if step_summary else ())
        detail = {"capture": record.get("capture", "timing"), "steps": {k: record["steps"][k] for k in steps},
                  **{k: record.get(k) for k in LAUNCH_KEYS}, **{k: record[k] for k in MACHINE_KEYS if k in record},
                  **({"ranks": record["ranks"]} if a.ranks else {}),
                  **({"comm": record["comm"]} if a.comm is not None else {}),
                  **({"collectives": record["collectives"]} if a.collectives is not None else {})}
        return cls(metrics=metrics, step_durations_ms=tuple(a.steps.durations_ms), detail=detail)

    def to_dict(self) -> dict[str, Any]:
        return {VERSION_KEY: RECORD_VERSION, "metrics": self.metrics,
                "step_durations_ms": list(self.step_durations_ms), **self.detail}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> BaselineLaunch:
        """A launch record read back and checked (BaselineError naming ``where``): a version this
        perfgate reads, metrics (checked_metrics), step durations of finite non-negative numbers."""
        if not isinstance(raw, dict):
            raise BaselineError(f"{where} must be an object")
        version = check_record_version(raw, where, BaselineError)
        metrics = checked_metrics(raw.get("metrics"), f"{where}.metrics", profile=raw.get("capture") == "profile")
        durations = raw.get("step_durations_ms", [])
        if not isinstance(durations, list):
            raise BaselineError(f"{where}.step_durations_ms must be a list of numbers")
        launch = cls(metrics=metrics,
                     step_durations_ms=tuple(measured_number(d, f"{where}.step_durations_ms[{i}]")
                                             for i, d in enumerate(durations)),
                     detail={k: v for k, v in raw.items() if k not in ("metrics", "step_durations_ms", VERSION_KEY)})
        return launch.with_current_statistic() if version < 2 else launch

    def with_current_statistic(self) -> BaselineLaunch:
        """A timing launch recorded before record version 2 gated the median period: its
        ``step_time_ms`` is computed again from its step durations the way the gate computes it now
        (analysis/periods.py), so that both sides of a comparison are the same statistic."""
        steps = self.detail.get("steps")
        if not isinstance(steps, dict) or not self.step_durations_ms or "step_time_ms" not in self.metrics:
            return self
        import numpy as np

        durations = np.asarray(self.step_durations_ms, dtype=np.float64)
        one = np.zeros(durations.size, dtype=np.int64)      # the record keeps no process of each duration
        step_ns, statistic = window_location(durations, one)
        metrics = {**self.metrics, "step_time_ms": step_ns}
        return replace(self, metrics=metrics, detail={**self.detail, "steps": {**steps, "statistic": statistic}})

    def analysis(self) -> Analysis:
        """The launch as an Analysis (what the diagnosis compares). What the record does not keep
        comes from its metrics: the steps summary, and for a launch that keeps only metrics (one
        ``perfgate history`` recorded) one step of the mean step time, the phases' CPU time per step
        and the GPU-idle fraction."""
        m = self.metrics
        steps = self.detail.get("steps") or {"count": 1, "basis": "period"}
        if "mean_ms" not in steps and "step_time_mean_ms" not in m:
            steps = {**steps, **_steps_from_phases(self.detail.get("phases") or {})}
        a = Analysis.from_dict({**self.detail, "metrics": dict(m), "steps": steps})
        if not a.phases:
            step_ms = a.steps.summary_ms.mean
            a = replace(a, phases={name: PhaseStats(
                name=name, count=1, cpu_total_ms=v, cpu_median_ms=v, cpu_mean_ms=v, cpu_per_step_ms=v,
                share_of_step=v / step_ms if step_ms > 0 else 0.0, gpu_per_step_ms=m.get(f"phase.{name}.gpu_ms"))
                for name, v in _phase_cpu_ms(m).items()})
        if a.gpu_idle is None and "gpu_idle_fraction" in m:
            a = replace(a, gpu_idle=GpuIdle(fraction=m["gpu_idle_fraction"], per_device={},
                                            window_ms=a.steps.summary_ms.mean * a.steps.count))
        return a


def _phase_cpu_ms(metrics: Mapping[str, float]) -> dict[str, float]:
    """``phase.<name>.cpu_ms`` metrics by phase name."""
    return {key[len("phase."):-len(".cpu_ms")]: float(v) for key, v in metrics.items()
            if key.startswith("phase.") and key.endswith(".cpu_ms")}


@dataclass(frozen=True)
class Baseline:
    """A baseline file's content."""

    workload: str
    machine_class: str
    launches: tuple[BaselineLaunch, ...]
    machine: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    variant: str | None = None
    path: Path | None = None

    @property
    def launch_metrics(self) -> list[dict[str, float]]:
        """Each launch's ``Analysis.metrics()``, as compare.compare_launches takes them."""
        return [dict(launch.metrics) for launch in self.launches]

    @property
    def step_durations_ms(self) -> list[float]:
        """All recorded step durations, launch after launch (for per-step charts)."""
        return [d for launch in self.launches for d in launch.step_durations_ms]

    @property
    def launch_analyses(self) -> list[Analysis]:
        """Each launch as an Analysis (for diagnosis.explain_regression). A launch whose record
        this perfgate cannot read beyond its metrics (checked when loaded) is compared, not explained."""
        out = []
        for launch in self.launches:
            try:
                out.append(launch.analysis())
            except (TypeError, ValueError, AttributeError):
                continue
        return out

    def summaries(self) -> dict[str, dict[str, float]]:
        """Per metric across launches: count, median, mean, stdev (0 for one launch)."""
        return summarize_launches(self.launch_metrics)


def baseline_path(baseline_dir: Path, workload: str, machine_class: str, variant: str | None = None) -> Path:
    """Where the baseline of ``workload`` (and ``variant``) for ``machine_class`` lives: always inside
    ``baseline_dir`` (ConfigError for a name that is not one safe path component, perfgate.records.safe_names)."""
    check_name(workload, "workload")
    check_name(machine_class, "machine class (machine_class / PERFGATE_MACHINE_CLASS)")
    if variant:
        check_name(variant, "variant")
    folder = baseline_dir / workload / variant if variant else baseline_dir / workload
    return folder / f"{machine_class}.json"


def _steps_from_phases(phases: Mapping[str, Any]) -> dict[str, float]:
    """The mean step of a profile launch recorded before its ``steps`` kept a summary (perfgate
    0.1.0 until 2026-11-26): a phase's CPU time per step over its share of the step (both in the
    record); nothing when no phase has a share."""
    for p in phases.values():
        if isinstance(p, Mapping) and (p.get("share_of_step") or 0) > 0:
            mean = float(p.get("cpu_per_step_ms") or 0.0) / float(p["share_of_step"])
            return {"mean_ms": mean, "median_ms": mean}
    return {}


def summarize_launches(launches: Sequence[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per metric: count, median, mean and sample stdev over the launches that have it."""
    names = sorted({m for launch in launches for m in launch})
    out: dict[str, dict[str, float]] = {}
    for name in names:
        values = [float(launch[name]) for launch in launches if name in launch]
        out[name] = {
            "count": len(values),
            "median": statistics.median(values),
            "mean": statistics.fmean(values),
            "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
        }
    return out


def baseline_from_analyses(
    workload: str,
    analyses: Sequence[Analysis],
    machine: MachineInfo,
    provenance: Mapping[str, Any],
    variant: str | None = None,
    *,
    profile: Analysis | None = None,
) -> Baseline:
    """A Baseline recording ``analyses`` (one per timing launch) taken on ``machine``, and the
    ``profile`` launch with only the metrics the timing launches do not measure (its steps are
    those of a CUDA-traced process: not recorded as step times)."""
    timing = [{m: v for m, v in a.metrics().items() if math.isfinite(v)} for a in analyses]
    launches = [BaselineLaunch.of(a, metrics) for a, metrics in zip(analyses, timing)]
    if profile is not None:
        gpu_only = {m: v for m, v in profile_metrics(profile, timing).items() if math.isfinite(v)}
        launches.append(replace(BaselineLaunch.of(profile, gpu_only, step_summary=True), step_durations_ms=()))
    machine_dict = {k: v for k, v in asdict(machine).items() if k != "hostname"}
    return Baseline(workload=workload, variant=variant, machine_class=machine.machine_class,
                    launches=tuple(launches), machine=machine_dict, provenance=dict(provenance))


def profile_metrics(profile: Analysis, timing: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The metrics of a profile launch that the timing launches ``timing`` do not have (GPU idle, GPU
    time per phase, kernels, copies: its step and CPU times are those of a CUDA-traced process)."""
    measured = {name for m in timing for name in m}
    return {name: v for name, v in profile.metrics().items() if name not in measured}


def baseline_document(baseline: Baseline) -> dict[str, Any]:
    """The JSON object written for ``baseline``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "workload": baseline.workload,
        "variant": baseline.variant,
        "machine_class": baseline.machine_class,
        "machine": baseline.machine,
        "provenance": baseline.provenance,
        "launches": [launch.to_dict() for launch in baseline.launches],
        "summary": baseline.summaries(),
        # the launch-to-launch noise of step time (sd of log values), which sizes the gate's test
        # (perfgate.gate.sequential_looks; recomputed from the launches when read)
        "noise": {"metric": NOISE_METRIC, "launch_log_sd": launch_noise(baseline.launch_metrics)},
    }


def write_baseline(path: Path, baseline: Baseline) -> Path:
    """Write ``baseline`` to ``path`` atomically (temp file in the same folder + os.replace)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(baseline_document(baseline), indent=2, sort_keys=True, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_baseline(path: Path) -> Baseline:
    """Read a baseline file; BaselineError (naming ``path``) when it is not one perfgate can use."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise BaselineError(f"{path}: cannot read baseline: {exc.strerror or exc}") from exc
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    except (ValueError, RecursionError) as exc:   # not UTF-8; nested too deep for the parser
        raise BaselineError(f"{path}: not a JSON baseline ({exc})") from None
    return parse_baseline(doc, path)


def parse_baseline(doc: Any, path: Path) -> Baseline:
    """A Baseline from a parsed baseline document (checked: format, version, launches)."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise BaselineError(f"{path}: not a perfgate baseline (expected \"format\": \"{FORMAT}\")")
    version = doc.get("version")
    if version == 1:
        raise StaleBaselineError(
            f"{path}: this baseline (format version 1) measured step time as the step range's duration; "
            "perfgate now measures the iteration period (from one step's start to the next one's, data "
            "loading between steps included), and the two cannot be compared: re-record it on the gate's machine"
        )
    if version != VERSION:
        newer = isinstance(version, int) and not isinstance(version, bool) and version > VERSION
        raise StaleBaselineError(
            f"{path}: baseline format version {version!r} is not supported by this perfgate (it reads version "
            f"{VERSION}){': it was written by a newer perfgate; upgrade perfgate, or' if newer else ';'} "
            "re-record it on the gate's machine"
        )
    raw_launches = doc.get("launches")
    if not isinstance(raw_launches, list) or not raw_launches:
        raise BaselineError(f"{path}: \"launches\" must be a non-empty list")
    launches = [BaselineLaunch.from_dict(raw, f"{path}: launches[{k}]") for k, raw in enumerate(raw_launches)]
    for key in ("workload", "machine_class"):
        if not isinstance(doc.get(key), str):
            raise BaselineError(f"{path}: missing \"{key}\"")
        if not is_safe_name(doc[key]):
            raise BaselineError(f"{path}: {key}: {doc[key]!r} is not a safe name ({RULE})")
    variant = doc.get("variant")
    if variant is not None and not is_safe_name(variant):
        raise BaselineError(f"{path}: variant: {variant!r} is not a safe name ({RULE})")
    for key in ("machine", "provenance"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            raise BaselineError(f"{path}: {key} must be an object")
    return Baseline(
        workload=doc["workload"], variant=variant, machine_class=doc["machine_class"],
        launches=tuple(launches), machine=dict(doc.get("machine") or {}),
        provenance=dict(doc.get("provenance") or {}), path=path,
    )


def checked_metrics(metrics: Any, where: str, *, profile: bool = False) -> dict[str, float]:
    """One launch's metrics as read back from a baseline or result file: an object of finite,
    non-negative numbers that has PRIMARY_METRIC (a ``profile`` launch holds only GPU metrics:
    its step time is not recorded), else BaselineError naming ``where``."""
    if not isinstance(metrics, dict) or (not metrics and not profile):
        raise BaselineError(f"{where} must map metric names to numbers")
    checked = {str(m): measured_number(v, f"{where}.{m}") for m, v in metrics.items()}
    for m, v in checked.items():   # a step takes time: 0 ms would fail (or pass) every comparison
        if m.startswith("step_time") and v <= 0:
            raise BaselineError(f"{where}.{m}: expected a positive step time, got {metrics[m]!r}")
    if PRIMARY_METRIC not in checked and not profile:
        raise BaselineError(f"{where} has no {PRIMARY_METRIC} (the metric the gate rests on)")
    return checked


def measured_number(value: Any, where: str) -> float:
    """``value`` as a float when it is a finite, non-negative number (every metric and duration
    perfgate records is one), else BaselineError naming ``where``: a NaN, an infinity or a negative
    time read back would turn a comparison into NO-DATA or a false verdict."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BaselineError(f"{where}: expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0:
        raise BaselineError(f"{where}: expected a finite, non-negative number, got {value!r}")
    return number


def check_identity(baseline: Baseline, workload: str, variant: str | None, machine_class: str) -> None:
    """StaleBaselineError when the baseline file found for ``workload`` (``variant``) on ``machine_class``
    says it is another workload's, variant's or machine class's (copied or renamed by hand): its
    numbers would gate this workload against another one's."""
    for field_name, found, wanted in (("workload", baseline.workload, workload),
                                      ("variant", baseline.variant, variant),
                                      ("machine_class", baseline.machine_class, machine_class)):
        if found != wanted:
            raise StaleBaselineError(
                f"{baseline.path}: {field_name}: the file is for {found!r}, this run gates {wanted!r} "
                f"(a baseline copied from another workload or machine?): re-record it on the gate's machine")

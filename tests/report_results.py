"""WorkloadResults for the report tests (imported by tests/report/test_report_*.py and test_github.py).

``real_results`` captures a tiny NVTX-instrumented script with the real nsys (three baseline
launches, two launches with an injected sleep in ``forward``), analyses the traces with
``perfgate.analysis.analyze_trace`` and compares them with ``perfgate.gate.compare.compare_launches``:
results the way the pipeline makes them. They are made once per test session.

``make_result`` builds a small result by hand, only for the renderers' size-limit and escaping
checks (hundreds of workloads, odd characters), where a capture per workload would be absurd.
"""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

from cpu_nvtx import NVTX
from nsys_run import run_supervised
from perfgate.records.model import (
    Analysis, Direction, MachineInfo, MetricComparison, PhaseStats, Tolerance, Verdict, WorkloadResult,
)
from perfgate.records.notes import SUMMARY, Note, notes_from_message
from perfgate.records.steps import StepStats, Summary

SKIP_STEPS = 2
STEPS = 14
BATCH_SIZE = 32
PHASE_MS = {"data_load": 2.0, "forward": 4.0, "backward": 4.0, "optimizer": 1.0}
INJECTED_FORWARD_MS = 20.0

SCRIPT = f"""
import sys, time
{NVTX}
extra_forward_s = float(sys.argv[1]) / 1000.0
phase_s = {{name: ms / 1000.0 for name, ms in {PHASE_MS!r}.items()}}
for _ in range({STEPS}):
    nvtx.range_push("step")
    for name, seconds in phase_s.items():
        nvtx.range_push(name)
        time.sleep(seconds + (extra_forward_s if name == "forward" else 0.0))
        nvtx.range_pop()
    nvtx.range_pop()
"""

_CACHE: dict[str, list[WorkloadResult]] = {}


def _nsys_cmd(nsys: str, out: Path, script: Path, extra_forward_ms: float) -> list[str]:
    return [nsys, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--export=sqlite",
            "-o", str(out), "-f", "true", sys.executable, str(script), str(extra_forward_ms)]


def capture_all(nsys: str, root: Path) -> dict[str, Path]:
    """Five real captures, one after the other (parallel ones disturb each other's sleeps on a
    2-core machine): base1..3 (plain), slow1, slow2 (sleep injected into forward). Three baseline
    launches give the per-phase (Holm-adjusted) tests enough degrees of freedom."""
    script = root / "tiny_train.py"
    script.write_text(SCRIPT)
    plan = {"base1": 0.0, "base2": 0.0, "base3": 0.0, "slow1": INJECTED_FORWARD_MS, "slow2": INJECTED_FORWARD_MS}
    sqlite: dict[str, Path] = {}
    for name, extra_ms in plan.items():
        (root / name).mkdir()
        proc = run_supervised(_nsys_cmd(nsys, root / name / "trace", script, extra_ms), cwd=root / name, timeout=300)
        (root / name / "workload.log").write_bytes(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            raise RuntimeError(f"nsys capture {name} failed:\n{(proc.stdout + proc.stderr).decode(errors='replace')[-2000:]}")
        sqlite[name] = root / name / "trace.sqlite"
    return sqlite


def real_results(nsys: str, root: Path) -> list[WorkloadResult]:
    """Made once: tiny_regressed (the slow launches against the plain ones), tiny_steady (an A/A
    comparison: the plain launches against themselves) and tiny_new (no baseline)."""
    if "results" in _CACHE:
        return _CACHE["results"]
    from perfgate.analysis import AnalysisOptions, analyze_trace
    from perfgate.gate.compare import compare_launches

    traces = capture_all(nsys, root)
    options = AnalysisOptions(skip_steps=SKIP_STEPS, batch_size=BATCH_SIZE)
    analyses = {name: analyze_trace(path, options) for name, path in traces.items()}
    machine = MachineInfo(machine_class="cpu-x86_64", gpu_model=None, gpu_count=0, driver=None,
                          cuda=None, torch=None, nsys="2022.4", hostname="report-tests")

    def result(name: str, base: list[str] | None, cur: list[str]) -> WorkloadResult:
        outcome = compare_launches([analyses[b].metrics() for b in base] if base else None,
                                   [analyses[c].metrics() for c in cur])
        return WorkloadResult(
            workload=name, verdict=outcome.verdict, comparisons=list(outcome.comparisons),
            analyses=[analyses[c] for c in cur], machine=machine,
            baseline_step_times_ms=[ms for b in (base or []) for ms in analyses[b].steps.durations_ms],
            run_dir=root / cur[0], notes=(Note(SUMMARY, outcome.summary),),
        )

    _CACHE["results"] = [
        result("tiny_regressed", ["base1", "base2", "base3"], ["slow1", "slow2"]),
        result("tiny_steady", ["base1", "base2", "base3"], ["base1", "base2", "base3"]),
        result("tiny_new", None, ["base1"]),
    ]
    return _CACHE["results"]


# ----------------------------------------------------------------------------- hand-built


def _summary(values: list[float]) -> Summary:
    return Summary(count=len(values), mean=statistics.fmean(values), median=statistics.median(values),
                   stdev=statistics.stdev(values) if len(values) > 1 else 0.0, p10=min(values),
                   p90=max(values), min=min(values), max=max(values))


def make_analysis(step_ms: list[float], phase_ms: dict[str, float], batch_size: int = 32) -> Analysis:
    """An Analysis with the given step durations and per-step phase CPU times."""
    n = len(step_ms)
    total = sum(step_ms)
    steps = StepStats(range_name="step", count=n, warmup_skipped=0, durations_ms=tuple(step_ms),
                      summary_ms=_summary(step_ms), window_start_ns=0, window_end_ns=int(total * 1e6),
                      batch_size=batch_size, samples_per_s=batch_size * n / (total / 1000.0))
    phases = {name: PhaseStats(name=name, count=n, cpu_total_ms=ms * n, cpu_median_ms=ms, cpu_mean_ms=ms,
                               cpu_per_step_ms=ms, share_of_step=ms * n / total)
              for name, ms in phase_ms.items()}
    return Analysis(source="hand-built", nsys_version=None, schema_version=None, steps=steps,
                    phases=phases, ranges={})


def make_comparison(metric: str, baseline: float, current: float, verdict: Verdict,
                    unit: str = "ms", rel: float | None = 0.1) -> MetricComparison:
    return MetricComparison(metric=metric, unit=unit, direction=Direction.LOWER_IS_BETTER,
                            baseline=baseline, current=current, change=current / baseline - 1,
                            delta=current - baseline, tolerance=Tolerance(rel=rel), verdict=verdict)


def make_result(name: str, verdict: Verdict, *, message: str = "", error: str | None = None,
                forward_ms: float = 4.0) -> WorkloadResult:
    """A one-launch result whose ``phase.forward.cpu_ms`` is ``forward_ms`` against a 4 ms baseline."""
    fwd_verdict = Verdict.REGRESSED if verdict is Verdict.REGRESSED else Verdict.PASS
    step = 10.0 + forward_ms - 4.0
    return WorkloadResult(
        workload=name, verdict=verdict,
        comparisons=[make_comparison("step_time_ms", 10.0, step, fwd_verdict, rel=0.05),
                     make_comparison("phase.forward.cpu_ms", 4.0, forward_ms, fwd_verdict),
                     make_comparison("phase.backward.cpu_ms", 4.0, 4.0, Verdict.PASS)],
        analyses=[make_analysis([step] * 5, {"forward": forward_ms, "backward": 4.0})],
        baseline_step_times_ms=[10.0] * 5, notes=notes_from_message(message), error=error,
        run_dir=Path("/runs") / name,
    )

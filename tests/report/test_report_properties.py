"""Every renderer over results with any optional field absent (issue 30, build 8): a property-based
test (hypothesis) of the report layer.

The results are made of real launches: the committed H100 captures analysed as the pipeline does
(tests/absent_figures.py: timing launches, the CUDA-traced profile launch, NVML energy) and the
committed CPU capture, each with its self-report's figures (batch size, torch allocator peaks) or
without, compared by the real ``compare_launches``. Hypothesis then leaves out any optional part:
GPU work, GPU idle, phases, batch size, the step range, energy, memory, the self-report, the
profile launch, the baseline, every optional number of a comparison, the machine, paths, messages.

Whatever it leaves out, every renderer renders (terminal summary and failure message, Markdown job
summary and PR comment, JUnit, annotations, benchmark JSON, ``perfgate-report.json`` read back and
rendered again, commit statuses, the history line, charts), says the same after the round trip
through ``perfgate-report.json``, shows ``-`` for what was not measured and never ``nan``.
"""
from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from absent_figures import H100, launch
from perfgate.analysis.resources import MEMORY_SOURCES, attach_resources
from perfgate.commands.history import entry_for
from perfgate.gate.compare import compare_launches
from perfgate.baselines.store import profile_metrics
from perfgate.records.diagnosis import Attribution
from perfgate.records.model import Analysis, LookRecord, MachineInfo, MetricComparison, Verdict, WorkloadResult
from perfgate.records.notes import NOTE, SUMMARY, Note
from perfgate.report.annotations import render_annotations
from perfgate.report.benchmark_json import render_benchmark_json
from perfgate.report.github import status_payload
from perfgate.report.json_report import render_report_json
from perfgate.report.json_report import results_from_report
from perfgate.report.junit import render_junit
from perfgate.report.markdown import render_markdown, render_pr_comment
from perfgate.report.resources import energy_summary, memory_summary
from perfgate.report.terminal import failure_message, render_summary
from layout import TESTS

CPU = MachineInfo(machine_class="cpu-x86_64", gpu_model=None, gpu_count=0, driver=None, cuda=None, torch=None,
                  nsys="2022.4.2.1")
GIB = 2**30
SELF_REPORT = {"batch_size": 64, "gpu_memory": {"max_allocated_bytes": 4 * GIB, "max_reserved_bytes": 6 * GIB}}
OPTIONAL_NUMBERS = ("baseline", "current", "change", "delta", "p_value", "ci_low", "ci_high")
SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@functools.lru_cache(maxsize=None)
def _cpu() -> Analysis:
    from perfgate.analysis import AnalysisOptions, analyze_trace

    return analyze_trace(TESTS / "fixtures" / "traces" / "cpu-train-loop" / "trace.sqlite",
                         AnalysisOptions(skip_steps=1))


@functools.lru_cache(maxsize=None)
def _launch(case: str, kind: str, k: int, reported: bool, energy: bool) -> Analysis:
    """A real launch, with its self-report's figures (batch size, allocator peaks) when ``reported``."""
    if case == "cpu":
        a = _cpu()
        return a if not reported else replace(a, steps=replace(a.steps, batch_size=64, samples_per_s=64.0 * 1000
                                                                / a.steps.summary_ms.mean))
    a = launch(case, kind, k, energy=energy)
    if not reported:
        return a
    from absent_figures import _analysed, nvml_samples

    _, start, _ = _analysed(case)
    steps = replace(a.steps, batch_size=64, samples_per_s=64.0 * 1000 / a.steps.summary_ms.mean)
    with_report = replace(a, steps=steps, launch=replace(a.launch, self_report=SELF_REPORT))
    return attach_resources(with_report, nvml_samples(a, start) if energy else [], start)


@st.composite
def analyses(draw: st.DrawFn, kind: str = "timing") -> Analysis:
    """A real launch with any of its optional parts left out."""
    case = draw(st.sampled_from(["gpu-resnet-pinned", "gpu-resnet-pageable", "cpu"]))
    a = _launch(case, kind, draw(st.integers(0, 2)), draw(st.booleans()), draw(st.booleans()))
    if draw(st.booleans()):
        a = replace(a, gpu=None)
    if draw(st.booleans()):
        a = replace(a, gpu_idle=None)
    if draw(st.booleans()):
        a = replace(a, phases={} if draw(st.booleans()) else
                    {n: replace(p, gpu_ms=None, gpu_per_step_ms=None) for n, p in a.phases.items()})
    if draw(st.booleans()):
        a = replace(a, steps=replace(a.steps, batch_size=None, samples_per_s=None))
    if draw(st.booleans()):
        a = replace(a, steps=replace(a.steps, range_summary_ms=None, range_durations_ms=()))
    launch = a.launch
    for key in ("energy", "gpu_memory", "resource_metrics", "self_report", "diagnosis", "stability", "kind"):
        if getattr(launch, key) is not None and draw(st.booleans()):
            launch = replace(launch, **{key: None})
    if launch.resource_metrics is not None:
        launch = replace(launch, resource_metrics={m: v for m, v in launch.resource_metrics.items() if draw(st.booleans())})
    return replace(a, launch=launch)


def _thinned(c: MetricComparison, draw: st.DrawFn) -> MetricComparison:
    return replace(c, **{name: None for name in OPTIONAL_NUMBERS if draw(st.booleans())})


def gate_metrics(timing: list[Analysis], profile: Analysis | None) -> list[dict[str, float]]:
    """One side's launches as the gate compares them: each timing launch's metrics, then the
    profile launch's that they do not measure (perfgate.gate.sequential_looks.run_looks)."""
    metrics = [a.metrics() for a in timing]
    return metrics if profile is None else [*metrics, profile_metrics(profile, metrics)]


ATTRIBUTION = Attribution(step_mean_delta_ms=2.0, step_median_delta_ms=2.0, phase_deltas=(), unexplained_delta_ms=0.0,
                          gpu_idle_delta_ms=None, idle_by_phase_delta_ms={}, new_findings=(), resolved_findings=(),
                          kernel_deltas=(), first_reason="forward +20 %")


@st.composite
def results(draw: st.DrawFn) -> WorkloadResult:
    current = draw(st.lists(analyses(), min_size=0, max_size=3))
    profile = draw(st.none() | analyses("profile"))
    baseline = draw(st.none() | st.lists(analyses(), min_size=1, max_size=3))
    comparisons: list[MetricComparison] = []
    if current or profile is not None:
        outcome = compare_launches(gate_metrics(baseline, None) if baseline else None,
                                   gate_metrics(current, profile) if current else gate_metrics([profile], None))
        comparisons = [_thinned(c, draw) if draw(st.booleans()) else c for c in outcome.comparisons
                       if draw(st.integers(0, 4))]   # some rows left out
    notes = st.sampled_from([(), (Note(SUMMARY, "step_time_ms 10 -> 12 ms"),
                                  Note(NOTE, "launch 0: measured steps are not stable"))])
    extra = {key: value for key, value in {
        "baseline_updated": True, "record_command": "perfgate baseline update w",
        "looks": (LookRecord(1, "PASS", 1.0),), "stopped": "decided",
        "attribution": ATTRIBUTION}.items() if draw(st.booleans())}
    return WorkloadResult(
        workload="w", verdict=draw(st.sampled_from(list(Verdict))), comparisons=comparisons, analyses=current,
        machine=draw(st.sampled_from([None, CPU, H100])),
        baseline_path=draw(st.sampled_from([None, Path("baselines/w/cpu-x86_64.json")])),
        baseline_step_times_ms=draw(st.sampled_from([[], [10.0, 11.0, 10.5]])),
        run_dir=draw(st.sampled_from([None, Path(".perfgate/runs/x-w")])),
        error=draw(st.sampled_from([None, "nsys exited with code 1"])), notes=draw(notes),
        variant=draw(st.sampled_from([None, "amp"])), wall_s=draw(st.sampled_from([None, 12.5])),
        **extra, strict=draw(st.booleans()), profile=profile)


def _measured(r: WorkloadResult, metric: str) -> bool:
    """Whether the run measured ``metric``: a current launch, the profile launch or a comparison's current."""
    launches = [*r.analyses, *([r.profile] if r.profile is not None else [])]
    return (any(metric in a.metrics() for a in launches)
            or any(c.metric == metric and c.current is not None for c in r.comparisons))


def _named(rs: list[WorkloadResult]) -> list[WorkloadResult]:
    """The results under names of their own, as a run's are (a chart file is named after its workload)."""
    return [replace(r, workload=f"w{k}") for k, r in enumerate(rs)]


def _rendered(rs: list[WorkloadResult], tmp: Path) -> dict[str, Any]:
    """Every text renderer's output for ``rs`` (what ``write_all`` writes, less the charts)."""
    return {
        "summary": render_summary(rs), "failure": [failure_message(r) for r in rs],
        "markdown": render_markdown(rs), "comment": render_pr_comment(rs), "junit": render_junit(rs),
        "annotations": render_annotations(rs),
        "benchmark": json.dumps(render_benchmark_json(rs), default=str, allow_nan=False),
        "statuses": [status_payload(r) for r in rs],
        "history": [json.dumps(entry_for(r, tmp, False), allow_nan=False) for r in rs],
    }


@SETTINGS
@given(st.lists(results(), min_size=1, max_size=3))
def test_every_renderer_renders_any_result_with_parts_absent(rs: list[WorkloadResult]) -> None:
    _check(_named(rs))


def test_every_renderer_renders_a_gpu_pass_without_a_profile_launch() -> None:
    """The shape that crashed (``statistics.median`` of nothing in report/resources.py): a workload
    without a self-report, whose baseline's profile launch traced memory, PASSes without one."""
    timing = [launch("gpu-resnet-pinned", "timing", k) for k in range(3)]
    baseline = gate_metrics(timing, launch("gpu-resnet-pinned", "profile"))
    outcome = compare_launches(baseline, gate_metrics(timing[:1], None))
    assert outcome.verdict is Verdict.PASS
    assert outcome.row("gpu_memory.peak_traced_mib").current is None
    _check([WorkloadResult(workload="w", verdict=outcome.verdict, comparisons=outcome.comparisons,
                           analyses=timing[:1], machine=H100)])


def _check(rs: list[WorkloadResult]) -> None:
    tmp = Path("/nonexistent-perfgate-root")    # no git there: the history line has no commit
    out = _rendered(rs, tmp)
    text = "\n".join(str(v) for v in out.values())
    assert not re.search(r"\bnan\b", text, flags=re.I)
    doc = json.loads(json.dumps(render_report_json(rs), default=str))
    back = results_from_report(doc)
    assert render_summary(back) == out["summary"]         # perfgate report --from says what the run said
    assert render_markdown(back) == out["markdown"]
    table = out["summary"][3:3 + len(rs)]
    for r, row, result_json in zip(rs, table, doc["results"]):
        cells = re.split(r"\s{2,}", row)
        memory, energy = memory_summary(r), energy_summary(r)
        assert (memory is None) == (not any(_measured(r, m) for m in MEMORY_SOURCES))
        assert (energy is None) == (not _measured(r, "energy.per_sample_j"))
        assert (cells[-2] == "-") == (memory is None) and (cells[-1] == "-") == (energy is None)
        assert (cells[3] == "-") == (not _measured(r, "samples_per_s")), (row, r.comparisons)
        assert (result_json["resources"]["gpu_memory"] is None) == (memory is None)
        for a in result_json["analyses"]:
            assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in a["metrics"].values())


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(results(), min_size=1, max_size=2))
def test_charts_render_any_result_with_parts_absent(rs: list[WorkloadResult]) -> None:
    pytest.importorskip("matplotlib")
    rs = _named(rs)
    import tempfile

    from perfgate.report.charts import render_charts

    with tempfile.TemporaryDirectory() as tmp:
        charts = render_charts(rs, Path(tmp))
        assert all(p.stat().st_size > 0 for p in charts.values())
        for r in rs:
            drawn = f"{r.name}:resources" in charts
            assert drawn == (memory_summary(r) is not None or energy_summary(r) is not None)

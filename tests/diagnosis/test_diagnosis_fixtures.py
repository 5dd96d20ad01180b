"""Diagnosis on every committed capture in tests/fixtures/traces/: TraceFacts agree with the
Analysis made from the same trace, and known captures get their known verdicts. GPU captures the
lead adds later run here automatically (cases without expectations get the consistency checks)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.diagnosis.attribution import explain_regression
from perfgate.diagnosis.one_run import diagnose
from perfgate.records.diagnosis import CPU_ONLY_NOTE
from perfgate.diagnosis.render import render_attribution_text, render_diagnosis_text
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
CASES = sorted(p.name for p in TRACES.glob("*") if (p / "trace.sqlite").is_file()) if TRACES.is_dir() else []

# Known verdicts: rules that must fire (and must not) per case.
EXPECTED: dict[str, dict[str, object]] = {
    # sleeps 2 ms in data_load and 1 ms in optimizer around a tiny MLP
    "cpu-train-loop": {"bottleneck": "data-loading bound", "fires": {"dataloader_blocking"},
                       "silent": set(), "facts": {"gpu_ops": 0}},
    # forward/backward ranges around CPU work in two processes
    "cpu-two-procs": {"bottleneck": "CPU compute bound", "fires": set(),
                      "silent": {"dataloader_blocking"}, "facts": {"gpu_ops": 0}},
    # PIN=0: pageable x.to(dev) without non_blocking, fp32/TF32 convs, no torch.compile, one stream
    "toy-h100": {"bottleneck": "GPU compute bound", "fires": {"pageable_copies", "blocking_copy", "copy_not_overlapped",
                           "no_mixed_precision", "not_compiled", "synchronizing_api_calls"},
                 "silent": {"dataloader_blocking", "cpu_launch_bound", "low_gpu_utilization"},
                 "facts": {"h2d_copies_per_step": 2.0,
                           "h2d_syncs_per_step": 2.0, "h2d_on_compute_stream_fraction": 1.0,
                           "h2d_overlap_fraction": 0.0, "kernels_per_step": 40.0}},
}

# The seed-003 ladder run in reverse: (faster case, case with one rung removed, cause named).
# Seed 003's ladder run in reverse on an H100 (scripts/gpu/reverse-ladder.sh): resnet_cifar fully
# optimized, then each optimization removed in turn; the removed one must be the named cause.
LADDER_PAIRS: list[tuple[str, str, str]] = [
    ("reverse-ladder-full", "reverse-ladder-no-workers", "workers"),   # 8 -> 0 pt_data_worker processes
    ("reverse-ladder-full", "reverse-ladder-no-pin", "pinned memory"),
    ("reverse-ladder-full", "reverse-ladder-no-nonblocking", "non-blocking copy"),
    ("reverse-ladder-full", "reverse-ladder-no-amp", "mixed precision"),
    ("reverse-ladder-full", "reverse-ladder-no-compile", "compile"),
    ("reverse-ladder-full", "reverse-ladder-no-overlap", "overlap stream"),
]


def _options(case: str) -> AnalysisOptions:
    return AnalysisOptions(skip_steps=2) if case.startswith("cpu-") else AnalysisOptions()


@pytest.fixture(scope="module", params=CASES or [pytest.param(None, marks=pytest.mark.skip("no fixtures"))])
def case(request: pytest.FixtureRequest):
    name = request.param
    path = TRACES / name / "trace.sqlite"
    return name, analyze_trace(path, _options(name))


def test_trace_facts_agree_with_the_analysis_of_the_same_trace(case) -> None:
    name, analysis = case
    facts = analysis.facts
    assert facts.steps == analysis.steps.count
    if analysis.gpu is None:
        assert facts.gpu_ops == 0 and facts.idle_ms_per_step is None
        return
    assert facts.kernels_per_step == pytest.approx(analysis.gpu.kernels_per_step)
    assert facts.h2d_copy_ms_per_step == pytest.approx(analysis.gpu.h2d_ms_per_step, rel=1e-6)
    assert facts.sync_calls_per_step == pytest.approx(analysis.gpu.sync_calls_per_step)
    idle = analysis.gpu_idle
    assert facts.idle_ms_per_step == pytest.approx(idle.fraction * idle.window_ms / analysis.steps.count, rel=1e-6)
    assert sum(facts.idle_by_phase_ms.values()) == pytest.approx(facts.idle_ms_per_step, rel=1e-6)


def test_diagnosis_of_each_capture_is_json_and_readable(case) -> None:
    name, analysis = case
    d = diagnose(analysis)
    doc = json.loads(json.dumps(d.to_dict()))
    assert doc["bottleneck"] == d.bottleneck and doc["facts"]["steps"] == analysis.steps.count
    assert render_diagnosis_text(d).startswith(f"bottleneck: {d.bottleneck}")
    assert (CPU_ONLY_NOTE in d.evidence) is (analysis.gpu is None)


@pytest.mark.parametrize("name", [n for n in EXPECTED if n in CASES])
def test_known_captures_get_their_known_bottleneck_and_findings(name: str) -> None:
    expected = EXPECTED[name]
    path = TRACES / name / "trace.sqlite"
    d = diagnose(analyze_trace(path, _options(name)))
    fired = set(d.rules_fired)
    assert d.bottleneck == expected["bottleneck"]
    assert expected["fires"] <= fired
    assert not (expected["silent"] & fired)
    for key, value in expected["facts"].items():
        assert d.facts[key] == pytest.approx(value), key


@pytest.mark.parametrize("faster, slower, cause", LADDER_PAIRS)
def test_ladder_rung_removed_is_named(faster: str, slower: str, cause: str) -> None:
    paths = [TRACES / c / "trace.sqlite" for c in (faster, slower)]
    if not all(p.is_file() for p in paths):
        pytest.skip(f"ladder captures {faster}/{slower} not committed yet")
    base, cur = (analyze_trace(p) for p in paths)
    a = explain_regression(base, cur)
    if a.step_mean_delta_ms > 0:
        assert a.cause == cause, render_attribution_text(a)
    else:   # the removal made this step faster: the reasons say what did; it is named as going the other way
        assert any(f"likely change: {cause}" in n for n in a.notes if n.startswith("the other way")), \
            render_attribution_text(a)

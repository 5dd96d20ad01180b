"""The profile launch's place in a side's metrics, on real captures: timing launches (step and CPU
phase times) and the CUDA-traced profile launch (GPU idle, GPU time per phase, kernels) are never
mixed; a baseline stores the profile launch with only its GPU metrics and reads it back; the
diagnosis compares profile launches with profile launches."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from perfgate.baselines.store import baseline_from_analyses, load_baseline, profile_metrics, write_baseline
from perfgate.gate.compare import compare_launches
from perfgate.pipeline.inputs import explained_launches, analyze_file
from perfgate.records.model import MachineInfo, Verdict
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"


def test_profile_metrics_are_only_what_timing_launches_do_not_measure(tmp_path: Path) -> None:
    timing = analyze_file(TRACES / "cpu-train-loop" / "trace.sqlite")        # nvtx only
    profile = analyze_file(TRACES / "gpu-transformer" / "trace.sqlite")      # CUDA traced
    profile = replace(profile, launch=replace(profile.launch, kind="profile"))
    side = [timing.metrics(), timing.metrics()]
    side.append(profile_metrics(profile, side))
    assert len(side) == 3 and side[0] == timing.metrics()
    gpu = side[2]
    assert {"gpu_idle_fraction", "kernels_per_step", "phase.forward.gpu_ms"} <= set(gpu)
    assert not any(m.startswith("step_") or m.endswith(".cpu_ms") for m in gpu)
    assert gpu["gpu_idle_fraction"] == profile.metrics()["gpu_idle_fraction"]

    machine = MachineInfo("test-x1", None, 0, None, None, None, None)
    path = write_baseline(tmp_path / "b.json", baseline_from_analyses(
        "w", [timing, timing], machine, {"command": "test"}, profile=profile))
    back = load_baseline(path)
    assert back.launch_metrics == side                       # the profile launch read back as written
    assert back.step_durations_ms == [*timing.steps.durations_ms, *timing.steps.durations_ms]
    outcome = compare_launches(back.launch_metrics, side[:2])
    assert outcome.verdict == Verdict.PASS
    # The launch counts are of timing launches: the profile launch only adds GPU facts
    # (an H100 run printed "[6 vs 1 launches]" for 5 timing launches and a profile launch).
    assert (outcome.n_baseline, outcome.n_current) == (2, 2) and outcome.summary.endswith("[2 vs 2 launches]")
    outcome = compare_launches(back.launch_metrics, side)
    idle = outcome.row("gpu_idle_fraction")
    assert idle is not None and idle.verdict == Verdict.PASS and outcome.row("step_time_ms").baseline is not None

    base, cur = explained_launches(back.launch_analyses, [timing, timing], profile)
    assert [a.launch.kind for a in base] == ["profile"] and cur == [profile]
    base, cur = explained_launches(back.launch_analyses, [timing], None)    # no current profile: timing
    assert [a.launch.kind for a in base] == ["timing", "timing"] and cur == [timing]


def test_a_baseline_profile_launch_is_diagnosed_against_its_own_step_time(tmp_path: Path) -> None:
    """The profile launch's metrics hold no step time, so its record keeps its own step summary.
    Before, its step read back as 0 ms: the change the diagnosis explained was the whole step
    (+244 ms instead of +47 ms on two H200s), and the reasons' thresholds grew with it: the real
    no_sync() change was explained as "+483 kernel launches/step in backward ... more layers?"."""
    import json

    from perfgate.diagnosis.attribution import explain_regression
    from perfgate.records.model import Analysis

    runs = json.loads((TESTS / "fixtures" / "records" / "ddp-h200-nosync.json").read_text())["runs"]
    base, cur, timing = (Analysis.from_dict(runs[n]["analysis"]) for n in ("baseline", "no_sync dropped", "rerun"))
    timing = replace(timing, launch=replace(timing.launch, kind="timing"))    # a stand-in timing launch
    machine = MachineInfo("test-x2", None, 2, None, None, None, None)
    back = load_baseline(write_baseline(tmp_path / "b.json", baseline_from_analyses(
        "ddp", [timing], machine, {"command": "test"}, profile=base)))
    launches, current = explained_launches(back.launch_analyses, [timing], cur)
    assert len(launches) == 1 and current == [cur]
    assert launches[0].steps.summary_ms.mean == base.steps.summary_ms.mean      # 197.34 ms, not 0
    a = explain_regression(launches, current)
    assert round(a.step_mean_delta_ms, 2) == 46.94
    assert "no_sync() dropped" in a.first_reason

    # a baseline written before the summary was kept: the mean step comes from a phase's share
    doc = json.loads((tmp_path / "b.json").read_text())
    for key in ("median_ms", "mean_ms", "p10_ms", "p90_ms", "stdev_ms", "min_ms", "max_ms"):
        del doc["launches"][-1]["steps"][key]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = load_baseline(tmp_path / "old.json").launch_analyses[-1]
    assert abs(old.steps.summary_ms.mean - base.steps.summary_ms.mean) < 1e-9

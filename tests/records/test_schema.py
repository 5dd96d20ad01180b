"""One versioned record schema (perfgate.records.version, docs/schema.md): the analysis record, each
baseline launch record and each result record carry ``record_version``; records written before it
(the H100 baselines committed 2026-11-24, kept in tests/fixtures/baselines-v1 when they were
re-recorded) are read as version 1, a newer version is refused naming the file."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.errors import BaselineError, PerfgateError, TraceError
from perfgate.baselines.store import BaselineLaunch, baseline_document, load_baseline, parse_baseline
from perfgate.pipeline.inputs import compare_files
from perfgate.records.model import Analysis, Verdict
from perfgate.records.version import RECORD_VERSION, VERSION_KEY
from perfgate.report.json_report import render_report_json, result_dict, results_from_report
from perfgate.report.markdown import render_markdown
from perfgate.report.terminal import render_summary
from report_results import make_analysis, make_result
from layout import REPO

COMMITTED = sorted((REPO / "baselines").rglob("*.json"))
VERSION_1 = sorted((REPO / "tests" / "fixtures" / "baselines-v1").rglob("*.json"))


def test_there_are_committed_baselines() -> None:
    assert len(COMMITTED) >= 2 and len(VERSION_1) >= 2


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_baselines_are_of_this_version_and_load_as_recorded(path: Path) -> None:
    """Re-recorded 2026-11-27 (scripts/gpu/rerecord-baselines.sh): every launch carries this
    record_version, and what the gate compares is what was recorded, unchanged."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert all(launch[VERSION_KEY] == RECORD_VERSION for launch in doc["launches"])
    assert doc["provenance"]["record_version"] == RECORD_VERSION and doc["provenance"]["sources"]
    baseline = load_baseline(path)
    timing = [launch for launch in doc["launches"] if launch.get("capture") != "profile"]
    gated = [m["step_time_ms"] for m in baseline.launch_metrics if "step_time_ms" in m]   # the profile launch has none
    assert len(timing) >= 3 and gated == [launch["metrics"]["step_time_ms"] for launch in timing]


@pytest.mark.parametrize("path", VERSION_1, ids=lambda p: str(p.relative_to(REPO)))
def test_version_1_baselines_load_with_the_step_time_of_this_version(path: Path) -> None:
    """Recorded before record_version: read as version 1, the diagnosis's launches made from them.
    Version 1 gated each launch's median period: step_time_ms is computed again from the launch's
    step durations as this version's statistic (the median of runs' means), every other value is
    read unchanged, and written back as version 2."""
    import numpy as np

    from perfgate.analysis.periods import window_location

    doc = json.loads(path.read_text(encoding="utf-8"))
    assert all(VERSION_KEY not in launch for launch in doc["launches"])
    baseline = load_baseline(path)
    for launch, metrics in zip(doc["launches"], baseline.launch_metrics):
        durations = np.array(launch["step_durations_ms"])
        assert metrics["step_time_ms"] == window_location(durations, np.zeros(durations.size))[0]
        assert metrics["step_time_ms"] != launch["metrics"]["step_time_ms"]      # no longer the median
        assert {k: v for k, v in metrics.items() if k != "step_time_ms"} == \
            {k: v for k, v in launch["metrics"].items() if k != "step_time_ms"}
    for launch, a in zip(doc["launches"], baseline.launch_analyses):
        durations = np.array(launch["step_durations_ms"])
        assert a.steps.time_ms == window_location(durations, np.zeros(durations.size))[0]
        assert a.steps.count == launch["steps"]["count"] and a.steps.basis == launch["steps"]["basis"]
        assert set(a.phases) == set(launch["phases"]) and a.launch.diagnosis.to_dict() == launch["diagnosis"]
    again = baseline_document(baseline)
    assert all(launch[VERSION_KEY] == RECORD_VERSION == 2 for launch in again["launches"])
    timing = [launch for launch in again["launches"] if launch.get("capture") != "profile"]
    assert all(launch["steps"]["statistic"].startswith("median of 1") for launch in timing)
    assert parse_baseline(again, path).launch_metrics == baseline.launch_metrics   # read back as it is


def test_every_record_carries_the_one_version() -> None:
    result = make_result("w", Verdict.PASS)
    analysis = result.analyses[0]
    assert analysis.to_dict()[VERSION_KEY] == RECORD_VERSION
    assert BaselineLaunch.of(analysis, analysis.metrics()).to_dict()[VERSION_KEY] == RECORD_VERSION
    doc = result_dict(result)
    assert doc[VERSION_KEY] == RECORD_VERSION and doc["analyses"][0][VERSION_KEY] == RECORD_VERSION
    assert render_report_json([result])["schema_version"] == RECORD_VERSION
    assert VERSION_KEY not in Analysis.from_dict(analysis.to_dict()).extra


def test_records_without_a_version_are_read_as_version_1() -> None:
    analysis = make_analysis([10.0, 11.0, 12.0], {"forward": 4.0})
    record = {k: v for k, v in analysis.to_dict().items() if k != VERSION_KEY}
    assert Analysis.from_dict(record).to_dict() == analysis.to_dict()
    report = json.loads(json.dumps(render_report_json([make_result("w", Verdict.PASS)]), default=str))
    del report["results"][0][VERSION_KEY]
    assert results_from_report(report)[0].verdict is Verdict.PASS


def test_a_newer_analysis_record_is_refused_naming_where() -> None:
    record = {**make_analysis([10.0, 11.0], {}).to_dict(), VERSION_KEY: RECORD_VERSION + 1}
    with pytest.raises(PerfgateError, match=rf"^x.json: record_version {RECORD_VERSION + 1} is not supported"):
        Analysis.from_dict(record, "x.json")


def test_a_newer_baseline_launch_record_is_refused_naming_the_file(tmp_path: Path) -> None:
    doc = json.loads(COMMITTED[0].read_text(encoding="utf-8"))
    doc["launches"][1][VERSION_KEY] = RECORD_VERSION + 1
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(BaselineError, match=rf"^{path}: launches\[1\]: record_version {RECORD_VERSION + 1} is not"):
        load_baseline(path)


def test_a_newer_result_record_is_refused_by_report_and_compare(tmp_path: Path) -> None:
    result = make_result("w", Verdict.PASS)
    report = json.loads(json.dumps(render_report_json([result]), default=str))
    report["results"][0][VERSION_KEY] = RECORD_VERSION + 1
    with pytest.raises(PerfgateError, match=r"results\[0\]: record_version"):
        results_from_report(report, "r.json")
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps(report["results"][0]))
    older = tmp_path / "older.json"
    older.write_text(json.dumps(result_dict(result), default=str))
    with pytest.raises(TraceError, match=rf"{newer}: record_version"):
        compare_files(older, newer)


def test_a_launch_recorded_by_history_keeps_only_metrics_and_still_gives_an_analysis() -> None:
    metrics = {"step_time_ms": 10.0, "step_time_mean_ms": 11.0, "phase.forward.cpu_ms": 4.0,
               "gpu_idle_fraction": 0.25}
    a = BaselineLaunch(metrics).analysis()
    assert (a.steps.summary_ms.median, a.steps.summary_ms.mean, a.steps.count, a.steps.basis) == (10.0, 11.0, 1, "period")
    assert a.phases["forward"].cpu_per_step_ms == 4.0
    assert a.phases["forward"].share_of_step == pytest.approx(4.0 / 11.0)
    assert a.gpu_idle is not None and a.gpu_idle.fraction == 0.25


def test_a_launch_record_with_unreadable_detail_is_compared_not_explained(tmp_path: Path) -> None:
    """The diagnosis reads a baseline's launches as Analyses; one whose detail is malformed is left
    out of the attribution (as it was when the attribution read the dicts), never a crash of the gate."""
    doc = json.loads(COMMITTED[0].read_text(encoding="utf-8"))
    doc["launches"][0]["phases"] = ["not", "a", "table"]
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    baseline = load_baseline(path)
    assert len(baseline.launch_metrics) == len(doc["launches"])
    assert len(baseline.launch_analyses) == len(doc["launches"]) - 1


def test_a_baseline_launch_record_is_the_analysis_record_projected() -> None:
    """One schema: the launch record keeps keys of the analysis record, with the same values."""
    analysis = make_result("w", Verdict.PASS).analyses[0]
    record, launch = analysis.to_dict(), BaselineLaunch.of(analysis, analysis.metrics()).to_dict()
    assert launch["steps"].items() <= record["steps"].items()
    assert all(launch[k] == record.get(k) for k in launch if k not in ("steps", "step_durations_ms", "capture"))
    assert launch["step_durations_ms"] == record["steps"]["durations_ms"]


def _reports(results: list) -> tuple[str, str]:
    return "\n".join(render_summary(results)), render_markdown(results)


def test_a_report_read_back_renders_what_the_run_rendered() -> None:
    """``perfgate report --from`` rendered results whose analyses it had kept as dicts: samples/s,
    a NEW workload's step time and its phases were missing from the summary and the job summary."""
    new = replace(make_result("c", Verdict.NEW), comparisons=[])
    results = [make_result("a", Verdict.REGRESSED, forward_ms=6.0), make_result("b", Verdict.PASS), new]
    back = results_from_report(json.loads(json.dumps(render_report_json(results), default=str)))
    assert _reports(back) == _reports(results)
    assert [a.to_dict() for a in back[0].analyses] == [a.to_dict() for a in results[0].analyses]


def test_an_analysis_record_the_report_cannot_read_is_named() -> None:
    report = json.loads(json.dumps(render_report_json([make_result("w", Verdict.PASS)]), default=str))
    report["results"][0]["analyses"][0]["phases"] = ["forward"]
    with pytest.raises(PerfgateError, match=r"^r.json: results\[0\].analyses\[0\]: not an analysis record"):
        results_from_report(report, "r.json")

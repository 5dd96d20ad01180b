"""One rule decides whether a result fails (perfgate.records.model.fails): the pipeline's judgement, the
pytest item and CLI exit status (``WorkloadResult.failed``), the JSON report, JUnit, annotations
and the commit status agree, the strict-mode NEW case (no baseline) included."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from report_results import make_analysis

from perfgate.gate.compare import ComparePolicy, compare_launches
from perfgate.gate.sequential_looks import LaunchBudget, run_looks
from perfgate.pipeline.workload_run import compare_policy, judge
from perfgate.records.model import Verdict, WorkloadResult, fails
from perfgate.report.annotations import render_annotations
from perfgate.report.github import status_payload
from perfgate.report.json_report import render_report_json, results_from_report
from perfgate.report.junit import render_junit
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.report.digest import result_message


def judged_without_baseline(tmp_path: Path, strict: bool) -> WorkloadResult:
    """A result the way run_workload makes one for a workload with no baseline on this machine."""
    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\nstrict = {'true' if strict else 'false'}\n")
    settings = load_settings(tmp_path, env={})
    result = WorkloadResult(workload="tiny", verdict=Verdict.ERROR, strict=settings.strict,
                            analyses=[make_analysis([10.0] * 5, {"forward": 4.0})])
    spec = WorkloadSpec(name="tiny", module="workloads.tiny")
    run = run_looks([], lambda k: result.analyses[k].metrics(), compare_policy(settings, spec), LaunchBudget(1, 1))
    return judge(result, spec, settings, None, tmp_path / "baselines" / "tiny" / "absent.json", run)


def everywhere(result: WorkloadResult) -> dict[str, object]:
    """What each report says about ``result``."""
    doc = json.loads(json.dumps(render_report_json([result]), default=str))
    return {
        "item": result.failed,
        "report": doc["failed"],
        "report result": doc["results"][0]["failed"],
        "read back": results_from_report(doc)[0].failed,
        "status": status_payload(result)["state"],
        "junit": "<failure" in render_junit([result]),
        "annotation": [line.split(" ", 1)[0] for line in render_annotations([result])],
    }


def test_strict_new_fails_in_the_item_the_json_report_and_the_commit_status(tmp_path: Path) -> None:
    result = judged_without_baseline(tmp_path, strict=True)
    assert result.verdict is Verdict.NEW
    assert everywhere(result) == {"item": True, "report": True, "report result": True, "read back": True,
                                  "status": "failure", "junit": True, "annotation": ["::error"]}
    assert "strict mode: a missing baseline fails" in result_message(result)


def test_new_without_strict_passes_everywhere(tmp_path: Path) -> None:
    result = judged_without_baseline(tmp_path, strict=False)
    assert result.verdict is Verdict.NEW
    assert everywhere(result) == {"item": False, "report": False, "report result": False, "read back": False,
                                  "status": "success", "junit": False, "annotation": ["::warning"]}


def test_a_report_from_before_the_strict_field_keeps_its_strict_new_failure(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(render_report_json([judged_without_baseline(tmp_path, strict=True)]), default=str))
    del doc["results"][0]["strict"]
    assert results_from_report(doc)[0].failed is True


@pytest.mark.parametrize(("verdict", "strict", "expected"), [
    (Verdict.REGRESSED, False, True), (Verdict.ERROR, False, True), (Verdict.NEW, True, True),
    (Verdict.NEW, False, False), (Verdict.PASS, True, False), (Verdict.INCONCLUSIVE, True, False),
    (Verdict.IMPROVED, False, False), (Verdict.NO_DATA, True, False),
])
def test_the_one_rule_and_the_comparison_outcome_agree(verdict: Verdict, strict: bool, expected: bool) -> None:
    assert fails(verdict, strict) is expected
    assert WorkloadResult(workload="w", verdict=verdict, strict=strict).failed is expected


def test_the_comparison_outcome_of_a_missing_baseline_fails_only_under_strict() -> None:
    current = [{"step_time_ms": 10.0}]
    assert compare_launches(None, current, ComparePolicy(strict_new=True)).failed is True
    assert compare_launches(None, current, ComparePolicy(strict_new=False)).failed is False

"""Workflow-command annotations: kinds, GitHub's 10-per-kind limit and escaping."""
from __future__ import annotations

from report_results import make_result

from perfgate.records.model import Verdict
from perfgate.report.annotations import command, escape_data, escape_property, render_annotations


def test_escaping_follows_the_workflow_command_rules() -> None:
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert command("error", "perfgate x:y", "line1\nline2") == "::error title=perfgate x%3Ay::line1%0Aline2"


def test_at_most_ten_errors_and_ten_warnings_with_the_rest_summarised() -> None:
    results = [make_result(f"bad{i}", Verdict.REGRESSED, forward_ms=8.0) for i in range(15)]
    results += [make_result(f"new{i}", Verdict.NEW) for i in range(12)]
    results += [make_result("fine", Verdict.PASS)]
    lines = render_annotations(results)
    errors = [line for line in lines if line.startswith("::error ")]
    warnings = [line for line in lines if line.startswith("::warning ")]
    assert len(errors) == 10 and len(warnings) == 10 and len(lines) == 20
    assert errors[-1].startswith("::error title=perfgate%3A 6 more::")
    assert "bad9, bad10, bad11, bad12, bad13, bad14" in errors[-1]
    assert errors[8].startswith("::error title=perfgate bad8::")
    assert warnings[-1].startswith("::warning title=perfgate%3A 3 more::")
    assert not any("fine" in line for line in lines)


def test_every_annotation_is_one_line_whatever_the_message() -> None:
    r = make_result("bad", Verdict.ERROR, error="first line\nsecond line with 100%")
    (line,) = render_annotations([r])
    assert "\n" not in line and "ERROR: first line%0Asecond line with 100%25" in line


def test_improved_and_inconclusive_are_warnings_that_say_what_to_do() -> None:
    lines = render_annotations([make_result("fast", Verdict.IMPROVED), make_result("noisy", Verdict.INCONCLUSIVE)])
    assert lines[0].startswith("::warning title=perfgate fast::IMPROVED") and "refresh the baseline" in lines[0]
    assert lines[1].startswith("::warning title=perfgate noisy::INCONCLUSIVE") and "too noisy" in lines[1]


def test_limits_of_zero_drop_that_kind() -> None:
    results = [make_result("bad", Verdict.REGRESSED, forward_ms=8.0), make_result("new", Verdict.NEW)]
    assert render_annotations(results, max_errors=0) == render_annotations(results)[1:]

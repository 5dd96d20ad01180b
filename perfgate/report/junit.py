"""JUnit XML (via the ``junit-xml`` package): one test case per workload.

- classname ``perfgate``, name ``result.name``; REGRESSED -> ``<failure>``, ERROR -> ``<error>``,
  NO-DATA -> ``<skipped>``; the failure text is :func:`perfgate.report.terminal.failure_message`.
- Per-workload metrics go to ``<system-out>`` as ``key=value`` lines: junit-xml has no per-case
  ``<properties>``, and the common viewers (dorny/test-reporter, mikepenz/action-junit-report)
  show the failure message and text, which already name the regressed metrics.
- Machine identity goes to the suite's ``<properties>`` (``perfgate.machine.*``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from junit_xml import TestCase, TestSuite, to_xml_report_string

from perfgate.gate.wording import fmt_metric_change
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.report.digest import digest, one_line
from perfgate.report.terminal import failure_message

SUITE_NAME = "perfgate"
CLASSNAME = "perfgate"


def metric_lines(result: WorkloadResult) -> list[str]:
    """``key=value`` lines: verdict, every comparison (baseline, current, change, verdict)."""
    lines = [f"verdict={result.verdict}"]
    for c in result.comparisons:
        lines += [
            f"{c.metric}.baseline={c.baseline}",
            f"{c.metric}.current={c.current}",
            f"{c.metric}.change={fmt_metric_change(c)}",
            f"{c.metric}.verdict={c.verdict}",
        ]
    if not result.comparisons:
        d = digest(result)
        lines.append(f"step_time_ms.current={d.step_current_ms}")
    if result.run_dir is not None:
        lines.append(f"artifacts={result.run_dir}")
    return lines


def junit_case(result: WorkloadResult) -> TestCase:
    """The JUnit test case of one workload."""
    case = TestCase(result.name, classname=CLASSNAME, elapsed_sec=result.wall_s,
                    stdout="\n".join(metric_lines(result)))
    if result.verdict is Verdict.ERROR:
        case.add_error_info(message=one_line(result, limit=1000), output=failure_message(result),
                            error_type="perfgate.error")
    elif result.failed:  # REGRESSED, or NEW under strict mode
        kind = "perfgate.regression" if result.verdict is Verdict.REGRESSED else "perfgate.missing-baseline"
        case.add_failure_info(message=one_line(result, limit=1000), output=failure_message(result),
                              failure_type=kind)
    elif result.verdict is Verdict.NO_DATA:
        case.add_skipped_info(message=one_line(result, limit=1000))
    return case


def suite_properties(results: Sequence[WorkloadResult]) -> dict[str, str]:
    """Machine identity of the first result that has one, as ``perfgate.system.machine.<field>``."""
    machine = next((r.machine for r in results if r.machine is not None), None)
    if machine is None:
        return {}
    return {f"perfgate.machine.{k}": str(v) for k, v in asdict(machine).items() if v is not None}


def render_junit(results: Sequence[WorkloadResult]) -> str:
    """The JUnit XML document for ``results``."""
    suite = TestSuite(SUITE_NAME, [junit_case(r) for r in results],
                      properties=suite_properties(results) or None)
    return to_xml_report_string([suite], prettyprint=True, encoding="utf-8")

"""Terminal text: the fixed-width summary table and a failed item's message."""
from __future__ import annotations

import json
import math
from pathlib import Path

from report_results import make_result

from perfgate.gate.wording import fmt_tolerance
from perfgate.records.model import Tolerance, Verdict
from perfgate.report.digest import digest, fmt_worst_phase
from perfgate.report.json_report import results_from_report
from perfgate.report.terminal import failure_message, render_summary
from layout import TESTS


def test_summary_columns_line_up_whatever_the_name_length() -> None:
    lines = render_summary([make_result("a", Verdict.PASS),
                            make_result("a_much_longer_workload_name", Verdict.REGRESSED, forward_ms=8.0)])
    table = lines[1:]
    starts = {line.index(verdict) for line, verdict in zip(table[2:], ("PASS", "REGRESSED"))}
    assert len(starts) == 1 and table[0].index("verdict") in starts
    assert lines[0] == "perfgate: 2 workload(s): 1 PASS, 1 REGRESSED"
    assert "10.0 -> 14.0 ms (+40.0 %)" in table[3] and "forward +100.0 %" in table[3]


def test_no_results_says_so() -> None:
    assert render_summary([]) == ["perfgate: no workloads ran"]


def test_error_message_carries_the_error_and_the_artifacts() -> None:
    text = failure_message(make_result("w", Verdict.ERROR, error="nsys exited 1: importer missing"))
    assert text.splitlines()[:2] == ["perfgate: w ERROR", "error: nsys exited 1: importer missing"]
    assert text.splitlines()[-1] == "artifacts: /runs/w"


def test_tolerances_read_as_written_in_the_docs() -> None:
    assert fmt_tolerance(Tolerance(rel=0.1, abs=0.5), "ms") == "10 % and 0.500 ms"
    assert fmt_tolerance(Tolerance(abs=0.03), "fraction") == "3 pp"
    assert fmt_tolerance(Tolerance(rel=math.inf), "ms") == "off"


def test_the_step_time_shown_is_named_for_what_it_is() -> None:
    """Three launches 73.0, 56.8, 56.5 ms: a baseline file's median is 56.8 ms, the gate compares
    the geometric mean 61.6 ms; the summary used to show 61.6 under "step time median"."""
    from perfgate.baselines.store import summarize_launches
    from perfgate.gate.compare import compare_launches
    from perfgate.records.model import WorkloadResult

    launches = [{"step_time_ms": v} for v in (73.0, 56.8, 56.5)]
    assert summarize_launches(launches)["step_time_ms"]["median"] == 56.8
    outcome = compare_launches(launches, launches)
    result = WorkloadResult(workload="w", verdict=outcome.verdict, comparisons=list(outcome.comparisons))
    lines = render_summary([result])
    header, row, legend = lines[1], lines[3], lines[-1]
    assert "median" not in header and "step time (base -> current)" in header
    assert "61.6 -> 61.6 ms" in row
    assert legend == ("step time: each launch's step time (the median of its runs of consecutive iterations' means), "
                      "geometric mean over the launches (what the gate compares)")


def test_headline_shows_the_mean_when_the_mean_alone_regressed() -> None:
    """A data-bound loop on the H100 (resnet_cifar, a slower dataset): the launch's median step fell
    -2.5 % while its mean rose +11.3 % and decided REGRESSED; the headline showed the median
    ("69.0 -> 67.2 ms (-2.5 %)") beside REGRESSED. It shows the step time that decided."""
    from perfgate.gate.compare import compare_launches
    from perfgate.records.model import WorkloadResult
    from perfgate.report.digest import digest, one_line

    base = [{"step_time_ms": m, "step_time_mean_ms": a}
            for m, a in ((70.07, 75.9), (71.69, 76.4), (66.88, 74.1), (66.54, 75.0), (69.96, 75.6))]
    outcome = compare_launches(base, [{"step_time_ms": 67.25, "step_time_mean_ms": 83.9}])
    assert outcome.verdict == Verdict.REGRESSED
    assert outcome.row("step_time_ms").verdict != Verdict.REGRESSED
    result = WorkloadResult(workload="w", verdict=outcome.verdict, comparisons=list(outcome.comparisons))
    d = digest(result)
    assert d.step_metric == "step_time_mean_ms" and abs(d.step_current_ms - 83.9) < 1e-9 and d.step_change > 0.10
    assert one_line(result).startswith("REGRESSED: step 75.4 -> 83.9 ms (+11.")
    assert one_line(result).split(";")[0].endswith(", mean)")
    same = compare_launches(base, base[:2])
    assert digest(WorkloadResult(workload="w", verdict=same.verdict,
                                 comparisons=list(same.comparisons))).step_metric == "step_time_ms"


def test_every_summary_says_which_event_ended_an_iteration() -> None:
    """The step model's choice is printed with the statistic gated (issue 28): the workload's own
    ranges, or autostep's marker in its words; after the workload's notes (a stale-baseline warning
    stays first)."""
    from dataclasses import replace

    ranged = make_result("ranged", Verdict.PASS, message="warning: the baseline was recorded from other code")
    hooked = make_result("hooked", Verdict.REGRESSED, forward_ms=8.0)
    st = hooked.analyses[0].steps
    marker = ("perfgate's optimizer hook (no step ranges in the workload): one iteration = one pass through the "
              "optimizers' cycle Adam #1, Adam #2 (it ends at each step of Adam #2)")
    hooked.analyses[0] = replace(hooked.analyses[0], steps=replace(
        st, source="autostep", marker=marker, interludes=4, statistic="median of 13-iteration means"))
    lines = render_summary([ranged, hooked])
    notes = lines[lines.index(next(x for x in lines if x.startswith("step time:"))) + 1:]
    assert notes == [
        "ranged: warning: the baseline was recorded from other code",
        "ranged: steps: the workload's 'step' ranges; 5 iterations measured per launch, gated on the median",
        f"hooked: steps: {marker}; 5 iterations measured per launch, 4 evaluation/checkpoint periods left out, "
        "gated on the median of 13-iteration means",
    ]
    assert failure_message(hooked).splitlines()[-2] == notes[-1].removeprefix("hooked: ")


NANOGPT_INPUT = TESTS / "fixtures" / "records" / "nanogpt-h200-input-slowdown-report.json"


def test_worst_phase_is_one_that_grew_beyond_its_tolerance_on_a_real_gpu_run() -> None:
    """nanoGPT's input pull request on an H200 (scripts/gpu/zoo-gate.py, docs/zoo.md): 10 ms of sleep
    in get_batch grew the step's own code, no phase. The 0.6 ms optimizer phase moved +14 % and +0.09
    ms, within its tolerance (10 % and 0.5 ms); the summary named it "worst phase optimizer +14.0 %"."""
    (result,) = results_from_report(json.loads(NANOGPT_INPUT.read_text()))
    assert result.verdict is Verdict.REGRESSED
    optimizer = next(c for c in result.comparisons if c.metric == "phase.optimizer.cpu_ms")
    assert optimizer.change > 0.10 and optimizer.verdict is Verdict.PASS
    row = next(line for line in render_summary([result]) if line.startswith("nanogpt"))
    assert "optimizer" not in row
    assert fmt_worst_phase(digest(result)) == "-"

"""`pytest --perfgate` end to end with real nsys: record a baseline, pass unchanged, fail on an
injected slowdown naming the phase, report a crashing workload and a missing nsys clearly; and
stay inert without --perfgate."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

TINY = '''
import argparse, json, sys, time

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--slow-phase")
parser.add_argument("--slow-ms", type=float, default=0.0)
parser.add_argument("--crash", action="store_true")
args = parser.parse_args()
if args.crash:
    print("tiny: building the model")
    print("RuntimeError: CUDA out of memory (simulated)", file=sys.stderr)
    sys.exit(7)
''' + NVTX + '''for _ in range(args.steps):
    nvtx.range_push("step")
    for phase, ms in (("data_load", 2), ("forward", 10), ("backward", 12), ("optimizer", 3)):
        nvtx.range_push(phase)
        time.sleep((ms + (args.slow_ms if phase == args.slow_phase else 0)) / 1000)
        nvtx.range_pop()
    nvtx.range_pop()
print("PERFGATE_SELF_REPORT " + json.dumps({"workload": "tiny", "steps": args.steps, "batch_size": 4}))
'''

# Sleep-timed phases are steady, but this 2-core machine is shared: loose tolerances keep an
# unchanged rerun green while an 80 ms slowdown in a 10 ms phase is still far outside them.
PYPROJECT = '''
[project]
name = "demo"

[tool.perfgate]
baseline_dir = "{baselines}"
warmup_steps = 1
timeout_s = 300
launches = 1

[tool.perfgate.tolerance]
"step_time*" = "40%+5"
"phase.*.cpu_ms" = "40%+5"

[tool.perfgate.workloads.tiny]
args = {tiny_args}

[tool.perfgate.workloads.crashy]
module = "workloads.tiny"
args = ["--crash"]
enabled = {crashy_enabled}
'''


def write_project(root: Path, baselines: Path, tiny_args: tuple[str, ...] = (), crashy: bool = False) -> None:
    (root / "workloads").mkdir(exist_ok=True)
    (root / "workloads" / "tiny.py").write_text(TINY)
    (root / "pyproject.toml").write_text(PYPROJECT.format(
        baselines=baselines.as_posix(), tiny_args=json.dumps(list(tiny_args)),
        crashy_enabled="true" if crashy else "false"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module: object) -> dict:
    """`pytest --perfgate --perfgate-update-baselines` in a fresh project (shared baseline dir)."""
    root = tmp_path_factory.mktemp("record")
    baselines = root / "shared-baselines"
    write_project(root, baselines)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--perfgate", "--perfgate-update-baselines", "-p",
                           "no:cacheprovider"], cwd=root, capture_output=True, text=True, timeout=600)
    return {"baselines": baselines, "proc": proc}


def test_update_run_records_a_versioned_baseline(recorded: dict) -> None:
    proc = recorded["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    files = list(recorded["baselines"].glob("tiny/*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert (doc["format"], doc["version"], doc["workload"]) == ("perfgate-baseline", 2, "tiny")
    assert len(doc["launches"]) == 1 and len(doc["launches"][0]["step_durations_ms"]) == 6   # 8 - 1 warm-up - the last (no next start)
    assert doc["launches"][0]["metrics"]["phase.forward.cpu_ms"] == pytest.approx(10, abs=4)
    assert doc["provenance"]["command"].endswith("--perfgate --perfgate-update-baselines -p no:cacheprovider")


def test_unchanged_rerun_passes(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, recorded["baselines"])
    result = pytester.runpytest_subprocess("--perfgate", "-v", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*perfgate::tiny PASSED*", "*perfgate: 1 workload(s): 1 PASS*"])
    assert 'classname="perfgate" name="tiny"' in (pytester.path / "junit.xml").read_text()
    assert (pytester.path / ".perfgate" / "report" / "perfgate-report.json").exists()


def test_slowdown_in_one_phase_fails_naming_it_and_crash_is_reported(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, recorded["baselines"], tiny_args=("--slow-phase", "forward", "--slow-ms", "80"),
                  crashy=True)
    result = pytester.runpytest_subprocess("--perfgate", "-rf")
    result.assert_outcomes(failed=2)
    assert result.ret == 1
    out = result.stdout.str()
    assert "phase.forward.cpu_ms" in out and "REGRESSED" in out
    assert "workload crashy exited with code 7" in out
    assert "RuntimeError: CUDA out of memory (simulated)" in out
    assert "Traceback" not in out
    # where a reviewer looks: the charts in the summary, and three steps of each launch for Perfetto
    summary = (pytester.path / ".perfgate" / "report" / "summary.md").read_text()
    assert summary.count("```mermaid") == 2 and "steps.trace.json" in summary
    traces = sorted(pytester.path.glob(".perfgate/runs/**/steps.trace.json"))
    assert traces, sorted(str(p) for p in pytester.path.glob(".perfgate/runs/**/*"))
    events = json.loads(traces[0].read_text())["traceEvents"]
    forward = [e for e in events if e.get("cat") == "nvtx" and e["name"] == "forward" and e["dur"] < 10**6]
    assert len([e for e in events if e.get("cat") == "step"]) == 3
    assert forward and all(e["dur"] >= 80_000 for e in forward)       # the 80 ms the pull request added


def test_missing_nsys_gives_a_clear_error(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, recorded["baselines"])
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-nsys", "/nonexistent/nsys")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "nsys not found" in out and "/nonexistent/nsys" in out
    assert "Traceback" not in out


def test_no_baseline_passes_as_new_and_fails_when_strict(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, pytester.path / "empty-baselines")
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-strict")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*NEW*"])
    # the same failure in the JSON report and in the commit status made from it
    from perfgate.report.github import status_payload
    from perfgate.report.json_report import results_from_report

    doc = json.loads((pytester.path / ".perfgate" / "report" / "perfgate-report.json").read_text())
    assert doc["verdict"] == "NEW" and doc["failed"] is True and doc["results"][0]["failed"] is True
    assert status_payload(results_from_report(doc)[0])["state"] == "failure"


def test_fixture_runs_a_workload_against_its_baseline(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, recorded["baselines"])
    pytester.makepyfile(test_gate="""
        from perfgate.report.digest import result_message

        def test_uses_fixture(perfgate):
            result = perfgate.run("tiny")
            assert str(result.verdict) == "PASS", result_message(result)
            assert result.baseline_path.parent.name == "tiny"
            assert len(result.analyses) == 1
    """)
    result = pytester.runpytest_subprocess("--perfgate", "-k", "test_uses_fixture")
    result.assert_outcomes(passed=1, deselected=1)    # the perfgate::tiny item is deselected by -k


def test_plugin_is_inert_without_perfgate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_probe="""
        import sys
        def test_probe():
            assert "pandas" not in sys.modules
            assert "perfgate.pipeline.workload_run" not in sys.modules
    """)
    write_project(pytester.path, pytester.path / "baselines")
    result = pytester.runpytest_subprocess()
    result.assert_outcomes(passed=1)
    assert "perfgate::" not in result.stdout.str()


def test_marked_tests_and_the_fixture_skip_without_perfgate(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_marked="""
        import pytest
        @pytest.mark.perfgate(workload="tiny")
        def test_marked():
            raise AssertionError("must not run")
        def test_fixture(perfgate):
            raise AssertionError("must not run")
    """)
    result = pytester.runpytest_subprocess("-rs")
    result.assert_outcomes(skipped=2)
    result.stdout.fnmatch_lines(["*runs only with --perfgate*"])


def test_help_lists_every_option_in_the_perfgate_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--help")
    out = result.stdout.str()
    for option in ("--perfgate ", "--perfgate-update-baselines", "--perfgate-strict", "--perfgate-workload",
                   "--perfgate-launches", "--perfgate-baseline-dir", "--perfgate-artifacts-dir", "--perfgate-nsys",
                   "--perfgate-trace", "--perfgate-timeout", "--perfgate-size", "--perfgate-tolerance",
                   "--perfgate-report-dir"):
        assert option in out, option


def test_bad_option_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_project(pytester.path, pytester.path / "baselines")
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tolerance", "step_time_ms")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perfgate-tolerance: expected METRIC=SPEC*"])


def test_a_workloads_dir_that_does_not_exist_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    pytester.path.joinpath("pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.perfgate]\nworkloads_dir = 'perf'\n")
    result = pytester.runpytest_subprocess("--perfgate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR          # was: "no workloads ran", exit 0
    result.stderr.fnmatch_lines([f"*pyproject.toml [[]tool.perfgate[]] workloads_dir: {pytester.path / 'perf'} is not a folder*"])
    pytester.path.joinpath("pyproject.toml").write_text("[project]\nname = 'demo'\n")   # default workloads/, absent
    result = pytester.runpytest_subprocess("--perfgate")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no workloads: *workloads (default workloads_dir) does not exist, and *"
                                 "pyproject.toml has no [[]tool.perfgate.workloads.<name>[]] tables*"])


def test_the_collected_count_includes_the_perfgate_items(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unit="def test_unit():\n    pass\n")
    (pytester.path / "workloads").mkdir()
    for name in ("a", "b", "c"):
        (pytester.path / "workloads" / f"{name}.py").write_text("print('never run')\n")
    pytester.path.joinpath("pyproject.toml").write_text("[project]\nname = 'demo'\n")
    result = pytester.runpytest_subprocess("--perfgate", "-m", "not perfgate", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["collected 4 items / 3 deselected / 1 selected"])   # was "1 item / 3 deselected / -2 selected"
    result.assert_outcomes(passed=1, deselected=3)
    result = pytester.runpytest_subprocess("--perfgate", "-m", "perfgate", "--co", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["collected 4 items / 1 deselected / 3 selected"])


def test_a_tolerance_for_no_metric_is_a_usage_error(pytester: pytest.Pytester) -> None:
    write_project(pytester.path, pytester.path / "baselines")
    result = pytester.runpytest_subprocess("--perfgate", "--perfgate-tolerance", "no_such_metric=5%")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*option --perfgate-tolerance: no metric is named 'no_such_metric'*"])

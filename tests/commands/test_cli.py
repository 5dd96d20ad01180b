"""`perfgate` CLI: exit codes 0/1/2, the `analyze --format json` contract, compare across file
kinds, baseline update with real nsys, and usage errors naming the option or file."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

from perfgate.cli import main
from layout import TESTS

TINY = '''
import json, time
''' + NVTX + '''for _ in range(5):
    nvtx.range_push("step")
    for phase, ms in (("data_load", 2), ("forward", 6)):
        nvtx.range_push(phase); time.sleep(ms / 1000); nvtx.range_pop()
    nvtx.range_pop()
print("PERFGATE_SELF_REPORT " + json.dumps({"workload": "tiny", "steps": 5, "batch_size": 2}))
'''
ANALYZE_KEYS = {"record_version", "source", "nsys_version", "steps", "phases", "ranges", "metrics", "gpu_idle_fraction", "warnings"}


@pytest.fixture(scope="module")
def traces(repo_root: Path) -> Path:
    """Real nsys 2022.4 exports of CPU workloads committed by the trace tests."""
    return repo_root / "tests" / "fixtures" / "traces"


def tiny_project(root: Path) -> Path:
    (root / "workloads").mkdir(parents=True, exist_ok=True)
    (root / "workloads" / "tiny.py").write_text(TINY)
    (root / "workloads" / "_helper.py").write_text("")
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.perfgate]\nwarmup_steps = 1\n")
    return root


def test_analyze_json_prints_exactly_one_object_with_the_contract_keys(traces: Path, capsys) -> None:
    assert main(["analyze", str(traces / "cpu-train-loop" / "trace.sqlite"), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert ANALYZE_KEYS <= set(doc)
    assert doc["steps"]["count"] == len(doc["steps"]["durations_ms"]) > 0
    assert doc["metrics"]["step_time_ms"] == doc["steps"]["time_ms"] and doc["steps"]["statistic"].startswith("median of")


def test_analyze_options_change_the_result(traces: Path, capsys) -> None:
    trace = str(traces / "cpu-train-loop" / "trace.sqlite")
    main(["analyze", trace, "--format", "json", "--warmup-steps", "0", "--batch-size", "8"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["steps"]["warmup_skipped"] == 0 and doc["steps"]["batch_size"] == 8
    assert doc["metrics"]["samples_per_s"] > 0


def test_compare_exits_0_for_the_same_trace_and_1_for_a_slower_one(traces: Path, capsys) -> None:
    fast, slow = traces / "cpu-train-loop" / "trace.sqlite", traces / "cpu-two-procs" / "trace.sqlite"
    assert main(["compare", str(fast), str(fast)]) == 0
    assert capsys.readouterr().out.startswith("PASS")
    assert main(["compare", str(fast), str(slow), "--format", "json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "REGRESSED" and "step_time_ms" in doc["summary"]


def test_compare_accepts_analyze_json_output(traces: Path, tmp_path: Path, capsys) -> None:
    trace = traces / "cpu-train-loop" / "trace.sqlite"
    main(["analyze", str(trace), "--format", "json"])
    saved = tmp_path / "analysis.json"
    saved.write_text(capsys.readouterr().out)
    assert main(["compare", str(saved), str(trace), "--tolerance", "step_time_ms=1%"]) == 0


def test_compare_takes_its_tolerances_and_alpha_from_the_project_as_the_gate_does(
        traces: Path, tmp_path: Path, capsys) -> None:
    """``perfgate compare`` read --tolerance and --alpha only: a project's [tool.perfgate] tables
    silently did not apply. The order is the gate's: the option, the workload's table (when the
    inputs name the workload), the global table, the default."""
    fast, slow = (str(traces / name / "trace.sqlite") for name in ("cpu-train-loop", "cpu-two-procs"))  # +76.7 %
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[tool.perfgate]\nalpha = 0.05\n\n[tool.perfgate.tolerance]\n"phase.*" = "off"\n"step_time*" = "100%"\n\n'
        '[tool.perfgate.workloads.tiny]\ntolerance = { "step_time*" = "10%" }\n')

    def summary(*args: str) -> tuple[int, str]:
        code = main(["compare", *args, "--root", str(project)])
        out = capsys.readouterr().out
        # a phase that grew on the CPU read "checkpoint +0.4 ms/step of host time host work in this phase"
        assert not any(line.endswith("of host time host work in this phase") for line in out.splitlines()), out
        assert any(line.endswith(": checkpoint +0.4 ms/step of host time") for line in out.splitlines()), out
        return code, out.splitlines()[0]

    assert summary(fast, slow) == (0, "PASS: step_time_ms +76.7 % (3.60 ms -> 6.37 ms, tolerance 100 %); "
                                      "step_time_mean_ms +72.6 % (3.62 ms -> 6.25 ms, tolerance 100 %) [1 vs 1 launch]")
    code, line = summary(fast, slow, "--tolerance", "step_time_ms=3%")
    assert code == 1 and line.startswith("REGRESSED: step_time_ms +76.7 % (3.60 ms -> 6.37 ms, tolerance 3 %)"), line
    named = []
    for trace in (fast, slow):            # an analysis that names its workload (as a result JSON does)
        assert main(["analyze", trace, "--format", "json"]) == 0
        doc = {**json.loads(capsys.readouterr().out), "workload": "tiny"}
        named.append(tmp_path / f"{len(named)}.json")
        named[-1].write_text(json.dumps(doc))
    code, line = summary(*map(str, named))
    assert code == 1 and "step_time_ms +76.7 % (3.60 ms -> 6.37 ms, tolerance 10 %)" in line, line
    assert "phase." not in line                                      # the global table still applies to phases
    (project / "pyproject.toml").write_text("[tool.perfgate]\nalpha = 2.0\n")
    assert main(["compare", fast, slow, "--root", str(project)]) == 2
    assert f"{project / 'pyproject.toml'} [tool.perfgate] alpha" in capsys.readouterr().err
    assert main(["compare", fast, slow, "--alpha", "nan"]) == 2
    assert "perfgate: error: option --alpha" in capsys.readouterr().err


def test_missing_file_and_bad_tolerance_exit_2_naming_them(traces: Path, tmp_path: Path, capsys) -> None:
    assert main(["analyze", str(tmp_path / "absent.sqlite")]) == 2
    assert "perfgate: error:" in (err := capsys.readouterr().err) and "absent.sqlite" in err
    trace = str(traces / "cpu-train-loop" / "trace.sqlite")
    assert main(["compare", trace, trace, "--tolerance", "step_time_ms=fast"]) == 2
    assert "--tolerance step_time_ms" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope.json"), trace]) == 2
    assert "BASELINE" in capsys.readouterr().err


def test_argparse_errors_exit_2_naming_the_option(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["analyze", "x.sqlite", "--format", "yaml"])
    assert exc.value.code == 2 and "--format" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2


def test_list_shows_discovered_workloads_but_not_private_modules(tmp_path: Path, capsys) -> None:
    assert main(["list", "--root", str(tiny_project(tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "-m workloads.tiny" in out and "_helper" not in out


def test_a_helper_module_in_the_workloads_folder_is_skipped_with_a_note(tmp_path: Path, capsys) -> None:
    """workloads/common.py that only defines things (a user's shared code, no `_` prefix) is not run
    as a workload (it used to fail with "no NVTX_EVENTS table"): list and run name it in a note that
    says how to mark or declare it; declared in a table, it is a workload again."""
    root = tiny_project(tmp_path)
    (root / "workloads" / "common.py").write_text("import os\n\nSIZE = 4\n\ndef batch():\n    return os.urandom(SIZE)\n")
    assert main(["list", "--root", str(root)]) == 0
    captured = capsys.readouterr()
    assert "workloads.common" not in captured.out and "workloads.tiny" in captured.out
    assert "common.py is not a workload: it only defines things" in captured.err
    assert "name it _common.py" in captured.err and "[tool.perfgate.workloads.common]" in captured.err
    assert main(["run", "common", "--root", str(root)]) == 2
    assert "workload 'common' not found" in capsys.readouterr().err
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n[tool.perfgate.workloads.common]\nenabled = true\n")
    assert main(["list", "--root", str(root)]) == 0
    captured = capsys.readouterr()
    assert "workloads.common" in captured.out and "is not a workload" not in captured.err


def test_run_with_missing_nsys_exits_2_with_the_error(tmp_path: Path, capsys) -> None:
    root = tiny_project(tmp_path)
    assert main(["run", "--root", str(root), "--nsys", "/nonexistent/nsys"]) == 2
    out = capsys.readouterr().out
    assert "nsys not found" in out and "ERROR" in out


def test_unknown_workload_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert main(["run", "nope", "--root", str(tiny_project(tmp_path))]) == 2
    assert "workload 'nope' not found" in capsys.readouterr().err


def test_baseline_update_records_a_baseline_its_run_compares_equal_to(
        tmp_path: Path, nsys_path: str, torch_module: object, capsys) -> None:
    root = tiny_project(tmp_path)
    update = subprocess.run([sys.executable, "-m", "perfgate", "baseline", "update", "tiny"], cwd=root,
                            capture_output=True, text=True, timeout=600)
    assert update.returncode == 0, update.stdout + update.stderr
    [baseline] = list((root / "baselines" / "tiny").glob("*.json"))
    assert json.loads(baseline.read_text())["provenance"]["command"] == "perfgate baseline update tiny"
    assert (root / ".perfgate" / "report" / "perfgate-report.json").exists()
    [run_dir] = list((root / ".perfgate" / "runs").iterdir())
    capsys.readouterr()
    assert main(["compare", str(baseline), str(run_dir / "result.json")]) == 0


def test_compare_of_h100_reverse_ladder_traces_names_the_removed_optimization(capsys) -> None:
    from perfgate.cli import main

    traces = TESTS / "fixtures" / "traces"
    full = str(traces / "reverse-ladder-full" / "trace.sqlite")
    assert main(["compare", full, str(traces / "reverse-ladder-no-workers" / "trace.sqlite"), "--warmup-steps", "0"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REGRESSED: phase.data_load.cpu_ms") and "likely change: workers" in out
    # removing the copy stream leaves step time unchanged on an H100: the gate does not fail (one
    # launch each of a data-bound loop whose 29 periods run from 14 to 62 ms: its step time moves
    # -5 % between them, its mean +2 %), the h2d phase regression is still reported and attributed
    assert main(["compare", full, str(traces / "reverse-ladder-no-overlap" / "trace.sqlite"), "--warmup-steps", "0"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(("PASS: step_time_ms", "IMPROVED: step_time_ms")) and "likely change: overlap stream" in out


def test_compare_refuses_a_baseline_with_nan_instead_of_passing_it(traces: Path, tmp_path: Path, capsys) -> None:
    """A NaN step time in a baseline made the primary metric NO-DATA and the gate passed (exit 0)."""
    trace = traces / "cpu-train-loop" / "trace.sqlite"
    main(["analyze", str(trace), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    baseline = {"format": "perfgate-baseline", "version": 2, "workload": "w", "variant": None,
                "machine_class": "cpu-x86_64", "launches": [{"metrics": {**doc["metrics"], "step_time_ms": "@"}}]}
    path = tmp_path / "cpu-x86_64.json"
    path.write_text(json.dumps(baseline).replace('"@"', "NaN"))
    assert main(["compare", str(path), str(trace)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"perfgate: error: {path}: launches[0].metrics.step_time_ms: expected a finite, non-negative number, got nan")
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"analyses": [{"metrics": {**doc["metrics"], "step_time_mean_ms": -4.0}}]}))
    assert main(["compare", str(trace), str(result)]) == 2
    assert "result.json: analyses[0].metrics.step_time_mean_ms: expected a finite, non-negative number, got -4.0" \
        in capsys.readouterr().err


def _unreadable(path: Path) -> list[str]:
    """``path`` made unreadable; the command prefix that runs perfgate without root's override."""
    import os
    import shutil

    path.chmod(0)
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # pragma: no cover - util-linux has it
        pytest.skip("running as root without setpriv: a file cannot be made unreadable")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}"]


@pytest.mark.parametrize("command", ["analyze", "compare"])
def test_an_unreadable_trace_is_an_error_naming_it_not_a_traceback(traces: Path, tmp_path: Path, command: str) -> None:
    locked = tmp_path / "locked.sqlite"
    locked.write_bytes((traces / "cpu-train-loop" / "trace.sqlite").read_bytes())
    prefix = _unreadable(locked)
    args = [str(locked)] if command == "analyze" else [str(traces / "cpu-train-loop" / "trace.sqlite"), str(locked)]
    proc = subprocess.run([*prefix, sys.executable, "-m", "perfgate", command, *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"perfgate: error: {locked}: Permission denied"


def _report_file(tmp_path: Path, **change: object) -> Path:
    from report_results import make_result

    from perfgate.records.model import Verdict
    from perfgate.report.json_report import render_report_json

    doc = render_report_json([make_result("w", Verdict.PASS)])
    doc["results"][0].update(change)
    for key in [k for k, v in change.items() if v is None]:
        del doc["results"][0][key]
    path = tmp_path / "perfgate-report.json"
    path.write_text(json.dumps(doc, default=str))
    return path


@pytest.mark.parametrize("change, problem", [
    ({"verdict": "SHINY"}, "results[0].verdict: 'SHINY' is not one of PASS, REGRESSED"),
    ({"workload": None}, "results[0].workload: missing"),
    ({"workload": "w\n## injected"}, "results[0].workload: 'w\\n## injected' is not a safe name"),
    ({"wall_s": float("nan")}, "results[0].wall_s: expected a finite, non-negative number, got nan"),
    ({"comparisons": [{"metric": "step_time_ms", "verdict": "PASS"}]}, "results[0].comparisons[0].direction: missing"),
])
def test_report_from_a_malformed_result_file_names_the_field(tmp_path: Path, capsys, change: dict, problem: str) -> None:
    """An unknown verdict or a missing key gave a traceback; a newline in a name injected a heading."""
    path = _report_file(tmp_path, **change)
    assert main(["report", "--from", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"perfgate: error: {path}: {problem}"), err


def test_report_on_a_full_disk_is_an_error_naming_the_file(tmp_path: Path, capsys) -> None:
    """A full disk gave a traceback and exit 1; /dev/full fails every write with ENOSPC."""
    comment = tmp_path / "comment.md"
    comment.symlink_to("/dev/full")
    assert main(["report", "--from", str(_report_file(tmp_path)), "--pr-comment", str(comment)]) == 2
    assert capsys.readouterr().err.strip() == f"perfgate: error: --pr-comment {comment}: cannot write: No space left on device"


def test_report_files_hit_by_a_full_disk_are_named_the_others_kept_and_run_exits_2(tmp_path: Path, capsys) -> None:
    """Reports that could not be written were a warning, and the run still exited 0 or 1."""
    from report_results import make_result

    from perfgate.commands.run import write_reports
    from perfgate.records.model import Verdict
    from perfgate.report import ReportWriteError, write_all

    out = tmp_path / "report"
    out.mkdir()
    (out / f".junit.xml.{os.getpid()}.tmp").symlink_to("/dev/full")   # the report's temp file
    with pytest.raises(ReportWriteError) as err:
        write_all([make_result("w", Verdict.PASS)], out, env={}, charts=False)
    assert str(err.value) == f"reports in {out} not all written (6 written): {out / 'junit.xml'}: No space left on device"
    assert sorted(p.name for p in out.iterdir()) == ["annotations.txt", "benchmark.json", "perfgate-report.json",
                                                     "pr-comment.md", "report.html", "summary.md"]
    (out / f".junit.xml.{os.getpid()}.tmp").symlink_to("/dev/full")   # the report's temp file
    with pytest.raises(ReportWriteError, match=f"{out / 'junit.xml'}: No space left on device"):
        write_reports([make_result("w", Verdict.PASS)], out)      # the gate run's: cmd_run then says so, exits 2


# ----------------------------------------------------------------------------- issue 16: honest errors


def test_compare_refuses_inputs_of_different_machines_or_workloads_unless_forced(traces: Path, tmp_path: Path,
                                                                                  capsys) -> None:
    cpu, gpu = traces / "cpu-train-loop" / "trace.sqlite", traces / "gpu-transformer" / "trace.sqlite"
    assert main(["compare", str(cpu), str(gpu), "--warmup-steps", "0"]) == 2   # was: REGRESSED, exit 1
    err = capsys.readouterr().err
    assert err.startswith("perfgate: error: BASELINE and CURRENT measured different machine classes: ")
    assert f"BASELINE is {cpu} (workload not recorded, machine class cpu-x86_64)" in err
    assert f"CURRENT is {gpu} (workload not recorded, machine class nvidia-h100-80gb-hbm3-x1)" in err
    assert "Pass --force to compare them anyway" in err
    assert main(["compare", str(cpu), str(gpu), "--warmup-steps", "0", "--force"]) == 1   # compared as asked
    assert capsys.readouterr().out.startswith("REGRESSED: step_time_ms +")

    main(["analyze", str(cpu), "--format", "json"])
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    documents = {}
    for name in ("a", "b"):
        documents[name] = tmp_path / f"{name}.json"
        documents[name].write_text(json.dumps({"format": "perfgate-baseline", "version": 2, "workload": name,
                                               "variant": None, "machine_class": "cpu-x86_64",
                                               "launches": [{"metrics": metrics}]}))
    assert main(["compare", str(documents["a"]), str(documents["b"])]) == 2
    err = capsys.readouterr().err
    assert "measured different workloads: BASELINE is" in err and "workload 'a', machine class cpu-x86_64" in err
    assert main(["compare", str(documents["a"]), str(documents["a"])]) == 0        # the same workload: compared
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"workload": "a", "variant": None, "machine": {"machine_class": "nvidia-a100-x8"},
                                  "analyses": [{"metrics": metrics}]}))
    assert main(["compare", str(documents["a"]), str(result)]) == 2
    assert "measured different machine classes" in capsys.readouterr().err


def test_compare_errors_name_its_own_tolerance_option(traces: Path, capsys) -> None:
    trace = str(traces / "cpu-train-loop" / "trace.sqlite")
    assert main(["compare", trace, trace, "--tolerance", "step_time_ms"]) == 2
    err = capsys.readouterr().err
    assert "option --tolerance: expected METRIC=SPEC" in err and "--perfgate-tolerance" not in err
    assert main(["compare", trace, trace, "--tolerance", "no_such_metric=5%"]) == 2   # was: accepted, exit 0
    assert "option --tolerance: no metric is named 'no_such_metric'" in capsys.readouterr().err


def test_run_names_where_a_bad_value_came_from(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tiny_project(tmp_path)
    monkeypatch.chdir(root)
    assert main(["run", "--tolerance", "step_time_ms"]) == 2
    assert "option --tolerance: expected METRIC=SPEC" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:                       # refused by the parser, naming the option
        main(["run", "--timeout", "-3"])
    assert exc.value.code == 2
    assert "argument --timeout: expected a positive number, got -3" in capsys.readouterr().err
    assert main(["run", "--tolerance", "stepp_time_ms=5%"]) == 2
    assert "option --tolerance: no metric is named 'stepp_time_ms'" in capsys.readouterr().err
    monkeypatch.setenv("PERFGATE_NSYS", str(tmp_path / "no-nsys-here"))
    assert main(["run", "--report-dir", str(tmp_path / "report")]) == 2
    out = capsys.readouterr().out
    assert (f"nsys not found: environment variable PERFGATE_NSYS names {tmp_path / 'no-nsys-here'}, "
            "which is not an executable file") in out                        # was: "given by option"
    (root / "pyproject.toml").write_text("[project]\nname = 'demo'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\n")
    assert main(["run"]) == 2
    assert f"[tool.perfgate] workloads_dir: {root / 'wl'} is not a folder" in capsys.readouterr().err


def test_no_step_ranges_hint_names_the_setting_of_each_command(traces: Path, capsys) -> None:
    trace = str(traces / "cpu-train-loop" / "trace.sqlite")
    assert main(["analyze", trace, "--step-pattern", "no such range"]) == 2
    err = capsys.readouterr().err
    assert "no NVTX range matches step_pattern 'no such range'" in err
    # `perfgate run` has no --step-pattern: the gate's setting is the workload's step_pattern
    assert ("step_pattern in [tool.perfgate.workloads.<name>] for the gate (perfgate run, pytest --perfgate), "
            "--step-pattern for perfgate analyze and compare") in err


def test_a_command_whose_module_cannot_be_imported_says_why(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """A missing dependency of ``perfgate report`` was swallowed: the command vanished and argparse
    answered "invalid choice"; it now names the import that failed (exit 2), and ``--help`` lists
    the command as unavailable."""
    import importlib

    import perfgate.cli as cli

    real = importlib.import_module

    def failing(name: str, *args: object) -> object:
        if name == "perfgate.commands.report":
            raise ImportError("No module named 'junit_xml'")
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", failing)
    assert main(["report", "--from", "r.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("perfgate: error: perfgate report cannot run: importing perfgate.commands.report failed "
                          "(No module named 'junit_xml')"), err
    assert "unavailable: No module named 'junit_xml'" in " ".join(cli.build_parser().format_help().split())


def test_analyze_and_its_errors_import_no_renderer_library() -> None:
    """``perfgate analyze`` (and the one-line error of any command) imported every report renderer
    through ``perfgate.report``, junit-xml among them: on the GPU machine, where junit-xml was not
    installed, an analyze error ended in a ModuleNotFoundError traceback."""
    import subprocess

    trace = TESTS / "fixtures" / "traces" / "gpu-transformer" / "trace.sqlite"
    code = ("import sys; from perfgate.cli import main; "
            f"codes = (main(['analyze', {str(trace)!r}, '--format', 'json']), main(['analyze', '/nonexistent.sqlite'])); "
            "loaded = sorted(m for m in ('junit_xml', 'perfgate.report.junit', 'perfgate.report.markdown', "
            "'perfgate.report.charts', 'matplotlib') if m in sys.modules); print(codes, loaded, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "(0, 2) []", done.stderr[-2000:]


def test_a_reader_that_goes_away_ends_the_command_quietly() -> None:
    """``perfgate analyze t.sqlite | head`` printed ``perfgate: error: a file: Broken pipe`` (seen on
    the GPU machine); it now ends without a word, exit 141 as for SIGPIPE."""
    trace = TESTS / "fixtures" / "traces" / "gpu-transformer" / "trace.sqlite"
    proc = subprocess.Popen([sys.executable, "-m", "perfgate", "analyze", str(trace)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()                      # as `head` does once it has its lines, here before the first
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""


def test_a_ctrl_c_while_the_options_are_read_exits_130_without_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A Ctrl-C while the command imported its modules and read its options (2 s on a loaded
    machine) escaped as a KeyboardInterrupt traceback from argparse."""
    import argparse

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt
    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", interrupted)
    try:
        code = main(["list"])
    except KeyboardInterrupt:   # not pytest's own Ctrl-C: the session goes on
        pytest.fail("the Ctrl-C escaped perfgate's main() as a KeyboardInterrupt")
    assert code == 130
    assert capsys.readouterr().err == "perfgate: interrupted\n"

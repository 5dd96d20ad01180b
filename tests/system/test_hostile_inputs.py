"""The second review of issue 17 (docs/measurements/review-17.md): the CLI and the plugin tried again, as a
hostile or unlucky user would, against bad files, bad configuration, full disks and hostile
names. Each test here is a finding of that review: it failed before its fix.

Most run in-process on the committed nsys 2022.4 export of a CPU training loop; the few that
need a launch use the real nsys and a small torch workload.
"""
from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

from perfgate.cli import main
from perfgate.errors import BaselineError, ConfigError, PerfgateError, TraceError
from perfgate.records.model import MachineInfo, Verdict, WorkloadResult

DEEP = "[" * 100_000 + "]" * 100_000          # valid JSON that Python's parser cannot descend
TINY = '''
import time
''' + NVTX + '''for _ in range(8):
    nvtx.range_push("step")
    for phase, ms in (("data_load", 2), ("forward", 4)):
        nvtx.range_push(phase); time.sleep(ms / 1000); nvtx.range_pop()
    nvtx.range_pop()
'''


@pytest.fixture()
def trace(repo_root: Path, tmp_path: Path) -> Path:
    """A writable copy of a real nsys 2022.4 export (a CPU training loop)."""
    copy = tmp_path / "trace.sqlite"
    shutil.copy(repo_root / "tests" / "fixtures" / "traces" / "cpu-train-loop" / "trace.sqlite", copy)
    return copy


def _edit(path: Path, sql: str, *args: object) -> Path:
    with sqlite3.connect(path) as db:
        db.execute(sql, args)
    return path


def _project(root: Path, extra: str = "") -> Path:
    (root / "wl").mkdir(parents=True, exist_ok=True)
    (root / "wl" / "tiny.py").write_text(TINY)
    (root / "pyproject.toml").write_text(
        f"[project]\nname = 'hostile'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\nlaunches = 1\ntimeout_s = 300\n{extra}")
    return root


def _no_traceback(capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return err


# ----------------------------------------------------------------------------- trace files


def test_a_corrupt_report_does_not_destroy_the_sqlite_export_beside_it(tmp_path: Path, nsys_path: str) -> None:
    """``perfgate analyze x.nsys-rep`` exports beside the report with nsys --force-overwrite, which
    deleted an existing x.sqlite before failing on a corrupt report: the user's export was lost."""
    from perfgate.system.nsys import export_sqlite

    report, export = tmp_path / "run.nsys-rep", tmp_path / "run.sqlite"
    export.write_text("the user's own export")
    os.utime(export, (0, 0))                      # older than the report: a re-export is attempted
    report.write_text("not an nsys report")
    with pytest.raises(TraceError, match="run.nsys-rep: nsys export to SQLite failed"):
        export_sqlite(report, Path(nsys_path))
    assert export.read_text() == "the user's own export"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.nsys-rep", "run.sqlite"]   # no partial file


def test_a_trace_whose_ranges_end_before_they_start_is_refused_by_compare(
        trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A corrupt export gave negative phase times and step range, compared as if measured: a
    slower run was reported IMPROVED (-619157.7 %) and the gate passed."""
    good = shutil.copy(trace, tmp_path / "good.sqlite")
    bad = _edit(trace, "UPDATE NVTX_EVENTS SET end = start - 1000")
    assert main(["compare", str(good), str(bad)]) == 2
    err = _no_traceback(capsys)
    assert f"{bad}: metrics." in err and "expected a finite, non-negative number, got -" in err
    assert main(["compare", str(bad), str(good)]) == 2


# ----------------------------------------------------------------------------- read-back files


@pytest.mark.parametrize("command", [
    ["compare", "{deep}", "{trace}"],
    ["compare", "{trace}", "{deep}"],
    ["report", "--from", "{deep}"],
    ["calibrate", "w", "--from-json", "{deep}"],
])
def test_json_nested_too_deep_for_the_parser_is_an_error_not_a_traceback(
        command: list[str], trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """RecursionError from json.loads escaped every reader: a traceback and exit 1 ("regression")."""
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    _project(tmp_path / "proj").joinpath("wl", "w.py").write_text(TINY)
    monkeypatch.chdir(tmp_path / "proj")
    argv = [a.format(deep=deep, trace=trace) for a in command]
    assert main(argv) == 2
    assert str(deep) in _no_traceback(capsys)


def test_a_baseline_nested_too_deep_is_a_baseline_error(tmp_path: Path) -> None:
    from perfgate.baselines.store import load_baseline

    path = tmp_path / "cpu-x86_64.json"
    path.write_text(DEEP)
    with pytest.raises(BaselineError, match="cpu-x86_64.json: not a JSON baseline"):
        load_baseline(path)


def test_a_zero_step_time_in_a_baseline_is_refused(tmp_path: Path) -> None:
    """step_time_ms = 0 (hand-edited) passed the finite/non-negative check and failed every run
    (REGRESSED, 0 ms -> 12.2 ms); a phase may take 0 ms, a step may not."""
    from perfgate.baselines.store import checked_metrics

    with pytest.raises(BaselineError, match=r"b.json: launches\[0\].metrics.step_time_ms: expected a positive step time, got 0"):
        checked_metrics({"step_time_ms": 0, "phase.x.cpu_ms": 0.0}, "b.json: launches[0].metrics")
    with pytest.raises(BaselineError, match="step_time_p90_ms: expected a positive step time"):
        checked_metrics({"step_time_ms": 5.0, "step_time_p90_ms": 0.0}, "b.json")
    assert checked_metrics({"step_time_ms": 5, "phase.x.cpu_ms": 0}, "b.json") == {"step_time_ms": 5.0, "phase.x.cpu_ms": 0.0}


def _baseline(workload: str = "tiny", machine_class: str = "cpu-x86_64", variant: str | None = None) -> dict:
    return {"format": "perfgate-baseline", "version": 2, "workload": workload, "variant": variant,
            "machine_class": machine_class, "launches": [{"metrics": {"step_time_ms": 6.0}, "step_durations_ms": [6.0]}]}


@pytest.mark.parametrize("doc, field", [(_baseline(workload="other"), "workload"),
                                        (_baseline(machine_class="nvidia-h100-x1"), "machine_class"),
                                        (_baseline(variant="fast"), "variant")])
def test_the_gate_refuses_a_baseline_file_of_another_workload_or_machine(
        doc: dict, field: str, tmp_path: Path) -> None:
    """A baseline copied by hand into baselines/tiny/<class>.json from another workload's or
    machine's folder was used to gate tiny (perfgate compare refused the same pair)."""
    from perfgate.settings.config import load_settings
    from perfgate.pipeline.workload_run import run_workload
    from perfgate.settings.workloads import discover_workloads

    root = _project(tmp_path, "machine_class = 'cpu-x86_64'\n")
    path = root / "baselines" / "tiny" / "cpu-x86_64.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(doc))
    settings = load_settings(root, env={})
    [spec] = discover_workloads(settings)
    result = run_workload(spec, settings)       # refused before any launch
    assert result.verdict == Verdict.ERROR
    assert result.error.startswith(f"{path}: {field}: the file is for ")
    assert not list(result.run_dir.glob("launch-*"))


def test_a_history_file_that_is_not_text_is_an_error(tmp_path: Path) -> None:
    from perfgate.commands.history import read_history

    path = tmp_path / "cpu-x86_64.jsonl"
    path.write_bytes(b"\xff\xfe\x00garbage\n")
    with pytest.raises(PerfgateError, match="cpu-x86_64.jsonl: not a perfgate history file"):
        read_history(path)
    path.write_text(DEEP + "\n")
    with pytest.raises(PerfgateError, match="cpu-x86_64.jsonl:1: not a JSON line"):
        read_history(path)


@pytest.mark.parametrize("text, message", [
    (b"\xf4\x00binary", "not a calibration.json"),
    (b'{"results": []}', "not a calibration.json"),                       # a perfgate-report.json
    (b'{"pools": {"aa": [{"step_time_ms": NaN}]}, "injected": {}}', r"pools.aa\[0\].step_time_ms: expected a finite"),
    (b'{"pools": {"aa": [], "+5%": []}, "injected": {}}', "no injected fraction"),
])
def test_calibrate_from_json_checks_what_it_reads(text: bytes, message: str, tmp_path: Path) -> None:
    """--from-json gave a UnicodeDecodeError or KeyError traceback, or used NaN launches."""
    from perfgate.commands.calibration_file import read_calibration

    path = tmp_path / "calibration.json"
    path.write_bytes(text)
    with pytest.raises(PerfgateError, match=message):
        read_calibration(path)


def test_calibrate_reads_back_what_it_wrote(tmp_path: Path) -> None:
    from perfgate.commands.calibration_file import read_calibration

    doc = {"pools": {"aa": [{"step_time_ms": 5.0}], "+5%": [{"step_time_ms": 5.3}]}, "injected": {"+5%": 0.05},
           "launch_wall_s": [3.2, 3.1], "phase": "forward", "tables": []}
    (tmp_path / "c.json").write_text(json.dumps(doc))
    assert read_calibration(tmp_path / "c.json") == {k: doc[k] for k in ("pools", "injected", "launch_wall_s", "phase")}


# ----------------------------------------------------------------------------- configuration


@pytest.mark.parametrize("content, message", [
    (b"\xff\xfe[tool.perfgate]\n", "pyproject.toml: not valid TOML: not UTF-8 text"),
    (b"tool = 5\n[project]\nname = 'x'\n", r"pyproject.toml \[tool\]: expected a table, got 5"),
    # numbers in args were accepted and passed on as strings (a later review)
    (b"[tool.perfgate.workloads.w]\nargs = [1, 2]\n", "args: expected a list of strings"),
])
def test_a_pyproject_perfgate_cannot_read_is_a_configuration_error(content: bytes, message: str, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """A pyproject.toml that is not UTF-8 gave a UnicodeDecodeError traceback, ``tool = 5`` an
    AttributeError one (exit 1 both)."""
    (tmp_path / "pyproject.toml").write_bytes(content)
    assert main(["run", "--root", str(tmp_path)]) == 2
    assert message.replace("\\", "") in _no_traceback(capsys).replace("\\", "")


def test_a_launch_count_with_zeros_too_many_is_refused(tmp_path: Path) -> None:
    """max_launches = 10**26 was accepted: every look then tests at alpha / 10**26, so the gate
    can never decide and launches for ever ('launch 1 of up to 100000000000000000000000000')."""
    from perfgate.settings.config import MAX_LAUNCHES, load_settings

    (tmp_path / "pyproject.toml").write_text(f"[tool.perfgate]\nmax_launches = {10 ** 26}\n")
    with pytest.raises(ConfigError, match=rf"\[tool.perfgate\] max_launches: expected a whole number <= {MAX_LAUNCHES}"):
        load_settings(tmp_path, env={})
    with pytest.raises(ConfigError, match="environment variable PERFGATE_LAUNCHES: expected a whole number <= "):
        load_settings(tmp_path, env={"PERFGATE_LAUNCHES": "5000", "PERFGATE_MAX_LAUNCHES": "5"})
    assert load_settings(tmp_path, env={"PERFGATE_MAX_LAUNCHES": "20"}).max_launches == 20


# ----------------------------------------------------------------------------- full disks


def _result(root: Path) -> WorkloadResult:
    machine = MachineInfo(machine_class="cpu-x86_64", gpu_model=None, gpu_count=0, driver=None, cuda=None,
                          torch=None, nsys=None)
    return WorkloadResult(workload="tiny", variant=None, verdict=Verdict.NEW, machine=machine, run_dir=root)


def test_a_full_disk_under_the_history_keeps_the_reports_and_names_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The history line could not be written (here: its file is a link to /dev/full, ENOSPC):
    the run printed ``perfgate: error: a file: No space left on device``, no summary and no
    reports, and the measured verdict was lost."""
    import perfgate.pipeline.workload_run as pipeline

    root = _project(tmp_path, "history_dir = 'hist'\n")
    history = root / "hist" / "tiny" / "cpu-x86_64.jsonl"
    history.parent.mkdir(parents=True)
    history.symlink_to("/dev/full")
    monkeypatch.setattr(pipeline, "run_workload", lambda spec, settings, **kw: _result(tmp_path))
    monkeypatch.chdir(root)
    code = main(["run"])
    err = _no_traceback(capsys)
    assert code == 2
    assert f"{history}: history not written: No space left on device" in err
    assert (root / ".perfgate" / "report" / "perfgate-report.json").is_file()   # the reports are still written


def test_a_baseline_that_cannot_be_written_is_named_and_the_old_one_kept(
        tmp_path: Path, nsys_path: str, torch_module: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk while writing a baseline said ``a file: No space left on device``."""
    import perfgate.pipeline.workload_run as pipeline
    from perfgate.settings.config import load_settings
    from perfgate.pipeline.workload_run import run_workload
    from perfgate.settings.workloads import discover_workloads

    root = _project(tmp_path)
    settings = load_settings(root, env={"PERFGATE_NSYS": nsys_path})
    [spec] = discover_workloads(settings)
    target = settings.baseline_dir / "tiny" / f"{pipeline.this_machine(settings.nsys, settings.machine_class).machine_class}.json"
    target.parent.mkdir(parents=True)
    target.write_text("the previous baseline")

    def full(path: Path, baseline: object) -> Path:
        raise OSError(28, "No space left on device")       # a write error names no file
    monkeypatch.setattr(pipeline, "write_baseline", full)
    result = run_workload(spec, settings, update_baseline=True)
    assert result.verdict == Verdict.ERROR
    assert result.error == f"{target}: baseline not written: No space left on device (the previous baseline, if any, is unchanged)"
    assert target.read_text() == "the previous baseline"
    assert (result.run_dir / "launch-0" / "trace.sqlite").is_file()   # the partial artifacts stay


def test_an_export_withheld_for_a_full_disk_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """When the redaction of the export fails (ENOSPC during VACUUM) the export is withheld; the
    error said ``nsys left no SQLite export``, which nsys had not."""
    import perfgate.capture.launch as capture
    import perfgate.capture.command as capture_command
    from perfgate.settings.config import load_settings
    from perfgate.records.model import Capture
    from perfgate.pipeline.workload_run import launch_analysis
    from perfgate.settings.workloads import discover_workloads

    root = _project(tmp_path)
    settings = load_settings(root, env={})
    [spec] = discover_workloads(settings)
    launch = tmp_path / "launch-0"

    def withheld(spec: object, settings: object, run_dir: Path, **kw: object) -> Capture:
        run_dir.mkdir(parents=True)
        (run_dir / "trace.sqlite.withheld.txt").write_text(
            "perfgate withheld trace.sqlite from the artifacts: it could not be checked for secrets "
            "(SQLite: database or disk is full).\nSee perfgate's docs/secrets.md.\n")
        return Capture(workload="tiny", run_dir=run_dir, command=(), report_path=None, sqlite_path=None,
                       log_path=run_dir / "workload.log", returncode=0, wall_s=1.0)
    monkeypatch.setattr(capture, "run_capture", withheld)
    with pytest.raises(TraceError, match=r"launch-0: perfgate withheld trace.sqlite from the artifacts: .*"
                                         r"\(SQLite: database or disk is full\)\. \(see .*trace.sqlite.withheld.txt\)"):
        launch_analysis(spec, settings, launch, 0, capture_command.TIMING)


# ----------------------------------------------------------------------------- hostile names


HOSTILE = "\x1b[2J\x1b[31m::error file=x::pwned ##[warning]y"


def test_range_names_reach_the_terminal_inert(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A phase named with an escape sequence cleared and recoloured the terminal, and one starting
    with ``::`` was read by the GitHub Actions runner as a workflow command (it trims the line's
    indentation first): both came out of ``perfgate analyze`` / ``compare`` / ``run`` verbatim."""
    base = shutil.copy(trace, tmp_path / "base.sqlite")
    _edit(trace, "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", HOSTILE)
    _edit(trace, "UPDATE NVTX_EVENTS SET end = end + (end - start) WHERE text = ?", HOSTILE)   # slower: named in the reason
    for argv in (["analyze", str(trace)], ["compare", str(base), str(trace), "--force"]):
        main(argv)
        out, err = capsys.readouterr()
        assert "phase" in out or "REGRESSED" in out
        assert "\x1b" not in out + err and "\\x1b[2J" in out
        assert not [line for line in (out + err).splitlines() if line.lstrip().startswith("::") or "##[" in line]


def test_terminal_text_and_annotation_messages_fold_control_characters() -> None:
    from perfgate.report.annotations import escape_data
    from perfgate.report.escape import ZERO_WIDTH_SPACE, terminal_text

    assert terminal_text("  ::add-mask::x\nok\x07 ##[error]y\r") == \
        f"  :{ZERO_WIDTH_SPACE}:add-mask::x\nok\\x07 #{ZERO_WIDTH_SPACE}#[error]y\\x0d"
    assert terminal_text("phase.forward.cpu_ms +3.0 % (5.00 ms -> 5.15 ms)\n\ttab") == \
        "phase.forward.cpu_ms +3.0 % (5.00 ms -> 5.15 ms)\n\ttab"
    assert escape_data("a\x1b[2Jb\nc%") == "a [2Jb%0Ac%25"


def test_an_unexpected_error_exits_2_with_one_line(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A bug anywhere in a command gave a traceback and exit 1, which CI reads as a regression."""
    from perfgate.commands import list_workloads

    def broken(args: object) -> int:
        raise RecursionError("maximum recursion depth exceeded")
    monkeypatch.setattr(list_workloads, "cmd_list", broken)
    assert main(["list"]) == 2
    err = _no_traceback(capsys)
    assert "perfgate: error: internal error (a bug in perfgate, please report it): RecursionError" in err
    monkeypatch.setenv("PERFGATE_DEBUG", "1")
    assert main(["list"]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_a_range_name_matplotlib_would_read_as_mathtext_leaves_the_charts_drawable(
        trace: Path, tmp_path: Path) -> None:
    """A phase named ``$\\frac{$`` was parsed as mathtext: the chart raised, and with it every
    report of the run (``reports not written``, exit 2 for a run that passed)."""
    pytest.importorskip("matplotlib")
    from perfgate.pipeline.inputs import analyze_file
    from perfgate.report.charts import render_charts

    _edit(trace, "UPDATE NVTX_EVENTS SET text = ? WHERE text = 'forward'", "$\\frac{$ \x1b[2J")
    result = WorkloadResult(workload="w", variant=None, verdict=Verdict.NEW, analyses=[analyze_file(trace)])
    charts = render_charts([result], tmp_path / "charts")
    assert charts and all(p.is_file() for p in charts.values())


# ----------------------------------------------------------------------------- interrupts


INTERRUPTED_CLEANING = """
import os, signal, sys, threading
from pathlib import Path
import perfgate.capture.launch as capture
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import discover_workloads

# a terminal's Ctrl-C reaches a process that handles SIGINT; one started by a shell's background job
# (`cmd &` without job control) inherits it ignored, and then no Ctrl-C is there to defer
signal.signal(signal.SIGINT, signal.default_int_handler)
root, launch, nsys = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
settings = load_settings(root, env={"PERFGATE_NSYS": nsys})
[spec] = discover_workloads(settings)
real = capture.clean_artifacts

def interrupted_clean(*args, **kwargs):
    # Ctrl-C as the cleaning starts, to the main thread: os.kill may hand it to another thread, whose
    # C handler a loaded machine may not run before the capture returned and the script ended
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    for _ in range(100):                    # bytecodes run: a pending handler would fire here
        pass
    return real(*args, **kwargs)

capture.clean_artifacts = interrupted_clean
try:
    capture.run_capture(spec, settings, launch)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_a_ctrl_c_while_a_launch_is_cleaned_waits_for_the_cleaning(
        tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    """A Ctrl-C (or SIGTERM) that arrived while the launch folder was being cleaned stopped the
    cleaning half-way: the raw .nsys-rep, with the secrets nsys records from the environment that
    launched it, stayed among the artifacts (seen with a Ctrl-C 0.3 s after the export appeared).
    The signal now waits for the cleaning, then interrupts."""
    import secrets as pysecrets
    import string
    import subprocess
    import sys

    import perfgate

    token = "ghp_" + "".join(pysecrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    root, launch = _project(tmp_path / "proj"), tmp_path / "launch"
    env = {**os.environ, "GITHUB_TOKEN": token, "PYTHONPATH": str(Path(perfgate.__file__).parent.parent)}
    proc = subprocess.run([sys.executable, "-c", INTERRUPTED_CLEANING, str(root), str(launch), nsys_path],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 130, proc.stderr[-2000:]
    files = [p for p in launch.iterdir() if p.is_file()]
    assert any(p.suffix == ".nsys-rep" for p in files)
    assert not [p.name for p in files if any(token[i:i + 8].encode() in p.read_bytes() for i in range(len(token) - 7))]


def test_a_ctrl_c_that_duckdb_turned_into_an_error_still_stops_the_run(
        trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB answers a Ctrl-C during a query with ``RuntimeError: Query interrupted``; the
    diagnosis's ``except Exception`` took it for a diagnosis bug, and the run went on (exit 0)."""
    import perfgate.diagnosis.one_run as one_run
    from perfgate.pipeline.inputs import diagnosed, analyze_file
    from perfgate.system.process_tree import swallowed_interrupt

    analysis = analyze_file(trace)

    def interrupted(*args: object, **kwargs: object) -> object:
        raise RuntimeError("Query interrupted")
    monkeypatch.setattr(one_run, "diagnose", interrupted)
    with pytest.raises(KeyboardInterrupt):
        diagnosed(analysis)
    assert swallowed_interrupt(ValueError("Query interrupted")) is None
    assert swallowed_interrupt(RuntimeError("boom")) is None


def test_a_history_files_strings_reach_the_terminal_inert(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """``perfgate history`` printed a history line's verdict, commit and time as they were: an
    escape sequence, and a newline followed by ``::warning::``, a workflow command."""
    root = _project(tmp_path, "history_dir = 'hist'\nmachine_class = 'cpu-x86_64'\n")
    history = root / "hist" / "tiny" / "cpu-x86_64.jsonl"
    history.parent.mkdir(parents=True)
    history.write_text(json.dumps({"format": "perfgate-history", "launches": [{"step_time_ms": 6.0}], "kind": "gate",
                                   "verdict": "\x1b[2J::error::pwned", "commit": "\n::warning::x", "time": "t"}) + "\n")
    monkeypatch.chdir(root)
    assert main(["history", "tiny"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and not [line for line in out.splitlines() if line.lstrip().startswith("::")]


def test_a_name_or_message_in_markdown_mentions_nobody() -> None:
    """``@org/team`` in a workload's message or a range name rendered into the job summary or the
    pull-request comment would notify that team; an ``@`` gets a zero-width space after it."""
    from perfgate.report.escape import ZERO_WIDTH_SPACE, md_cell_text, md_text

    for rendered in (md_text("forward slower: ask @octo-org/perf"), md_cell_text("@octocat")):
        assert "@" + ZERO_WIDTH_SPACE in rendered and "@o" not in rendered

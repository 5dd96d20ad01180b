"""Messages in the words of the command that printed them (issue 30, item 7; issue 32): each names
the option of the command in use (``perfgate run`` its ``--timeout``, ``perfgate baseline update``;
``pytest --perfgate`` its ``--perfgate-timeout``, ``--perfgate-update-baselines``), says what nsys's
own log says when nsys fails, names no ``baseline:`` that does not exist, and no phrase twice."""
from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

import pytest

from perfgate import cli
from perfgate.capture.launch import run_capture
from perfgate.capture.nsys_log import failure_cause, nsys_lines
from perfgate.errors import CaptureTimeoutError, WorkloadFailedError
from perfgate.baselines.store import baseline_from_analyses, write_baseline
from perfgate.pipeline.workload_run import run_workload
from perfgate.records.model import MachineInfo, Verdict, WorkloadResult
from perfgate.report.annotations import render_annotations
from perfgate.report.terminal import failure_message
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.system import nsys
from report_results import make_analysis
from layout import REPO

MACHINE_CLASS = "test-box"
WORKLOAD = "import time, sys\nif 'hang' in sys.argv:\n    time.sleep(600)\nprint('hi')\n"


def project(root: Path, baseline_version: int | None = None) -> Path:
    """A project with workload ``w`` (and, with ``baseline_version``, a baseline of that format)."""
    (root / "workloads").mkdir(parents=True)
    (root / "workloads" / "w.py").write_text(WORKLOAD)
    (root / "pyproject.toml").write_text(f"[tool.perfgate]\nmachine_class = '{MACHINE_CLASS}'\n")
    if baseline_version is not None:
        path = root / "baselines" / "w" / f"{MACHINE_CLASS}.json"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"format": "perfgate-baseline", "version": baseline_version, "workload": "w",
                                    "machine_class": MACHINE_CLASS, "launches": [{"metrics": {"step_time_ms": 10.0}}]}))
    return root


def test_a_future_baseline_under_perfgate_run_names_perfgate_baseline_update(tmp_path: Path, capsys) -> None:
    root = project(tmp_path, baseline_version=3)
    assert cli.main(["run", "--root", str(root), "w"]) == 2
    out = capsys.readouterr().out
    assert ("baseline format version 3 is not supported by this perfgate (it reads version 2): it was written by a "
            "newer perfgate; upgrade perfgate, or re-record it on the gate's machine: perfgate baseline update w") in out
    assert "--perfgate-" not in out


def test_a_future_baseline_under_pytest_names_the_pytest_option(pytester: pytest.Pytester) -> None:
    project(pytester.path, baseline_version=3)
    result = pytester.runpytest_subprocess("--perfgate", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert ("re-record it on the gate's machine: pytest --perfgate --perfgate-update-baselines "
            "--perfgate-workload w") in out
    assert "perfgate baseline update" not in out


def test_the_record_command_and_options_follow_the_command_in_use(tmp_path: Path) -> None:
    root = project(tmp_path)
    cli_settings = load_settings(root, env={}, option_prefix="")
    pytest_settings = load_settings(root, env={})
    assert (cli_settings.option("timeout_s"), pytest_settings.option("timeout_s")) == ("--timeout", "--perfgate-timeout")
    assert cli_settings.option("alpha") == "alpha in [tool.perfgate]"     # no option: its key
    assert cli_settings.record_command("w[amp]") == "perfgate baseline update 'w[amp]'"
    assert pytest_settings.record_command("w") == "pytest --perfgate --perfgate-update-baselines --perfgate-workload w"
    # a NEW result's annotation says how to record, as the run that made it would
    new = WorkloadResult(workload="w", verdict=Verdict.NEW, analyses=[make_analysis([10.0, 11.0], {})],
                         record_command=pytest_settings.record_command("w"))
    [line] = render_annotations([new])
    assert line.endswith("record one: `pytest --perfgate --perfgate-update-baselines --perfgate-workload w`")
    [line] = render_annotations([WorkloadResult(workload="w", verdict=Verdict.NEW)])   # an older report
    assert line.endswith("record one: `perfgate baseline update`")


def test_an_error_names_the_baseline_only_when_there_is_one(tmp_path: Path, capsys) -> None:
    """An ERROR printed ``baseline: <path>`` of a file that did not exist (issue 32)."""
    root = project(tmp_path)
    settings = load_settings(root, env={}, overrides={"nsys": "/nonexistent/nsys"}, option_prefix="")
    spec = WorkloadSpec(name="w", module="workloads.w")
    result = run_workload(spec, settings)
    assert result.verdict is Verdict.ERROR and result.baseline_path is None
    assert "baseline:" not in failure_message(result)
    path = settings.baseline_dir / "w" / f"{MACHINE_CLASS}.json"
    machine = MachineInfo(machine_class=MACHINE_CLASS, gpu_model=None, gpu_count=0, driver=None, cuda=None,
                          torch=None, nsys=None)
    write_baseline(path, baseline_from_analyses("w", [make_analysis([10.0, 11.0], {})], machine, {}))
    result = run_workload(spec, settings)
    assert result.verdict is Verdict.ERROR and f"baseline: {path}" in failure_message(result)


def test_nsys_not_found_is_said_once_naming_the_option_of_the_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    root = project(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("PERFGATE_NSYS", raising=False)
    monkeypatch.setattr(nsys, "SEARCH_GLOBS", ())
    assert cli.main(["run", "--root", str(root), "w"]) == 2
    out = capsys.readouterr().out
    assert out.count("nsys not found") == 1
    assert "nsys not found; looked in $PATH. Install Nsight Systems or set PERFGATE_NSYS / --nsys to its path" in out
    assert cli.main(["run", "--root", str(root), "w", "--nsys", str(tmp_path)]) == 2
    out = capsys.readouterr().out
    assert out.count("nsys not found") == 1
    assert f"nsys not found: option --nsys names {tmp_path}, which is not an executable file" in out


def test_what_nsys_says_when_it_fails_is_quoted_with_its_cause(tmp_path: Path) -> None:
    agent = "Some workload output\nAgent launcher failed.\n"
    assert nsys_lines(agent) == ["Agent launcher failed."]
    missing = tmp_path / "gone"
    assert failure_cause(agent, {"TMPDIR": str(missing)}) == (
        f'nsys\'s log says "Agent launcher failed.": nsys could not start its agent because TMPDIR={missing} does '
        "not exist (nsys keeps its session files in TMPDIR): create the folder or unset TMPDIR")
    assert failure_cause(agent, {}).startswith('nsys\'s log says "Agent launcher failed.": nsys could not start its '
                                               "agent (a temporary folder it cannot use: ")
    reset = "Error: Connection reset by peer\n"
    assert failure_cause(reset, {}) == ('nsys\'s log says "Error: Connection reset by peer": nsys lost its connection '
                                        "to its agent (another nsys session on this machine at the same time; a retry "
                                        "usually succeeds)")
    assert failure_cause("Traceback ...\nValueError: x\n", {}).startswith("nsys wrote no line perfgate knows")


def test_a_missing_tmpdir_no_longer_stops_the_real_nsys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        nsys_path: str) -> None:
    """nsys 2022.4 with a TMPDIR that does not exist says "Agent launcher failed." and nothing else.
    Each capture now runs in a private folder (perfgate.capture.private_dir, in the system's temporary
    folder: /tmp where $TMPDIR is not one) that nsys and the workload get as TMPDIR, so the capture
    succeeds; failure_cause still explains that line when nsys says it for other reasons (above)."""
    root = project(tmp_path / "p")
    missing = tmp_path / "no-such-tmp"
    monkeypatch.setenv("TMPDIR", str(missing))
    monkeypatch.setattr(tempfile, "tempdir", None)      # gettempdir() looks at $TMPDIR again
    settings = load_settings(root, env={}, option_prefix="")
    capture = run_capture(WorkloadSpec(name="w", module="workloads.w"), settings, tmp_path / "launch-0")
    assert capture.returncode == 0 and capture.sqlite_path is not None and capture.sqlite_path.is_file()
    assert not missing.exists()


def test_a_timeout_names_the_timeout_option_of_the_command(tmp_path: Path, nsys_path: str) -> None:
    root = project(tmp_path / "p")
    settings = load_settings(root, env={}, option_prefix="")
    with pytest.raises(CaptureTimeoutError) as err:
        run_capture(WorkloadSpec(name="w", module="workloads.w", args=("hang",), timeout_s=3), settings,
                    tmp_path / "launch-0")
    assert "(timeout_s in [tool.perfgate] or --timeout)" in str(err.value)
    assert "--perfgate-timeout" not in str(err.value)


def test_no_message_of_the_library_names_a_pytest_option_by_hand() -> None:
    """Options are spelled by Settings.option / record_command (or by the plugin itself): a literal
    ``--perfgate-...`` in a message of the library was what ``perfgate run`` printed (issue 30)."""
    package = REPO / "perfgate"
    allowed = {"plugin.py", "config.py", "options.py", "metric_names.py"}   # pytest's own side, and docstrings
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.name in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"[\"'].*--perfgate-[a-z]", line) and not line.strip().startswith(("#", '"""', "``")):
                found.append(f"{path.relative_to(package)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)

"""The nsys command line (pure) and real captures under nsys: artifacts, self report, failures,
timeouts that end the whole process tree (more in test_process_tree.py), and a missing nsys."""
from __future__ import annotations

import os
import sqlite3
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

from perfgate.capture.autostep.install import site_dir
from perfgate.capture.command import (
    PROFILE, capture_environment, nsys_command, profile_launch_wanted, pytorch_trace_mode, resolve_trace,
    workload_command,
)
from perfgate.capture.launch import parse_self_report, run_capture
from perfgate.errors import CaptureTimeoutError, ConfigError, NsysNotFoundError, WorkloadFailedError
from perfgate.settings.config import Settings, load_settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.system.nsys import supports_option

TINY = '''
import json, os, subprocess, sys, time
mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
if mode == "crash":
    print("loading the model...")
    print("RuntimeError: simulated out of memory", file=sys.stderr)
    sys.exit(3)
if mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    open("child.pid", "w").write(str(child.pid))
    time.sleep(600)
''' + NVTX + '''for _ in range(6):
    nvtx.range_push("step")
    for phase, ms in (("data_load", 2), ("forward", 8)):
        nvtx.range_push(phase); time.sleep(ms / 1000); nvtx.range_pop()
    nvtx.range_pop()
print("PERFGATE_SELF_REPORT " + json.dumps({"workload": "tiny", "steps": 6, "batch_size": 4,
      "env_secret": os.environ.get("MY_API_TOKEN"), "autostep": "perfgate.capture.autostep.install" in sys.modules}))
'''


def tiny_project(root: Path) -> Settings:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'tiny'\n")
    (root / "tinywl.py").write_text(TINY)
    return load_settings(root, env={}, overrides={"timeout_s": 120})


SPEC = WorkloadSpec(name="tiny", module="tinywl")


@pytest.fixture(scope="module")
def captured(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module: object):
    root = tmp_path_factory.mktemp("capture")
    settings = tiny_project(root)
    os.environ["MY_API_TOKEN"] = "ghp_" + "x" * 36
    try:
        capture = run_capture(SPEC, settings, root / "runs" / "launch-0")
    finally:
        del os.environ["MY_API_TOKEN"]
    return capture


def test_command_has_trace_set_export_and_output() -> None:
    cmd = nsys_command("/opt/nsys", SPEC, Path("/r/launch-0/trace"), trace="nvtx,osrt", python="py")
    assert cmd == ["/opt/nsys", "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
                   "--export=sqlite", "-o", "/r/launch-0/trace", "-f", "true", "py", "-m", "tinywl"]


def test_capture_ranges_add_their_switches() -> None:
    cuda = nsys_command("nsys", SPEC, Path("o"), trace="cuda,nvtx,osrt", capture_range="cudaProfilerApi")
    assert "--capture-range=cudaProfilerApi" in cuda and "--capture-range-end=stop" in cuda
    nvtx = nsys_command("nsys", SPEC, Path("o"), trace="nvtx", capture_range="nvtx:measure")
    i = nvtx.index("--capture-range=nvtx")
    assert nvtx[i + 1:i + 3] == ["-p", "measure"] and "--capture-range-end=stop" in nvtx
    assert capture_environment({"PATH": "/bin"}, "nvtx:measure")["NSYS_NVTX_PROFILER_REGISTER_ONLY"] == "0"


def test_pytorch_mode_adds_the_nsys_flag_before_the_output() -> None:
    cmd = nsys_command("nsys", SPEC, Path("o"), trace="cuda,nvtx", pytorch="functions-trace", python="py")
    assert cmd[:6] == ["nsys", "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
                       "--pytorch=functions-trace"]
    assert not any(a.startswith("--pytorch") for a in nsys_command("nsys", SPEC, Path("o"), trace="nvtx"))


def test_nsys_2022_4_has_no_pytorch_option(nsys_path: str) -> None:
    assert supports_option(nsys_path, "--pytorch") is False
    assert supports_option(nsys_path, "--cpuctxsw") and supports_option(nsys_path, "--trace")


def test_pytorch_trace_setting_against_an_nsys_without_the_option(nsys_path: str) -> None:
    assert pytorch_trace_mode("off", nsys_path) is None
    assert pytorch_trace_mode("auto", nsys_path) is None
    if supports_option(nsys_path, "--pytorch"):  # pragma: no cover - newer nsys
        assert pytorch_trace_mode("autograd-nvtx", nsys_path) == "autograd-nvtx"
    else:
        with pytest.raises(ConfigError, match="pytorch_trace = 'functions-trace' needs nsys profile --pytorch"):
            pytorch_trace_mode("functions-trace", nsys_path)


def test_autostep_environment_puts_its_site_first_and_keeps_pythonpath() -> None:
    site = site_dir()
    env = capture_environment({"PATH": "/bin", "PYTHONPATH": f"/a{os.pathsep}/b"})
    assert env["PERFGATE_AUTOSTEP"] == "1"
    assert env["PYTHONPATH"] == os.pathsep.join([site, "/a", "/b"])
    assert Path(site, "sitecustomize.py").is_file()
    assert capture_environment({"PATH": "/bin"})["PYTHONPATH"] == site
    again = capture_environment({"PYTHONPATH": env["PYTHONPATH"]})  # a nested perfgate
    assert again["PYTHONPATH"] == env["PYTHONPATH"]


def test_autostep_off_sets_the_switch_off_and_leaves_pythonpath() -> None:
    env = capture_environment({"PYTHONPATH": "/a", "PERFGATE_AUTOSTEP": "1"}, autostep=False)
    assert env["PERFGATE_AUTOSTEP"] == "0" and env["PYTHONPATH"] == "/a"
    assert "PYTHONPATH" not in capture_environment({"PATH": "/bin"}, autostep=False)


def test_the_threads_setting_fixes_the_workloads_cpu_threads(tmp_path: Path) -> None:
    """``threads`` sets OMP_NUM_THREADS and MKL_NUM_THREADS (torch's intra-op threads) over what
    perfgate inherited; unset, the workload inherits them as they are."""
    base = {"PATH": "/bin", "OMP_NUM_THREADS": "8"}
    assert capture_environment(base)["OMP_NUM_THREADS"] == "8" and "MKL_NUM_THREADS" not in capture_environment(base)
    env = capture_environment(base, threads=1)
    assert (env["OMP_NUM_THREADS"], env["MKL_NUM_THREADS"]) == ("1", "1")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.perfgate]\nthreads = 2\n")
    assert load_settings(tmp_path, env={}).threads == 2
    assert load_settings(tmp_path, env={"PERFGATE_THREADS": "1"}).threads == 1
    with pytest.raises(ConfigError, match="PERFGATE_THREADS.*expected a whole number >= 1"):
        load_settings(tmp_path, env={"PERFGATE_THREADS": "0"})


def test_torchrun_workloads_run_through_torch_distributed() -> None:
    spec = WorkloadSpec(name="ddp", module="workloads.ddp", args=("--steps", "3"), launcher="torchrun", nproc=2)
    assert workload_command(spec, python="py", extra_args=["--x"]) == [
        "py", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "workloads.ddp", "--steps", "3", "--x"]


def test_timing_launches_trace_nvtx_only_and_the_profile_launch_cuda() -> None:
    # timing launches measure what the bare run does: nvtx only, with or without a GPU
    assert resolve_trace("auto", 0) == "nvtx" and resolve_trace("auto", 2) == "nvtx"
    assert resolve_trace("auto", 2, PROFILE) == "cuda,nvtx"
    assert resolve_trace("auto", 0, PROFILE) == "nvtx"             # no GPU: nothing to trace
    assert resolve_trace("cuda,nvtx,osrt", 2) == "cuda,nvtx,osrt"  # a set the user gives: every launch
    assert resolve_trace("cuda,nvtx,osrt", 2, PROFILE) == "cuda,nvtx,osrt"


def test_the_profile_launch_is_taken_only_with_a_gpu_and_trace_auto(tmp_path: Path) -> None:
    settings = load_settings(tmp_path, env={})
    assert profile_launch_wanted(settings, 1) and not profile_launch_wanted(settings, 0)
    assert not profile_launch_wanted(replace(settings, trace="cuda,nvtx"), 1)
    assert not profile_launch_wanted(replace(settings, profile="off"), 1)


def test_environment_loses_secrets_and_their_copies() -> None:
    env = capture_environment({"PATH": "/bin", "GITHUB_TOKEN": "ghp_" + "a" * 36, "COPY": "ghp_" + "a" * 36})
    assert env["PATH"] == "/bin" and env["PYTHONUNBUFFERED"] == "1"
    assert "GITHUB_TOKEN" not in env and "COPY" not in env


def test_self_report_is_the_last_marked_line() -> None:
    text = 'noise\nPERFGATE_SELF_REPORT {"steps": 1}\nmore\nPERFGATE_SELF_REPORT {"steps": 2}\n'
    assert parse_self_report(text) == {"steps": 2}
    assert parse_self_report("nothing here") is None


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_capture_keeps_report_export_command_and_log(captured) -> None:
    launch = captured.run_dir
    assert captured.returncode == 0
    assert captured.report_path == launch / "trace.nsys-rep" and captured.report_path.stat().st_size > 0
    assert captured.sqlite_path == launch / "trace.sqlite"
    assert (launch / "command.txt").read_text().split()[1:3] == ["profile", "--trace=nvtx"]
    assert "PERFGATE_SELF_REPORT" in captured.log_path.read_text()
    with sqlite3.connect(captured.sqlite_path) as db:
        names = {row[0] for row in db.execute("SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL")}
    assert {"step", "data_load", "forward"} <= names


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_capture_parses_self_report_and_hides_secrets_from_the_workload(captured) -> None:
    assert captured.self_report == {"workload": "tiny", "steps": 6, "batch_size": 4, "env_secret": None,
                                    "autostep": True}  # autostep's sitecustomize ran in the workload
    assert b"ghp_xxxx" not in captured.sqlite_path.read_bytes()


def test_failing_workload_reports_exit_code_and_output_tail(tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    settings = tiny_project(tmp_path)
    spec = WorkloadSpec(name="tiny", module="tinywl", args=("crash",))
    with pytest.raises(WorkloadFailedError) as err:
        run_capture(spec, settings, tmp_path / "launch-0")
    text = str(err.value)
    assert "workload tiny exited with code 3" in text
    assert "RuntimeError: simulated out of memory" in text
    assert str(tmp_path / "launch-0" / "workload.log") in text


def test_timeout_ends_the_workloads_child(tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    settings = tiny_project(tmp_path)
    spec = WorkloadSpec(name="tiny", module="tinywl", args=("hang",), timeout_s=8)
    started = time.monotonic()
    with pytest.raises(CaptureTimeoutError, match="ran past its timeout of 8 s"):
        run_capture(spec, settings, tmp_path / "launch-0")
    assert time.monotonic() - started < 60
    child = int((tmp_path / "child.pid").read_text())
    time.sleep(0.5)
    assert not _alive(child), "the workload's child process outlived the timeout"


def test_a_timeouts_message_says_the_traceback_under_it_is_the_workloads(tmp_path: Path, nsys_path: str) -> None:
    """At the timeout nsys is asked to finish (SIGINT) and stops the workload with SIGINT: the
    workload's own KeyboardInterrupt traceback ended the log's tail printed under perfgate's
    message, unlabelled, and read as perfgate's crash. The tail is now said to be the workload's
    output and nsys's, the traceback nsys's stopping the workload."""
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'tiny'\n")
    (tmp_path / "sleepy.py").write_text("import time\nprint('training...', flush=True)\ntime.sleep(600)\n")
    settings = load_settings(tmp_path, env={})
    with pytest.raises(CaptureTimeoutError) as err:
        run_capture(WorkloadSpec(name="sleepy", module="sleepy", timeout_s=6), settings, tmp_path / "launch-0")
    text = str(err.value)
    label = ("the last lines of the workload's output and nsys's ({}); the KeyboardInterrupt traceback is the "
             "workload's own: nsys stopped it with SIGINT when perfgate ended the launch at its timeout, and it "
             "shows where the workload was:").format(tmp_path / "launch-0" / "workload.log")
    assert label in text.splitlines(), text
    quoted = text.split(label, 1)[1]
    assert "training..." in quoted and "Traceback (most recent call last)" in quoted and "time.sleep(600)" in quoted
    assert "Traceback" not in text.split(label, 1)[0]


def test_stopped_output_names_a_traceback_only_where_there_is_one() -> None:
    from perfgate.capture.launch import stopped_output

    log = Path("/x/workload.log")
    plain = stopped_output("step 1\nstep 2\n", log, "at its timeout")
    assert plain == "the last lines of the workload's output and nsys's (/x/workload.log):\nstep 1\nstep 2"
    traced = stopped_output('Traceback (most recent call last):\n  File "w.py", line 3\nKeyboardInterrupt\n', log,
                            "at its timeout")
    assert traced.splitlines()[0].endswith("perfgate ended the launch at its timeout, and it shows where the workload was:")


def test_missing_nsys_is_reported_before_anything_runs(tmp_path: Path) -> None:
    settings = load_settings(tiny_project(tmp_path).root, env={}, overrides={"nsys": "/nonexistent/nsys"})
    with pytest.raises(NsysNotFoundError, match="/nonexistent/nsys"):
        run_capture(SPEC, settings, tmp_path / "launch-0")
    assert not (tmp_path / "launch-0").exists()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # pragma: no cover - non-Linux
        return sys.platform != "linux"


def test_log_tail_makes_workflow_commands_and_terminal_controls_inert() -> None:
    from perfgate.capture.launch import log_tail

    text = "ok\n::error title=x::fake failure\n  ::add-mask::abc\n\x1b[31mred\x1b[0m\x07\n"
    assert log_tail(text).splitlines() == ["ok", "(log) ::error title=x::fake failure", "(log)   ::add-mask::abc", "red"]


def test_an_nsys_that_never_started_the_workload_is_not_blamed_on_it(tmp_path: Path, nsys_path: str) -> None:
    """nsys 2022.4 sometimes fails to start beside other nsys sessions (``ClientProxy::GetLocalEndpoint``,
    exit 1, no report); the error said "workload tiny exited with code 1". Here an nsys whose
    ``profile`` fails that way (the real nsys for everything else) must be named instead."""
    import dataclasses

    wrapper = tmp_path / "bin" / "nsys"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = profile ]; then\n"
                       "  echo 'ClientProxy::GetLocalEndpoint: failed to connect' >&2; exit 1\nfi\n"
                       f"exec {nsys_path} \"$@\"\n")
    wrapper.chmod(0o755)
    settings = dataclasses.replace(tiny_project(tmp_path / "project"), nsys=str(wrapper))
    with pytest.raises(WorkloadFailedError) as err:
        run_capture(SPEC, settings, tmp_path / "launch-0")
    text = str(err.value)
    assert text.startswith("nsys exited with code 1 and wrote no report for workload tiny: nsys's log says "
                           "\"ClientProxy::GetLocalEndpoint: failed to connect\": nsys lost its connection to its agent")
    assert "ClientProxy::GetLocalEndpoint" in text
    assert "(after 3 attempts: " in text     # a transient reason: taken again, twice


def test_a_transient_nsys_failure_is_captured_again_and_said(tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    """Beside other nsys sessions nsys 2022.4 lost its agent ("Connection to the Agent lost.", exit 0,
    no report) and the launch failed, throwing away a recording. Here an nsys whose first ``profile``
    fails that way (the real nsys afterwards) must give the launch on the second attempt, and say so."""
    import dataclasses

    flag = tmp_path / "failed-once"
    wrapper = tmp_path / "bin" / "nsys"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = profile ] && [ \"$2\" != --help ] && [ ! -e " + str(flag) + " ]; then\n"
                       f"  : > {flag}; echo 'Connection to the Agent lost.' >&2; exit 0\nfi\n"
                       f"exec {nsys_path} \"$@\"\n")
    wrapper.chmod(0o755)
    settings = dataclasses.replace(tiny_project(tmp_path / "project"), nsys=str(wrapper))
    said: list[str] = []
    capture = run_capture(SPEC, settings, tmp_path / "launch-0", progress=said.append)
    assert capture.retried == ("Connection to the Agent lost.",)
    assert capture.sqlite_path is not None and capture.sqlite_path.is_file()
    assert len(said) == 1 and "nsys failed (Connection to the Agent lost.); capturing again in 0 s (attempt 2 of 3)" in said[0]
    assert "Connection to the Agent lost." in (tmp_path / "launch-0" / "workload.attempt-1.log").read_text()
    assert "PERFGATE_SELF_REPORT" in (tmp_path / "launch-0" / "workload.log").read_text()

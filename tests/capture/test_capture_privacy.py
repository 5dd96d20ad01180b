"""No raw capture is left anywhere, whatever ends a launch: ``perfgate run`` of a workload that
ignores SIGTERM, under the real nsys, with a GitHub and a Hugging Face token in perfgate's own
environment (nsys records it), ended by its timeout, Ctrl-C, SIGTERM or SIGKILL.

While the workload runs, nsys's files in the capture's private folder (mode 0700) hold the token:
the control that shows there is something to leak. Afterwards no file in TMPDIR, the project (its
artifacts), /dev/shm or ~/.nsight* holds it, the private folder is gone, and
the cleaned trace and log are kept (a SIGKILLed perfgate cannot clean: its capture is dropped).
A private folder left by a tree killed all at once (perfgate and its supervisor) is removed by
the next capture.
A workload that leaves a setsid daemon is gated in its own time (nsys --wait=primary; the
supervisor ends the daemon)."""
from __future__ import annotations

import contextlib
import os
import re
import secrets as pysecrets
import signal
import stat
import string
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

# it kills nsys (timeouts, signals, hangs): alone on the machine (tests/conftest.py)
pytestmark = pytest.mark.nsys_alone

ALNUM = string.ascii_letters + string.digits

# It also names a range after the token (LEAK_SEED is the token reversed: no secret by name or
# shape), so that nsys's raw capture surely holds it: whether nsys records perfgate's environment
# varies from run to run.
STUBBORN = '''
import os, signal, time
from pathlib import Path
''' + NVTX + '''signal.signal(signal.SIGTERM, signal.SIG_IGN)          # a workload that ignores SIGTERM
ready = Path(os.environ["LEAK_DIR"]) / "ready"
name = os.environ["LEAK_SEED"][::-1]
for i in range(1000000):
    nvtx.range_push("step"); time.sleep(0.02); nvtx.range_pop()
    nvtx.range_push(name); nvtx.range_pop()
    if i == 20:
        ready.write_text("1")
'''

DAEMON = '''
import os, sys, time
from pathlib import Path
''' + NVTX + '''out = Path(os.environ["LEAK_DIR"])
if os.fork() == 0:              # a daemon: double fork, new session (setsid), re-parented away
    os.setsid()
    if os.fork() == 0:
        (out / "daemon.pid").write_text(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
for _ in range(30):
    nvtx.range_push("step"); time.sleep(0.01); nvtx.range_pop()
'''


def _token(prefix: str, n: int) -> str:
    return prefix + "".join(pysecrets.choice(ALNUM) for _ in range(n))


def leak_project(root: Path, timeout_s: int) -> Path:
    (root / "wl").mkdir(parents=True)
    (root / "wl" / "stubborn.py").write_text(STUBBORN)
    (root / "wl" / "daemon.py").write_text(DAEMON)
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'leaks'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\nlaunches = 1\n"
        f"timeout_s = {timeout_s}\n")
    return root


def _needles(tokens: list[str]) -> list[bytes]:
    return [form for t in tokens for form in (t.encode(), t.encode("utf-16-le"))]


def holding(places: list[Path], tokens: list[str]) -> list[Path]:
    """Every readable file under ``places`` that holds one of ``tokens`` (UTF-8 or UTF-16)."""
    needles, found = _needles(tokens), []
    for place in places:
        files = [place] if place.is_file() else (place.rglob("*") if place.is_dir() else [])
        for path in files:
            try:
                if path.is_file() and not path.is_symlink() and any(n in path.read_bytes() for n in needles):
                    found.append(path)
            except OSError:
                continue
    return found


def machine_places(tmpdir: Path, project: Path) -> list[Path]:
    """Where perfgate or its nsys could have written: TMPDIR, the project (artifacts), nsys's shared
    memory and its files in the home folder. Not /tmp/nvidia nor /tmp/nsys-report-*: this nsys
    runs with a private TMPDIR, and other nsys sessions of the machine, which record every
    process's environment (perfgate's included), write their own files there."""
    home = Path.home()
    return [tmpdir, project, Path("/dev/shm"), *home.glob(".nsight*"), home / ".config" / "NVIDIA Corporation"]


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)   # a background test run inherits SIGINT ignored


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _wait_for_raw(tmpdir: Path, tokens: list[str], timeout_s: float = 180) -> None:
    """Until nsys's files in the private folder (its raw capture, the injection's buffer) hold a
    token: the control that there is something to leak (later on a loaded machine)."""
    deadline = time.monotonic() + timeout_s
    while not holding([tmpdir], tokens):
        assert time.monotonic() < deadline, "control: nsys's files never held the token"
        time.sleep(0.5)


@pytest.mark.parametrize("ending, code", [("timeout", 2), ("SIGINT", 130), ("SIGTERM", 143), ("SIGKILL", -9)])
def test_no_file_holds_a_token_after_the_launch_ends(tmp_path: Path, nsys_path: str, torch_module: object,
                                                     ending: str, code: int) -> None:
    project = leak_project(tmp_path / "project", timeout_s=25 if ending == "timeout" else 300)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    tokens = [_token("ghp_", 36), _token("hf_", 34)]
    env = {**os.environ, "GITHUB_TOKEN": tokens[0], "HF_TOKEN": tokens[1], "TMPDIR": str(tmpdir),
           "LEAK_DIR": str(tmp_path), "LEAK_SEED": tokens[0][::-1]}
    gate = subprocess.Popen([sys.executable, "-m", "perfgate", "run", "stubborn"], cwd=project, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=_default_sigint)
    try:
        _wait_for(tmp_path / "ready", gate)
        private = list(tmpdir.glob("perfgate-capture-*"))
        assert len(private) == 1 and stat.S_IMODE(private[0].stat().st_mode) == 0o700
        _wait_for_raw(tmpdir, tokens)
        assert not holding([project], tokens)    # nothing raw in the artifacts while it runs
        if ending != "timeout":
            gate.send_signal(getattr(signal, ending))
        out, _ = gate.communicate(timeout=240)
    finally:
        if gate.poll() is None:   # a failed check: end what the test started (its supervisor ends the rest)
            gate.kill()
            gate.communicate()
    assert gate.returncode == code, out
    deadline = time.monotonic() + 30     # a SIGKILLed perfgate: its supervisor removes the folder
    while any(tmpdir.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sorted(tmpdir.iterdir()) == []
    assert holding(machine_places(tmpdir, project), tokens) == []
    launch = next((project / ".perfgate" / "runs").glob("*-stubborn")) / "launch-0"
    if ending == "SIGKILL":
        assert not any(p.suffix in (".qdstrm", ".nsys-rep", ".sqlite") for p in launch.glob("*"))
    else:   # nsys finished its report when asked (SIGINT); cleaned, then kept
        assert (launch / "workload.log").is_file() and (launch / "trace.sqlite").is_file(), sorted(launch.iterdir())


def test_a_workload_leaving_a_setsid_daemon_is_gated_in_its_own_time(tmp_path: Path, nsys_path: str,
                                                                      torch_module: object) -> None:
    """nsys's default --wait=all waited for the daemon until perfgate's timeout, and the launch
    failed with no trace; with --wait=primary nsys ends with the workload, the supervisor ends the
    daemon."""
    project = leak_project(tmp_path / "project", timeout_s=240)
    env = {**os.environ, "LEAK_DIR": str(tmp_path)}
    started = time.monotonic()
    gate = subprocess.run([sys.executable, "-m", "perfgate", "run", "daemon"], cwd=project, env=env, text=True,
                          capture_output=True, timeout=600)
    took = time.monotonic() - started
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert took < 150, f"the gate took {took:.0f} s: nsys waited for the daemon"
    daemon = int((tmp_path / "daemon.pid").read_text())
    assert not Path(f"/proc/{daemon}").exists(), "the daemon outlived the launch"
    log = next((project / ".perfgate" / "runs").glob("*-daemon")) / "launch-0" / "workload.log"
    assert re.search(r"ended \d+ process\(es\) still running after the command exited", log.read_text())
    assert "--wait=primary" in (log.parent / "command.txt").read_text()


QUICK = '''
import time
''' + NVTX + '''for _ in range(10):
    nvtx.range_push("step"); time.sleep(0.01); nvtx.range_pop()
'''


def test_a_folder_left_by_a_killed_tree_is_removed_by_the_next_capture(tmp_path: Path, nsys_path: str,
                                                                         torch_module: object) -> None:
    """A CI runner that SIGKILLs a cancelled job's whole process tree kills perfgate and its
    supervisor at once: nobody removes the private folder, which holds nsys's raw capture. The
    next capture in the same temporary folder sweeps it (no process holds its lock any more)."""
    from perfgate.system.supervisor import descendants

    project = leak_project(tmp_path / "project", timeout_s=300)
    (project / "wl" / "quick.py").write_text(QUICK)
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    tokens = [_token("ghp_", 36)]
    env = {**os.environ, "GITHUB_TOKEN": tokens[0], "TMPDIR": str(tmpdir), "LEAK_DIR": str(tmp_path),
           "LEAK_SEED": tokens[0][::-1]}
    gate = subprocess.Popen([sys.executable, "-m", "perfgate", "run", "stubborn"], cwd=project, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        _wait_for(tmp_path / "ready", gate)
        _wait_for_raw(tmpdir, tokens)
    finally:
        tree = [*reversed(descendants(gate.pid)), gate.pid]
        for pid in tree:                      # all at once, children first: nobody is left to clean
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        gate.wait()
    time.sleep(1)
    (left,) = tmpdir.glob("perfgate-capture-*")
    assert holding([left], tokens), "control: the killed tree's private folder should still hold the token"
    os.utime(left, (time.time() - 3600, time.time() - 3600))   # older than capture_dir.STALE_AFTER_S
    again = subprocess.run([sys.executable, "-m", "perfgate", "run", "quick"], cwd=project, env=env, text=True,
                           capture_output=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(tmpdir.iterdir()) == []
    assert holding(machine_places(tmpdir, project), tokens) == []


def test_a_token_in_the_workloads_arguments_reaches_no_artifact(
        tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    """The .nsys-rep holds the profiled command line, which its SQLite export does not: a token
    passed as an argument of the workload (``args = ["--hf-token", ...]``) stayed whole in the
    report, since only what the export held was masked. The report is kept, masked. (It runs alone,
    as this file's tests do: beside the other test process, another test's token, which nsys
    recorded too, once got the report withheld, "a secret remained in it after masking".)"""
    from perfgate.pipeline.workload_run import run_workload
    from perfgate.records.model import Verdict
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import discover_workloads

    token = _token("hf_", 34)
    root = leak_project(tmp_path / "project", timeout_s=300)
    (root / "wl" / "tiny.py").write_text(NVTX + "for _ in range(8):\n    nvtx.range_push('step'); nvtx.range_pop()\n")
    with (root / "pyproject.toml").open("a") as f:
        f.write(f'\n[tool.perfgate.workloads.tiny]\nargs = ["--hf-token", "{token}"]\n')
    settings = load_settings(root, env={"PERFGATE_NSYS": nsys_path})
    [spec] = [s for s in discover_workloads(settings) if s.name == "tiny"]
    result = run_workload(spec, settings)
    assert result.verdict == Verdict.NEW, result.error
    launch = result.run_dir / "launch-0"
    withheld = [p.read_text() for p in launch.glob("*.withheld.txt")]
    assert (launch / "trace.nsys-rep").is_file(), withheld         # kept, not withheld
    for path in launch.iterdir():
        data = path.read_bytes()
        assert not any(token[i:i + 8].encode() in data for i in range(len(token) - 7)), path.name

"""Every process perfgate starts ends with it: on a timeout, Ctrl-C, SIGTERM, and when perfgate
itself is killed, under the real nsys. The workload starts a child, and a daemon (double fork, new
session: re-parented away from it), and writes their pids; nsys adds its launcher and its
``--start-agent`` process. Afterwards none of them, nor any process seen in the tree while it ran,
may be alive (other sessions' nsys processes on the machine are not looked at)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from perfgate.capture.launch import run_capture
from perfgate.errors import CaptureTimeoutError
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.system.process_tree import start, stop
from perfgate.system.supervisor import descendants

# it kills nsys (timeouts, signals, hangs): alone on the machine (tests/conftest.py)
pytestmark = pytest.mark.nsys_alone

HANG = '''
import os, subprocess, sys, time
from pathlib import Path
out = Path(os.environ["HANG_DIR"])
(out / "workload.pid").write_text(str(os.getpid()))
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(out / "child.pid").write_text(str(child.pid))
if os.fork() == 0:              # a daemon: double fork, new session, re-parented away from us
    os.setsid()
    if os.fork() == 0:
        (out / "daemon.pid").write_text(str(os.getpid()))
        time.sleep(600)
    os._exit(0)
while not (out / "daemon.pid").exists():
    time.sleep(0.05)
(out / "ready").write_text("1")
time.sleep(600)
'''


def hang_project(root: Path) -> Path:
    (root / "wl").mkdir(parents=True)
    (root / "wl" / "hang.py").write_text(HANG)
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'hang'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\nlaunches = 1\ntimeout_s = 300\n")
    return root


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _agents(pids: set[int]) -> set[int]:
    """Those of ``pids`` that are nsys --start-agent processes."""
    found = set()
    for pid in pids:
        try:
            if b"--start-agent" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.add(pid)
        except OSError:
            pass
    return found


def _wait_for(path: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _assert_tree_gone(root: Path, tree: set[int]) -> None:
    """The workload's processes (by the pids it wrote) and every process seen in the tree while it
    ran (nsys, its launcher, its agent) are gone."""
    pids = {name: int((root / f"{name}.pid").read_text()) for name in ("workload", "child", "daemon")}
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in {*pids.values(), *tree}) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert {name: pid for name, pid in pids.items() if _alive(pid)} == {}
    assert {pid for pid in tree if _alive(pid)} == set()


class _TreeWatcher:
    """Records every descendant of this process while a capture runs in it (a background thread)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.agents: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = set(descendants(os.getpid()))
            self.seen |= now
            self.agents |= _agents(now)
            time.sleep(0.2)

    def __enter__(self) -> _TreeWatcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _default_sigint() -> None:
    # a test run started in the background of a non-interactive shell inherits SIGINT ignored (POSIX:
    # asynchronous commands ignore it), and so would the gate: give it the terminal's default
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _gate(root: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "HANG_DIR": str(root)}
    return subprocess.Popen([sys.executable, *args], cwd=root, env=env, text=True, preexec_fn=_default_sigint,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_timeout_ends_the_daemon_the_child_and_nsys_agent(tmp_path: Path, nsys_path: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Killing nsys's process group left the re-parented daemon and nsys's agent running."""
    root = hang_project(tmp_path)
    monkeypatch.setenv("HANG_DIR", str(root))
    spec = WorkloadSpec(name="hang", module="wl.hang", timeout_s=15)
    with _TreeWatcher() as watcher, pytest.raises(CaptureTimeoutError, match="ran past its timeout of 15 s; its process tree"):
        run_capture(spec, load_settings(root, env={}), root / "launch-0")
    assert watcher.agents, "the capture started no nsys agent: nothing was checked"
    _assert_tree_gone(root, watcher.seen)


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_ends_perfgate_run_with_its_exit_code_and_the_whole_tree(
        tmp_path: Path, nsys_path: str, signum: int, code: int) -> None:
    """On Ctrl-C or SIGTERM perfgate exited and left nsys, the workload and its children running."""
    root = hang_project(tmp_path)
    gate = _gate(root, "-m", "perfgate", "run", "hang")
    _wait_for(root / "ready")
    tree = set(descendants(gate.pid))
    assert _agents(tree)
    gate.send_signal(signum)
    out, _ = gate.communicate(timeout=60)
    assert gate.returncode == code, out
    assert ("terminated (signal 15)" if signum == signal.SIGTERM else "perfgate: interrupted") in out
    assert "Traceback" not in out
    _assert_tree_gone(root, tree)


def test_a_killed_perfgate_still_takes_its_tree_along(tmp_path: Path, nsys_path: str) -> None:
    """SIGKILL cannot be handled: the supervisor's parent-death signal ends the tree."""
    root = hang_project(tmp_path)
    gate = _gate(root, "-m", "perfgate", "run", "hang")
    _wait_for(root / "ready")
    tree = set(descendants(gate.pid))
    gate.kill()
    gate.communicate(timeout=30)
    _assert_tree_gone(root, tree)


def test_sigterm_ends_a_pytest_gate_by_that_signal_after_ending_the_tree(tmp_path: Path, nsys_path: str) -> None:
    root = hang_project(tmp_path)
    gate = _gate(root, "-m", "pytest", "--perfgate", "-p", "no:cacheprovider", "-q")
    _wait_for(root / "ready")
    tree = set(descendants(gate.pid))
    gate.send_signal(signal.SIGTERM)
    out, _ = gate.communicate(timeout=60)
    assert gate.returncode == -signal.SIGTERM, out   # died by SIGTERM: a shell shows 143
    assert "Traceback" not in out
    _assert_tree_gone(root, tree)


def test_the_supervisor_ends_what_is_left_when_the_command_exits(tmp_path: Path) -> None:
    """Success: the command exits while a daemon it started still runs; the daemon is ended."""
    script = tmp_path / "leave.py"
    script.write_text(HANG.split('(out / "ready")')[0])   # starts the child and the daemon, then exits 0
    env = {**os.environ, "HANG_DIR": str(tmp_path)}
    log = tmp_path / "log"
    with log.open("wb") as fh:
        proc = start([sys.executable, str(script)], grace_s=5, env=env, stdout=fh, stderr=subprocess.STDOUT)
        assert proc.wait(timeout=60) == 0
    stop(proc, 5)
    assert not _alive(int((tmp_path / "daemon.pid").read_text()))
    assert not _alive(int((tmp_path / "child.pid").read_text()))
    assert "ended 2 process(es) still running after the command exited" in log.read_text()
    assert descendants(proc.pid) == []


def test_a_test_that_runs_nsys_ends_its_agent_too(tmp_path: Path, nsys_path: str) -> None:
    """A control capture run with subprocess.run left ``nsys --start-agent`` running for over 100
    minutes after it failed; tests run nsys through nsys_run.run_supervised. Here the capture runs
    past its time: afterwards no process of its session (named, to be found) is left."""
    from nsys_run import run_supervised

    session = f"perfgate-test-{os.getpid()}-{time.monotonic_ns()}"
    cmd = [nsys_path, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none", f"--session-new={session}",
           "-o", str(tmp_path / "t"), sys.executable, "-c", "import time; time.sleep(600)"]
    with _TreeWatcher() as watcher, pytest.raises(subprocess.TimeoutExpired):
        run_supervised(cmd, timeout=15)
    assert watcher.agents, "nsys started no agent: nothing was checked"
    time.sleep(0.5)
    assert {pid for pid in watcher.agents if _alive(pid)} == set()
    assert not [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if session.encode() in _cmdline(pid)]


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


# The gate in a child process, as `perfgate run hang` runs it, with one idle thread of its own. When
# the capture's workload is ready, SIGINT is handed to that thread, not to the main thread: what the
# kernel does with a process's signal while the main thread blocks it, as it does for the moment a
# vfork()ed child (the supervisor, a probe of nsys) takes to start, and on a loaded machine that
# thread's handler runs only once the main thread is back asleep, waiting on the supervisor.
LATE_CTRL_C = '''
import signal, sys, threading, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
root = Path(sys.argv[1])
idle = threading.Thread(target=threading.Event().wait, daemon=True)
idle.start()

def ctrl_c_to_another_thread():
    while not (root / "ready").exists():
        time.sleep(0.05)
    time.sleep(0.5)
    signal.pthread_kill(idle.ident, signal.SIGINT)

threading.Thread(target=ctrl_c_to_another_thread, daemon=True).start()
from perfgate.cli import main
sys.exit(main(["run", "hang"]))
'''


def test_a_ctrl_c_another_thread_received_under_load_still_stops_the_capture(tmp_path: Path, nsys_path: str) -> None:
    """On a loaded 2-core machine a Ctrl-C went unnoticed until the workload had ended (or ran past
    its timeout): the kernel gave SIGINT to another of perfgate's threads (numpy's, DuckDB's, the
    machine meter's) while the main thread blocked it to start a child, and the main thread, asleep
    in select() on the supervisor's socket, was never woken to run the handler. Beside CPU hogs, the
    capture now stops as for any Ctrl-C: exit 130, the tree ended."""
    root = hang_project(tmp_path)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 1))]
    gate = _gate(root, "-c", LATE_CTRL_C, str(root))
    try:
        _wait_for(root / "ready", 180)
        tree = set(descendants(gate.pid))
        # the workload sleeps 600 s, its timeout is 300 s; the main thread woke up on its own only
        # when the supervisor's first wait ended, 60 s (capture.launch.START_S) after nsys started
        out, _ = gate.communicate(timeout=30)
    finally:
        for hog in hogs:
            hog.kill()
        if gate.poll() is None:   # still capturing: the failure; its supervisor ends the tree
            gate.kill()
            gate.communicate()
    assert gate.returncode == 130, out
    assert "perfgate: interrupted" in out and "Traceback" not in out
    _assert_tree_gone(root, tree)

"""An nsys that hangs before it starts the workload (issue 30: seen with 4 gates at once under
nsys 2022.4: ``nsys profile`` and its agent both waiting on a futex, nothing logged, the workload
never started, until the launch's 300 s timeout failed the gate). perfgate stops an nsys that has
started no program START_S after it began and takes the capture again (perfgate.capture.launch._wait,
perfgate.system.nsys.started_workload)."""
from __future__ import annotations

import dataclasses
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.capture import launch as capture
from perfgate.errors import CaptureError
from perfgate.system import process_tree
from perfgate.system.nsys import started_workload
from test_capture import SPEC, tiny_project
from layout import TESTS

# it kills nsys (timeouts, signals, hangs): alone on the machine (tests/conftest.py)
pytestmark = pytest.mark.nsys_alone


def _hanging_nsys(root: Path) -> Path:
    """An executable named nsys in an install folder of its own that never starts anything: the
    hang, by a real program (``sleep``) where nsys's agent would have started the workload."""
    binary = root / "nsight-systems" / "target-linux-x64" / "nsys"
    binary.parent.mkdir(parents=True)
    shutil.copy2(shutil.which("sleep") or "/bin/sleep", binary)
    return binary


def test_an_nsys_that_never_starts_the_workload_is_stopped_and_taken_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_path: str, torch_module: object) -> None:
    """First ``nsys profile`` hangs (the real nsys afterwards): the launch comes from the second
    attempt, long before its timeout, and says why it was taken again."""
    hang = _hanging_nsys(tmp_path)
    flag = tmp_path / "hung-once"
    wrapper = tmp_path / "bin" / "nsys"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = profile ] && [ \"$2\" != --help ] && [ ! -e " + str(flag) + " ]; then\n"
                       f"  : > {flag}; exec {hang} 600\nfi\nexec {nsys_path} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(capture, "START_S", 10.0)
    settings = dataclasses.replace(tiny_project(tmp_path / "project"), nsys=str(wrapper), timeout_s=600)
    said: list[str] = []
    started = time.monotonic()
    result = capture.run_capture(SPEC, settings, tmp_path / "launch-0", progress=said.append)
    assert time.monotonic() - started < 120
    assert result.retried == ("nsys had started no workload 10 s after it began (it hung at its start)",)
    assert result.sqlite_path is not None and result.sqlite_path.is_file()
    assert len(said) == 1 and "capturing again in 0 s (attempt 2 of 3)" in said[0]
    assert "PERFGATE_SELF_REPORT" in (tmp_path / "launch-0" / "workload.log").read_text()


def test_an_nsys_that_always_hangs_fails_the_launch_saying_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               nsys_path: str) -> None:
    hang = _hanging_nsys(tmp_path)
    wrapper = tmp_path / "bin" / "nsys"       # every profile hangs; nsys's --help and --version answer
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\nif [ \"$1\" = profile ] && [ \"$2\" != --help ]; then\n"
                       f"  exec {hang} 600\nfi\nexec {nsys_path} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(capture, "START_S", 1.0)
    monkeypatch.setattr(capture, "RETRY_WAITS_S", (20.0, 40.0))     # the real waits, not slept
    monkeypatch.setattr(capture, "RETRY_JITTER_S", 5.0)
    waits: list[float] = []
    monkeypatch.setattr(capture, "_pause", waits.append)
    settings = dataclasses.replace(tiny_project(tmp_path / "project"), nsys=str(wrapper), timeout_s=600)
    started = time.monotonic()
    with pytest.raises(CaptureError) as err:
        capture.run_capture(SPEC, settings, tmp_path / "launch-0")
    assert time.monotonic() - started < 60
    assert len(waits) == 2 and 20 <= waits[0] <= 25 and 40 <= waits[1] <= 45
    text = str(err.value)
    assert text.startswith("workload tiny never ran: nsys had started no workload 1 s after it began (it hung at "
                           "its start) (after 3 attempts: "), text
    assert sorted(p.name for p in (tmp_path / "launch-0").iterdir()) == [
        "command.attempt-1.txt", "command.attempt-2.txt", "command.txt",
        "workload.attempt-1.log", "workload.attempt-2.log", "workload.log"]
    assert subprocess.run(["pgrep", "-f", str(hang)], capture_output=True).returncode == 1   # nothing left


def test_started_workload_sees_the_program_the_real_nsys_started(tmp_path: Path, nsys_path: str) -> None:
    """False while only nsys (here the hanging one) runs; True once the real nsys's agent has
    started the profiled program."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    run = process_tree.PrivateRun([str(_hanging_nsys(tmp_path)), "600"], private=private, grace_s=5)
    try:
        time.sleep(1)
        assert started_workload(run.proc.pid) is False
    finally:
        run.stop()
        run.release()
    private.mkdir(mode=0o700)
    program = [sys.executable, "-c", "import time; time.sleep(30)"]
    run = process_tree.PrivateRun([nsys_path, "profile", "--trace=none", "--sample=none", "--cpuctxsw=none",
                                   "-o", str(private / "r"), *program], private=private, grace_s=5,
                                  finalize=(signal.SIGINT, 20), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        seen = False
        while not seen and time.monotonic() < deadline:
            seen = started_workload(run.proc.pid)
            time.sleep(0.5)
        assert seen
    finally:
        run.stop()
        run.release()


def test_a_stale_session_table_is_removed_and_the_capture_taken_again(
        tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    """nsys's session table as a hung and killed session left it (tests/fixtures/nsys-session-table):
    the first attempt fails ("Agent launcher failed."), perfgate removes the table (no nsys runs)
    and the second attempt gives the launch."""
    import lzma

    from perfgate.system.nsys import SHARED_MEMORY, _nsys_running, nsys_version

    deadline = time.monotonic() + 60      # the lock keeps other tests' nsys out; their agents may still end
    while _nsys_running() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _nsys_running(), "another nsys runs on this machine: the test would break its session"
    version = nsys_version(Path(nsys_path))
    if not version.startswith("2022.4"):
        pytest.skip(f"the stale table is nsys 2022.4's; this nsys is {version}")
    table = SHARED_MEMORY / "NSys-2022.4.2.1"
    fixture = TESTS / "fixtures" / "nsys-session-table" / "NSys-2022.4.2.1.xz"
    table.write_bytes(lzma.decompress(fixture.read_bytes()))
    try:
        said: list[str] = []
        result = capture.run_capture(SPEC, tiny_project(tmp_path / "project"), tmp_path / "launch-0",
                                     progress=said.append)
        assert result.retried == ("Agent launcher failed.",)
        assert result.sqlite_path is not None and result.sqlite_path.is_file()
        assert said[1] == f"tiny: removed nsys's stale session table {table} (no nsys runs on this machine)"
        assert not _nsys_running()          # the failed attempt's agent ended with its tree
    finally:
        table.unlink(missing_ok=True)


# A process that holds a lock file (argv[1]) for argv[2] seconds, saying "held" once it does.
HOLD = ("import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(float(sys.argv[2]))\n")


def _holder(lock: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(lock), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_turn_to_start_waits_for_its_holder_and_goes_ahead_without_it_at_its_limit(tmp_path: Path) -> None:
    from perfgate.system.nsys_program import turn_to_start

    lock = tmp_path / "start.lock"
    holder = _holder(lock, 60)
    try:
        began = time.monotonic()
        with turn_to_start(0.5, lock) as taken:
            assert taken is False
        assert 0.5 <= time.monotonic() - began < 5
    finally:
        holder.kill()       # a holder that ends in any way gives the turn back
        holder.wait()
    began = time.monotonic()
    with turn_to_start(30, lock) as taken:
        assert taken is True and time.monotonic() - began < 2
        # what the holder starts does not inherit the lock: it is free once the block has ended
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], close_fds=False)
    try:
        with turn_to_start(1, lock) as taken:     # (the child lets go of it at its exec, microseconds late)
            assert taken is True
    finally:
        child.kill()
        child.wait()


def test_a_capture_starts_nsys_in_its_turn_and_holds_it_until_its_program_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nsys_path: str) -> None:
    """Another holder of the machine's turn (3 s): the capture's program starts after it let go;
    the capture holds the turn while its nsys starts, and gives it back once its program runs."""
    import threading

    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import WorkloadSpec
    from perfgate.system import nsys_program

    monkeypatch.setattr(nsys_program, "SHARED_MEMORY", tmp_path)     # this test's lock, not the machine's
    lock = nsys_program.start_lock_path()
    assert lock.parent == tmp_path
    root = tmp_path / "project"
    root.mkdir()
    (root / "pyproject.toml").write_text("[project]\nname = 'starts'\n")
    (root / "startwl.py").write_text("import pathlib, time\npathlib.Path('started.txt').write_text(repr(time.time()))\n"
                                     "time.sleep(2)\n")
    settings = load_settings(root, env={}, overrides={"timeout_s": 120, "nsys": nsys_path})
    holder = _holder(lock, 3)
    samples: list[tuple[float, bool]] = []      # (time, whether the turn was free), once the holder let go
    done = threading.Event()

    def probe() -> None:
        holder.wait()
        while not done.is_set():
            with nsys_program.turn_to_start(0, lock) as free:
                samples.append((time.time(), free))
            time.sleep(0.05)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        capture.run_capture(WorkloadSpec(name="starts", module="startwl"), settings, tmp_path / "launch-0")
    finally:
        done.set()
        prober.join()
        holder.kill()
        holder.wait()
    started = float((root / "started.txt").read_text())
    let_go = samples[0][0]
    assert started >= let_go - 0.2, "the program started before the other holder gave the turn back"
    busy = [t for t, free in samples if not free]
    assert busy and min(busy) < started, "the capture did not hold the turn while its nsys started"
    assert max(busy) < started + 2.0, "the capture held the turn long after its program had started"
    assert samples[-1][1] is True

"""perfgate's process supervisor: run one command and end every process it starts.

Usage (perfgate.process_tree builds it): ``python -I -S _reaper.py GRACE_S PARENT_PID -- CMD...``

It makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every process the command
starts stays its descendant even when its own parent exits (a double-forked daemon, nsys's
``--start-agent`` process, a workload's orphaned children), and asks the kernel for SIGTERM when
perfgate dies (``PR_SET_PDEATHSIG``, which covers a SIGKILLed perfgate). It runs the command in a
new session and waits. When the command exits, or SIGTERM/SIGINT/SIGHUP arrives, it ends all its
descendants, found by walking /proc (not by process group: nsys puts the workload in a session
of its own): SIGTERM, up to GRACE_S seconds, then SIGKILL until none is left; it reaps them all.
Exit status: the command's (128 + N when signal N ended it), or 128 + N when signal N asked it
to stop. Standalone on purpose: the standard library only, started with ``python -I -S``.
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LEFTOVER_GRACE_S = 2.0


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids of the live (non-zombie) processes, from /proc/<pid>/stat."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def descendants(root: int) -> list[int]:
    """The live descendants of ``root``, parents before children."""
    children, out, stack = _children_map(), [], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            out.append(child)
            stack.append(child)
    return out


def _signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class Reaper:
    """Reaps children (its own and re-parented orphans), remembering the main child's status."""

    def __init__(self, main_pid: int) -> None:
        self.main_pid = main_pid
        self.main_status: int | None = None

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if pid == self.main_pid:
                self.main_status = status


def end_tree(reaper: Reaper, grace_s: float) -> int:
    """SIGTERM every descendant, wait up to ``grace_s``, SIGKILL what is left; returns how many
    processes there were."""
    me = os.getpid()
    first = descendants(me)
    _signal_all(first, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while descendants(me) and time.monotonic() < deadline:
        reaper.reap()
        time.sleep(0.05)
    for _ in range(200):                  # forks racing the kill: repeat until none is left
        left = descendants(me)
        if not left:
            break
        _signal_all(left, signal.SIGKILL)
        time.sleep(0.02)
        reaper.reap()
    reaper.reap()
    return len(first)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def main(argv: list[str]) -> int:
    grace_s, parent, sep, *cmd = argv
    if sep != "--" or not cmd:
        print("usage: _reaper.py GRACE_S PARENT_PID -- CMD...", file=sys.stderr)
        return 2
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):       # perfgate died before the death signal was armed
        return 128 + signal.SIGTERM
    stop: list[int] = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda n, _frame: stop.append(n))
    signal.signal(signal.SIGCHLD, lambda _n, _frame: None)   # wakes the sleep below
    pid = os.fork()
    if pid == 0:                          # the command: its own session, default signals
        try:
            os.setsid()
            for signum in (*STOP_SIGNALS, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            print(f"perfgate: cannot run {cmd[0]}: {exc.strerror}", file=sys.stderr)
        os._exit(127)
    reaper = Reaper(pid)
    while reaper.main_status is None and not stop:
        reaper.reap()
        if reaper.main_status is None and not stop:
            time.sleep(0.1)
    if stop:
        end_tree(reaper, float(grace_s))
        return 128 + stop[0]
    left = end_tree(reaper, LEFTOVER_GRACE_S)
    if left:
        print(f"perfgate: ended {left} process(es) still running after the command exited "
              "(the workload's children or nsys's agent)", file=sys.stderr)
    assert reaper.main_status is not None
    return _exit_code(reaper.main_status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

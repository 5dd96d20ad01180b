"""perfgate's process supervisor: run one command and end every process it starts.

Usage (perfgate.system.process_tree builds it):
``python -I -S supervisor.py GRACE_S PARENT_PID [--private DIR --lifeline FD [--finalize SIG:SECONDS]] -- CMD...``

It makes itself a child subreaper (``PR_SET_CHILD_SUBREAPER``), so every process the command
starts stays its descendant even when its own parent exits (a double-forked daemon, nsys's
``--start-agent`` process, a workload's orphaned children), and asks the kernel for SIGTERM when
perfgate dies (``PR_SET_PDEATHSIG``, which covers a SIGKILLed perfgate). It runs the command in a
new session and waits. When the command exits, or SIGTERM/SIGINT/SIGHUP arrives, it ends all its
descendants, found by walking /proc (not by process group: nsys puts the workload in a session
of its own): SIGTERM, up to GRACE_S seconds, then SIGKILL until none is left; it reaps them all.
Exit status: the command's (128 + N when signal N ended it), or 128 + N when signal N asked it
to stop. Standalone on purpose: the standard library only, started with ``python -I -S``.

With ``--private DIR`` the supervisor owns DIR (a capture's private folder, where nsys writes its
raw capture) and removes it, whatever happens, once the command's tree has ended and perfgate is
done with it; it holds a shared ``flock`` on DIR meanwhile, as perfgate does (a folder nobody holds
is a left-over that the next capture removes: perfgate.capture.private_dir.sweep). ``--lifeline
FD`` is its end of a socket pair with perfgate: it writes ``exit N`` there when the tree has ended,
and perfgate closes its end when it has taken what it keeps out of DIR; the kernel closes it when
perfgate dies, SIGKILL included. End of file before ``exit N`` was
written means perfgate is gone: the tree is ended at once and DIR removed. ``--finalize
SIG:SECONDS``: asked to stop while perfgate lives, send SIG to the command alone first and give it
SECONDS to finish (nsys answers SIGINT by stopping the workload and writing its report).
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import select
import shutil
import signal
import socket
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
LEFTOVER_GRACE_S = 2.0
ORPHANED_GRACE_S = 1.0      # perfgate is gone: nobody will read what the tree would still write
USAGE = "usage: supervisor.py GRACE_S PARENT_PID [--private DIR --lifeline FD [--finalize SIG:SECONDS]] -- CMD..."


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def live_processes() -> list[tuple[int, int, str]]:
    """(pid, ppid, command name) of every live (non-zombie) process, from /proc/<pid>/stat."""
    out: list[tuple[int, int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                head, _, rest = fh.read().rpartition(")")
        except OSError:
            continue
        fields = rest.split()
        if len(fields) > 1 and fields[0] != "Z":
            out.append((int(entry), int(fields[1]), head.partition("(")[2]))
    return out


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids of the live (non-zombie) processes."""
    out: dict[int, list[int]] = {}
    for pid, ppid, _ in live_processes():
        out.setdefault(ppid, []).append(pid)
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

    def status(self) -> int | None:
        """The main child's wait status, once it has been reaped."""
        return self.main_status


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


class Lifeline:
    """The supervisor's end of its socket pair with perfgate (absent without ``--lifeline``)."""

    def __init__(self, fd: int | None) -> None:
        self.sock = socket.socket(fileno=fd) if fd is not None else None
        self.closed = False

    def parent_gone(self) -> bool:
        """Whether perfgate closed its end (or died) already: end of file, read without blocking."""
        if self.sock is None or self.closed:
            return self.closed
        readable, _, _ = select.select([self.sock], [], [], 0)
        if readable:
            try:
                self.closed = self.sock.recv(1) == b""
            except OSError:
                self.closed = True
        return self.closed

    def report(self, code: int) -> None:
        if self.sock is not None and not self.closed:
            try:
                self.sock.sendall(f"exit {code}\n".encode())
            except OSError:
                self.closed = True

    def wait_released(self) -> None:
        """Block until perfgate closes its end (done with the private folder) or dies."""
        while self.sock is not None and not self.closed:
            try:
                select.select([self.sock], [], [], 1.0)
            except InterruptedError:
                continue
            self.parent_gone()


def _parse(argv: list[str]) -> tuple[float, int, dict[str, str], list[str]] | None:
    if len(argv) < 4:
        return None
    grace_s, parent, rest = argv[0], argv[1], argv[2:]
    options: dict[str, str] = {}
    while rest and rest[0] != "--":
        if rest[0] not in ("--private", "--lifeline", "--finalize") or len(rest) < 2:
            return None
        options[rest[0]] = rest[1]
        rest = rest[2:]
    if not rest or rest[0] != "--" or len(rest) < 2:
        return None
    return float(grace_s), int(parent), options, rest[1:]


def _finalize(reaper: Reaper, spec: str, stop: list[int], lifeline: Lifeline) -> None:
    """Send the command the signal that makes it finish its work (``SIG:SECONDS``) and wait for it,
    at most SECONDS, or until perfgate is gone."""
    name, _, seconds = spec.partition(":")
    try:
        os.kill(reaper.main_pid, signal.Signals[name].value)
    except (KeyError, ProcessLookupError):
        return
    deadline = time.monotonic() + float(seconds or 0)
    while (reaper.main_status is None and time.monotonic() < deadline and len(stop) < 2
           and not lifeline.parent_gone()):    # a second stop request: end the tree now
        reaper.reap()
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    grace_s, parent, options, cmd = parsed
    private = options.get("--private")
    lifeline = Lifeline(int(options["--lifeline"]) if "--lifeline" in options else None)
    held = _hold(private) if private else None
    try:
        return _supervise(grace_s, parent, options, cmd, lifeline)
    finally:
        if private:
            lifeline.wait_released()
            shutil.rmtree(private, ignore_errors=True)
        if held is not None:
            os.close(held)


def _hold(folder: str) -> int | None:
    """A shared lock on ``folder`` for the supervisor's life (not inherited by the command): the
    sign, for a later capture's sweep, that the folder is in use."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:
        return None
    return fd


def _supervise(grace_s: float, parent: int, options: dict[str, str], cmd: list[str], lifeline: Lifeline) -> int:
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:            # perfgate died before the death signal was armed
        lifeline.closed = True
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
    while reaper.main_status is None and not stop and not lifeline.parent_gone():
        reaper.reap()
        if reaper.main_status is None and not stop:
            time.sleep(0.1)
    orphaned = lifeline.parent_gone() or os.getppid() != parent
    if reaper.main_status is None:        # asked to stop, or perfgate is gone
        if not orphaned and "--finalize" in options:
            _finalize(reaper, options["--finalize"], stop, lifeline)
        end_tree(reaper, ORPHANED_GRACE_S if orphaned else grace_s)
        code = 128 + (stop[0] if stop else signal.SIGTERM)
        finished = reaper.status()
        if finished is not None and "--finalize" in options and not orphaned:
            code = _exit_code(finished)   # it finished when asked: its own status
        lifeline.report(code)
        return code
    left = end_tree(reaper, LEFTOVER_GRACE_S)
    if left:
        print(f"perfgate: ended {left} process(es) still running after the command exited "
              "(the workload's children or nsys's agent)", file=sys.stderr)
    code = _exit_code(reaper.main_status)
    lifeline.report(code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Every process perfgate starts ends with it.

:func:`start` runs a command under perfgate's supervisor (``perfgate/system/supervisor.py``: a child
subreaper that ends the command's whole process tree, found through /proc, when the command
exits, when asked, or when perfgate dies). :func:`stop` asks a supervisor to end its tree (SIGTERM,
a grace period, SIGKILL) and, should the supervisor itself not answer, kills its descendants and it.
Live supervisors are tracked, and :func:`stop_all` (also run at interpreter exit) ends them.

:class:`PrivateRun` runs a command (nsys) with a private folder that its supervisor removes once
the command's tree has ended and perfgate has taken what it keeps (:meth:`PrivateRun.release`),
or at once when perfgate dies, SIGKILL included: the two talk over a socket pair whose perfgate
end the kernel closes then. Asked to stop, the supervisor first sends the command the signal that
makes it finish its work (``finalize``: nsys writes its report on SIGINT).

:func:`terminate_raises` turns SIGTERM and SIGHUP into :class:`Terminated` (a KeyboardInterrupt) in
the main thread, so that ``finally`` blocks and the capture's cleanup run as for Ctrl-C; the CLI
then exits 143 (130 for Ctrl-C) and the pytest plugin re-raises SIGTERM after pytest's own cleanup.
The waits on the supervisor and :func:`pause` also wake up for a signal that the kernel handed to
another thread (:func:`signal_wakeup`).
"""
from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfgate.system.supervisor import descendants

REAPER = Path(__file__).with_name("supervisor.py")
EXIT_INTERRUPTED = 130     # 128 + SIGINT
EXIT_TERMINATED = 143      # 128 + SIGTERM
_live: set[subprocess.Popen[bytes]] = set()
_runs: set[PrivateRun] = set()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived (``signum``); raised like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def supervised(cmd: Sequence[str], grace_s: float, options: Sequence[str] = ()) -> list[str]:
    """The command line running ``cmd`` under perfgate's supervisor (``options``: supervisor.py's)."""
    return [sys.executable, "-I", "-S", str(REAPER), f"{grace_s:g}", str(os.getpid()), *options, "--", *cmd]


def start(cmd: Sequence[str], *, grace_s: float, **popen: Any) -> subprocess.Popen[bytes]:
    """Start ``cmd`` under the supervisor (keyword arguments go to Popen); tracked until stopped."""
    proc = subprocess.Popen(supervised(cmd, grace_s), start_new_session=True, **popen)
    _live.add(proc)
    return proc


def wait(proc: subprocess.Popen[bytes], timeout_s: float | None) -> int:
    """Wait for a supervised command (subprocess.TimeoutExpired after ``timeout_s``)."""
    code = proc.wait(timeout=timeout_s)
    _live.discard(proc)
    return code


def stop(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """End a supervised command's whole tree; returns when the supervisor has exited."""
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s + 10)
            except subprocess.TimeoutExpired:    # the supervisor hangs: do its work, then end it
                kill_descendants(proc.pid)
                proc.kill()
                proc.wait()
    finally:
        _live.discard(proc)


def stop_all(grace_s: float = 5.0) -> None:
    """End every live supervised tree (at exit, or from a signal handler)."""
    for run in list(_runs):
        run.stop()
        run.release()
    for proc in list(_live):
        stop(proc, grace_s)


class PrivateRun:
    """``cmd`` under the supervisor with ``private`` (a folder perfgate made, mode 0700) in its
    care: removed when this run is released, or when perfgate dies. ``finalize``: the signal that
    makes the command finish its work when asked to stop, and how long it may take.

    Use: :meth:`wait` (the command's exit status, once its whole tree has ended), :meth:`stop`
    (timeout, Ctrl-C), then take the files to keep out of ``private`` and :meth:`release`."""

    def __init__(self, cmd: Sequence[str], *, private: Path, grace_s: float,
                 finalize: tuple[signal.Signals, float] | None = None, **popen: Any) -> None:
        self.private, self.grace_s = private, grace_s
        self.finalize_s = finalize[1] if finalize else 0.0
        self._sock, theirs = socket.socketpair()
        options = ["--private", str(private), "--lifeline", str(theirs.fileno())]
        if finalize:
            options += ["--finalize", f"{finalize[0].name}:{finalize[1]:g}"]
        try:
            self.proc = subprocess.Popen(supervised(cmd, grace_s, options), start_new_session=True,
                                         pass_fds=(theirs.fileno(),), **popen)
        except BaseException:
            self._sock.close()
            raise
        finally:
            theirs.close()
        self.status: int | None = None
        self._buffer = b""
        _runs.add(self)

    def wait(self, timeout_s: float | None) -> int:
        """The command's exit status once its tree has ended (subprocess.TimeoutExpired after
        ``timeout_s``)."""
        status = self._read_status(timeout_s)
        if status is None:
            raise subprocess.TimeoutExpired(self.proc.args, timeout_s or 0)
        return status

    def ended(self) -> bool:
        """Whether the command's tree has ended (its exit status known), without waiting."""
        return self._read_status(0) is not None

    def stop(self) -> int | None:
        """Ask the supervisor to end the tree (the command first gets ``finalize``'s signal and
        time); returns the status it reports, or None when it did not answer (then it and the tree
        were killed)."""
        if self.status is not None or self._sock.fileno() < 0:
            return self.status
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(signal.SIGTERM)
        status = self._read_status(self.finalize_s + self.grace_s + 10)
        if status is None:      # the supervisor hangs: do its work
            kill_descendants(self.proc.pid)
            self.proc.kill()
        return status

    def release(self) -> None:
        """perfgate is done with the private folder: the supervisor removes it and exits (waited
        for; should it not, perfgate kills it and removes the folder itself)."""
        self._sock.close()
        try:
            self.proc.wait(timeout=self.grace_s + 30)
        except subprocess.TimeoutExpired:
            kill_descendants(self.proc.pid)
            self.proc.kill()
            self.proc.wait()
        finally:
            shutil.rmtree(self.private, ignore_errors=True)
            _runs.discard(self)

    def _read_status(self, timeout_s: float | None) -> int | None:
        """The ``exit N`` line of the supervisor; None when ``timeout_s`` passed first. A
        supervisor that ended without writing it gives its own exit status."""
        if self.status is not None:
            return self.status
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with signal_wakeup() as woken:
            while b"\n" not in self._buffer:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                readable, _, _ = select.select([self._sock, *woken], [], [], left)
                if not readable:
                    return None
                if self._sock not in readable:   # a signal: its handler has run (a Ctrl-C raised);
                    _drain(woken[0])             # one deferred (signals_deferred) goes on waiting
                    continue
                chunk = self._sock.recv(64)
                if not chunk:       # the supervisor is gone without a word
                    self.status = self.proc.wait()
                    return self.status
                self._buffer += chunk
        line = self._buffer.split(b"\n", 1)[0].decode(errors="replace")
        self.status = int(line.split()[1]) if line.startswith("exit ") else self.proc.wait()
        return self.status


def kill_descendants(root: int, attempts: int = 50) -> None:
    """SIGKILL every descendant of ``root`` (found through /proc: supervisor.descendants) until none is
    left (forks racing the kill included)."""
    for _ in range(attempts):
        left = descendants(root)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


_signalled: list[int] = []    # SIGTERM / SIGHUP received (in order)


def _raise_terminated(signum: int, _frame: object) -> None:
    _signalled.append(signum)
    raise Terminated(signum)


def swallowed_interrupt(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (KeyboardInterrupt) or SIGTERM (:class:`Terminated`) that an extension turned
    into an ordinary exception, else None. DuckDB's Python client answers a signal during a query
    with ``RuntimeError: Query interrupted``: an ``except Exception`` that keeps a diagnosis bug
    from failing the gate took it for one, and a Ctrl-C during the diagnosis let the run go on
    and pass."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if type(exc).__name__ == "InterruptException" or (
                isinstance(exc, RuntimeError) and "Query interrupted" in str(exc)):
            return Terminated(_signalled[-1]) if _signalled else KeyboardInterrupt()
        exc = exc.__cause__ or exc.__context__    # type: ignore[assignment]
    return None


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread (no-op
    elsewhere); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Within the block, SIGINT, SIGTERM and SIGHUP wait: the first one that arrives is delivered
    again, to the handlers in force before, once the block is done (main thread only; elsewhere a
    no-op). For work that must not stop half-way: the cleaning of a launch folder, where an
    interrupted redaction would leave a raw report holding secrets among the artifacts."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []

    def defer(signum: int, _frame: object) -> None:
        pending.append(signum)

    previous = {s: signal.signal(s, defer) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:   # handled now, by the handler in force again: raised in this (the main) thread,
            # whose handler runs before raise_signal returns; os.kill could hand it to another thread,
            # whose C handler a loaded machine may not run before this process went on and ended
            signal.raise_signal(pending[0])


@contextmanager
def signal_wakeup() -> Iterator[list[socket.socket]]:
    """Within the block, ``[sock]``: a socket that turns readable when a signal with a Python
    handler arrives, whichever of this process's threads the kernel handed it to (``[]`` outside
    the main thread); the previous wakeup fd comes back after it.

    The kernel gives a process's signal to another thread (numpy's, DuckDB's, the machine meter's)
    while the main thread blocks it, as it does while a vfork()ed child starts (subprocess); that
    thread's C handler only marks the signal, and the main thread, asleep in select() on the
    supervisor's socket, ran the handler (the KeyboardInterrupt of a Ctrl-C) only when that wait
    ended on its own: once the workload had ended, or 60 s on. A main thread that waits with this
    socket among those it selects on wakes up, and the handler runs as select() returns."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    ours, theirs = socket.socketpair()
    try:
        for end in (ours, theirs):
            end.setblocking(False)
        previous = signal.set_wakeup_fd(theirs.fileno(), warn_on_full_buffer=False)
        try:
            yield [ours]
        finally:
            signal.set_wakeup_fd(previous)
    finally:
        ours.close()
        theirs.close()


def _drain(sock: socket.socket) -> None:
    with contextlib.suppress(BlockingIOError, InterruptedError):
        while sock.recv(64):
            pass


def pause(seconds: float) -> None:
    """``time.sleep(seconds)`` that a signal interrupts (its handler runs, a Ctrl-C raises)
    whichever thread the kernel handed it to (:func:`signal_wakeup`)."""
    deadline = time.monotonic() + seconds
    with signal_wakeup() as woken:
        while (left := deadline - time.monotonic()) > 0:
            if not woken:
                time.sleep(left)
                return
            if select.select(woken, [], [], left)[0]:
                _drain(woken[0])


def reraise(signum: int) -> None:
    """End this process by ``signum`` with its default action (the exit status a shell shows as
    128 + signum), after ending the live trees."""
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(stop_all)

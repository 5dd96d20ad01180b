"""Every process perfgate starts ends with it.

:func:`start` runs a command under perfgate's supervisor (``perfgate/_reaper.py``: a child
subreaper that ends the command's whole process tree, found through /proc, when the command
exits, when asked, or when perfgate dies). :func:`stop` asks a supervisor to end its tree (SIGTERM,
a grace period, SIGKILL) and, should the supervisor itself not answer, kills its descendants and it.
Live supervisors are tracked, and :func:`stop_all` (also run at interpreter exit) ends them.

:func:`terminate_raises` turns SIGTERM and SIGHUP into :class:`Terminated` (a KeyboardInterrupt) in
the main thread, so that ``finally`` blocks and the capture's cleanup run as for Ctrl-C; the CLI
then exits 143 (130 for Ctrl-C) and the pytest plugin re-raises SIGTERM after pytest's own cleanup.
"""
from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perfgate._reaper import descendants

REAPER = Path(__file__).with_name("_reaper.py")
EXIT_INTERRUPTED = 130     # 128 + SIGINT
EXIT_TERMINATED = 143      # 128 + SIGTERM
_live: set[subprocess.Popen[bytes]] = set()


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP arrived (``signum``); raised like Ctrl-C's KeyboardInterrupt."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def supervised(cmd: Sequence[str], grace_s: float) -> list[str]:
    """The command line running ``cmd`` under perfgate's supervisor."""
    return [sys.executable, "-I", "-S", str(REAPER), f"{grace_s:g}", str(os.getpid()), "--", *cmd]


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
    for proc in list(_live):
        stop(proc, grace_s)


def kill_descendants(root: int, attempts: int = 50) -> None:
    """SIGKILL every descendant of ``root`` (found through /proc: _reaper.descendants) until none is
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
        if pending:
            os.kill(os.getpid(), pending[0])   # handled now, by the handler in force again


def reraise(signum: int) -> None:
    """End this process by ``signum`` with its default action (the exit status a shell shows as
    128 + signum), after ending the live trees."""
    stop_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


atexit.register(stop_all)

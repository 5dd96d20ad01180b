"""Starting nsys one at a time: whether an nsys process has started the program it profiles (read
from /proc), and the machine's turn at starting nsys (a lock file). Standalone, the standard
library only: perfgate/capture/node_fanout.py loads it by path (as it loads supervisor.py),
perfgate.system.nsys imports it.

Two nsys 2022.4 sessions started at the same moment hang or break each other's start (seen on this
project's 2-core CPU machine: one of two pairs started together hung; nsys said "Agent launcher
failed.", "End of file" or "Connection reset by peer"). Every nsys perfgate starts therefore takes
:func:`turn_to_start` until it has started its program: two gates on one runner, a job's nodes, a
developer's tests in two processes. Once their programs run, any number of sessions record side by
side."""
from __future__ import annotations

import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

SHARED_MEMORY = Path("/dev/shm")     # where nsys keeps its session table
POLL_S = 0.1


def started(pid: int, descendants: Callable[[int], list[int]]) -> bool:
    """Whether the nsys of pid ``pid`` has started its program: a process of its tree (``descendants``,
    perfgate/system/supervisor.py's walk) whose executable is outside nsys's install folder (nsys's
    binaries, its agent and importers live in one folder, the parent of ``target-*``/``host-*``).
    True where it cannot be told (``pid`` is not nsys, e.g. a wrapper script, or cannot be read)."""
    try:
        exe = Path(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return True
    if exe.name != "nsys":
        return True
    install = exe.parent.parent
    for child in descendants(pid):
        try:
            if install not in Path(os.readlink(f"/proc/{child}/exe")).parents:
                return True
        except OSError:
            continue
    return False


def start_lock_path() -> Path:
    """The machine's lock on starting nsys, this user's (nsys's session table is per user too): in
    /dev/shm beside that table, else in the temporary folder."""
    folder = SHARED_MEMORY if os.access(SHARED_MEMORY, os.W_OK) else Path(tempfile.gettempdir())
    return folder / f"perfgate-nsys-start-{os.getuid()}.lock"


@contextmanager
def turn_to_start(wait_s: float, lock: Path | None = None) -> Iterator[bool]:
    """Hold the machine's lock on starting nsys (``flock`` on :func:`start_lock_path`, or ``lock``)
    while the block starts one nsys and waits for it to start its program. A holder that ends in any
    way releases it; the lock's descriptor is not inherited by what the block starts. Waits at most
    ``wait_s`` for another holder (which holds it for as long as its nsys takes to start, at most its
    own start limit), then goes ahead without it. Yields whether the turn was taken."""
    try:
        fd = os.open(lock or start_lock_path(), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        yield False     # a lock that cannot be made: start as before there was one
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                taken = True
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    taken = False
                    break
                time.sleep(POLL_S)
        yield taken
    finally:
        os.close(fd)

"""One recording of a baseline at a time.

Two ``perfgate baseline update`` (or ``--update-baseline``) runs of the same baseline at once
would each write it (atomically: never a torn file), the later one silently replacing the other's
launches. A recording holds the lock of the baseline's folder instead, and the second one stops
before its first launch with a message that says why.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from perfgate.errors import BaselineError


@contextlib.contextmanager
def recording_lock(path: Path) -> Iterator[None]:
    """Hold the lock of the folder of baseline ``path`` (``flock`` on the folder: no file is left
    in the repository, and the kernel releases it when the process dies) while a recording runs.
    BaselineError at once when another process holds it; where the file system has no such locks,
    the recording runs unlocked (its write is atomic all the same). A folder made here and left
    empty (the recording failed) is removed."""
    folder = path.parent
    made = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise BaselineError(
                    f"{path}: another perfgate process is recording a baseline in {folder} now (its lock "
                    "is held); record one at a time, then check what that recording wrote") from None
        yield
    finally:
        os.close(fd)
        if made:
            with contextlib.suppress(OSError):
                folder.rmdir()     # only when empty

"""A capture's private folder: where nsys writes, where its output is cleaned of secrets, and
from where only cleaned files reach the artifacts.

nsys records environments (perfgate.system.secrets says whose), and it writes more than its report: its
raw capture (``nsys-report-XXXX.qdstrm``, mode 0664), the profiled process's output, a log that
holds nsys's own environment (``nvidia/nsight_systems/telemetry-0/*.qdlog``) and, when it cannot
write its ``-o`` file, a report of its own name; all under ``$TMPDIR`` (checked with nsys 2022.4),
and none of it removed when nsys is killed. (Outside ``$TMPDIR`` nsys 2022.4 writes
``/tmp/injection_config_*``, its hot-key settings, and ``/tmp/nsys-RunShellCommand-*``, mode 0600,
both removed as it goes, and its session table and semaphores in ``/dev/shm``; ``nsys export``
writes its output only. Seen with strace.) So each capture gets a folder of its own
(:func:`make`, mode 0700, in the system's temporary folder, never the artifacts folder), which
the supervisor removes whatever happens (perfgate.system.process_tree.PrivateRun); one whose perfgate
and supervisor were both killed at once is removed by the next capture (:func:`sweep`):

- ``tmp/``: ``TMPDIR`` of nsys and the profiled workload (nsys's session files, raw capture,
  logs, its session-manager lock; the workload's own temporary files). nsys's session table
  (``/dev/shm/NSys-<version>``) stays shared by all sessions of the machine. Linking the lock to
  the machine's one (``/tmp/nvidia/nsight_systems/SessionManager-<version>.lock``) was measured
  with 4 gates at once: 4 of 24 captures had to be taken again (``ProcessWaiterImpl``), against 2
  of 24 and 3 of 16 with the lock private, so it stays private.
- ``out/``: the report, its SQLite export, ``workload.log`` and ``command.txt``; cleaned in
  place (perfgate.capture.redaction.launch_folder), then moved into the launch folder by :func:`keep`, most needed
  first, so that a full disk keeps what fitted and names what did not.
"""
from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.errors import CaptureError

PREFIX = "perfgate-capture-"
STALE_AFTER_S = 60.0
ROOM_BYTES = 64 << 20   # less free room beside a private folder is named when nsys failed
# What a user needs first: the log says what happened, the export is what perfgate analyzes.
KEEP_ORDER = ("workload.log", "command.txt", ".withheld.txt", ".sqlite", ".nsys-rep")


@dataclass
class Kept:
    """What :func:`keep` moved into the launch folder, and what did not fit (name, why)."""

    kept: list[Path] = field(default_factory=list)
    lost: list[tuple[str, str]] = field(default_factory=list)

    def describe(self, folder: Path) -> str:
        """``kept: a, b; not kept: c (No space left on device)`` for a message naming ``folder``."""
        kept = ", ".join(p.name for p in self.kept) or "nothing"
        lost = ", ".join(f"{name} ({why})" for name, why in self.lost)
        return f"{folder}: kept {kept}; not kept (cleaned copies dropped): {lost}"


@dataclass(frozen=True)
class PrivateFolder:
    """A capture's private folder and perfgate's shared lock on it (the supervisor takes one too):
    a folder nobody holds a lock on is left over by a perfgate and a supervisor both killed."""

    path: Path
    lock_fd: int

    def close(self) -> None:
        """Drop perfgate's lock (the folder is the supervisor's to remove)."""
        with contextlib.suppress(OSError):
            os.close(self.lock_fd)


def make() -> PrivateFolder:
    """A new private capture folder (mode 0700) with its ``tmp/`` and ``out/``, in the system's
    temporary folder (``$TMPDIR``, else /tmp), held with a shared lock; CaptureError naming that
    folder when it cannot be made. Left-over folders are swept first (:func:`sweep`)."""
    parent = tempfile.gettempdir()
    sweep(Path(parent))
    private: Path | None = None
    try:
        private = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        fd = os.open(private, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_SH)
        (private / "tmp").mkdir()
        (private / "out").mkdir()
    except OSError as exc:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        raise CaptureError(f"{parent}: cannot make a capture's private folder there: {exc.strerror or exc} "
                           "(perfgate captures in a private folder in $TMPDIR, else /tmp)") from None
    return PrivateFolder(private, fd)


def sweep(parent: Path, older_than_s: float = STALE_AFTER_S) -> list[Path]:
    """Remove this user's private capture folders in ``parent`` that nobody holds (their perfgate
    and supervisor were both killed: a CI runner that SIGKILLs a cancelled job's whole process
    tree) and that were last changed over ``older_than_s`` ago (a folder being made is not yet
    locked). Returns those removed."""
    removed: list[Path] = []
    try:
        candidates = [p for p in parent.iterdir() if p.name.startswith(PREFIX)]
    except OSError:
        return removed
    for folder in candidates:
        try:
            info = folder.lstat()
            if (not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
                    or time.time() - info.st_mtime < older_than_s):
                continue
            fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue      # held: a capture in progress
        try:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


def room_note(private: Path) -> str:
    """`` (the temporary folder ... had N KiB free ...)`` when the file system of ``private`` has
    less than ROOM_BYTES free, else "": said when nsys failed, since its raw capture, session files
    and export go there (a 1 MiB TMPDIR made nsys 2022.4 crash, exit 139, with an empty log)."""
    try:
        free = shutil.disk_usage(private).free
    except OSError:
        return ""
    if free >= ROOM_BYTES:
        return ""
    return (f" (the temporary folder {private.parent} had {free // 1024} KiB free after the capture: nsys "
            "writes its raw capture and session files there; set TMPDIR to a folder with room)")


def _rank(path: Path) -> int:
    for i, ending in enumerate(KEEP_ORDER):
        if path.name == ending or path.name.endswith(ending):
            return i
    return len(KEEP_ORDER)


def keep(out: Path, launch_dir: Path) -> Kept:
    """Move the (cleaned) files of ``out`` into ``launch_dir``, most needed first (KEEP_ORDER).
    Each arrives whole or not at all: renamed when on the same file system, else copied to a
    hidden partial name and renamed. A file that does not fit is dropped and named in the result;
    any other OSError propagates."""
    done = Kept()
    launch_dir.mkdir(parents=True, exist_ok=True)
    for path in sorted((p for p in out.iterdir() if p.is_file() and not p.is_symlink()), key=lambda p: (_rank(p), p.name)):
        target = launch_dir / path.name
        try:
            _move(path, target)
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise
            done.lost.append((path.name, exc.strerror or str(exc)))
            continue
        done.kept.append(target)
    return done


def _move(path: Path, target: Path) -> None:
    try:
        os.replace(path, target)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    partial = target.with_name(f".{target.name}.partial")
    try:
        shutil.copyfile(path, partial)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    path.unlink()

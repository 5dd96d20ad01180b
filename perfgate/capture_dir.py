"""A capture's private folder: where nsys writes, where its output is cleaned of secrets, and
from where only cleaned files reach the artifacts.

nsys records environments (perfgate.secrets says whose), and it writes more than its report: its
raw capture (``nsys-report-XXXX.qdstrm``, mode 0664), the profiled process's output, a log that
holds nsys's own environment (``nvidia/nsight_systems/telemetry-0/*.qdlog``) and, when it cannot
write its ``-o`` file, a report of its own name; all under ``$TMPDIR`` (checked with nsys 2022.4),
and none of it removed when nsys is killed. (Outside ``$TMPDIR`` nsys 2022.4 writes
``/tmp/injection_config_*``, its hot-key settings, and ``/tmp/nsys-RunShellCommand-*``, mode 0600,
both removed as it goes, and its session table and semaphores in ``/dev/shm``; ``nsys export``
writes its output only. Seen with strace.) So each capture gets a folder of its own
(:func:`make`, mode 0700, in the system's temporary folder, never the artifacts folder), which
the supervisor removes whatever happens (perfgate.process_tree.PrivateRun):

- ``tmp/``: ``TMPDIR`` of nsys and the profiled workload (nsys's session files, raw capture,
  logs, its session-manager lock; the workload's own temporary files). nsys's session table
  (``/dev/shm/NSys-<version>``) stays shared by all sessions of the machine. Linking the lock to
  the machine's one (``/tmp/nvidia/nsight_systems/SessionManager-<version>.lock``) was measured
  with 4 gates at once: 4 of 24 captures had to be taken again (``ProcessWaiterImpl``), against 2
  of 24 and 3 of 16 with the lock private, so it stays private.
- ``out/``: the report, its SQLite export, ``workload.log`` and ``command.txt``; cleaned in
  place (perfgate.redaction), then moved into the launch folder by :func:`keep`, most needed
  first, so that a full disk keeps what fitted and names what did not.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.errors import CaptureError

PREFIX = "perfgate-capture-"
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


def make() -> Path:
    """A new private capture folder (mode 0700) with its ``tmp/`` and ``out/``, in the system's
    temporary folder (``$TMPDIR``, else /tmp); CaptureError naming that folder when it cannot be made."""
    parent = tempfile.gettempdir()
    private: Path | None = None
    try:
        private = Path(tempfile.mkdtemp(prefix=PREFIX, dir=parent))
        (private / "tmp").mkdir()
        (private / "out").mkdir()
    except OSError as exc:
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
        raise CaptureError(f"{parent}: cannot make a capture's private folder there: {exc.strerror or exc} "
                           "(perfgate captures in a private folder in $TMPDIR, else /tmp)") from None
    return private


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

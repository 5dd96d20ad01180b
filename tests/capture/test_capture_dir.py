"""A capture's private folder, and how its cleaned files reach a launch folder on a full disk.

The full disk is the kernel's own refusal: a file-size limit (RLIMIT_FSIZE) in a child process that
copies from one file system (/dev/shm) to another (the test's folder), so every write past the
limit fails with EFBIG as a full disk fails with ENOSPC. (scripts/capture-leak-check.sh runs the
whole gate with its artifacts on a 1 MiB tmpfs, which needs root.)"""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from perfgate.capture import private_dir as capture_dir
from perfgate.errors import CaptureError

HOLD = '''
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
fcntl.flock(fd, fcntl.LOCK_SH)
print("held", flush=True)
time.sleep(600)
'''

KEEP_UNDER_LIMIT = '''
import json, resource, sys
from pathlib import Path
from perfgate.capture.private_dir import keep
limit = int(sys.argv[3])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
kept = keep(Path(sys.argv[1]), Path(sys.argv[2]))
print(json.dumps({"kept": [p.name for p in kept.kept], "lost": kept.lost, "said": kept.describe(Path(sys.argv[2]))}))
'''


def test_the_private_folder_is_private_and_in_the_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    folder = capture_dir.make()
    private = folder.path
    assert private.parent == tmp_path and private.name.startswith(capture_dir.PREFIX)
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert sorted(p.name for p in private.iterdir()) == ["out", "tmp"]
    folder.close()


def _aged(folder: Path, seconds: float = 3600) -> Path:
    os.utime(folder, (time.time() - seconds, time.time() - seconds))
    return folder


def test_a_left_over_folder_nobody_holds_is_swept_one_held_or_young_is_kept(tmp_path: Path) -> None:
    """A CI runner that SIGKILLs a cancelled job's whole tree kills perfgate and its supervisor at
    once: their private folder (with nsys's raw capture) stayed. The next capture removes it; a
    folder whose supervisor lives (its lock held, here by a child process) or that is being made
    (young) stays."""
    left = tmp_path / f"{capture_dir.PREFIX}left"
    (left / "tmp").mkdir(parents=True)
    (left / "tmp" / "nsys-report-0000.qdstrm").write_bytes(b"raw")
    busy = tmp_path / f"{capture_dir.PREFIX}busy"
    busy.mkdir()
    young = tmp_path / f"{capture_dir.PREFIX}young"
    young.mkdir()
    other = tmp_path / "not-ours"
    other.mkdir()
    _aged(other)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(busy)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        _aged(left)
        _aged(busy)
        assert capture_dir.sweep(tmp_path) == [left]
    finally:
        holder.kill()
        holder.wait()
    assert not left.exists() and busy.is_dir() and young.is_dir() and other.is_dir()
    assert capture_dir.sweep(tmp_path) == [busy]    # its holder is gone now


def test_a_missing_temporary_folder_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    with pytest.raises(CaptureError, match=r"gone: cannot make a capture's private folder there: No such file"):
        capture_dir.make()


def test_a_full_disk_keeps_the_files_that_fit_most_needed_first_whole_or_not_at_all(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    out = Path(tempfile.mkdtemp(prefix="perfgate-test-keep-", dir=shm))
    launch = tmp_path / "launch-0"
    assert out.stat().st_dev != tmp_path.stat().st_dev, "the test needs two file systems (/dev/shm and its folder)"
    try:
        (out / "trace.sqlite").write_bytes(b"s" * 300_000)
        (out / "trace.nsys-rep").write_bytes(b"r" * 90_000)
        (out / "workload.log").write_text("log\n" * 1000)
        (out / "command.txt").write_text("nsys profile ...\n")
        proc = subprocess.run([sys.executable, "-c", KEEP_UNDER_LIMIT, str(out), str(launch), str(100_000)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        done = json.loads(proc.stdout)
    finally:
        for path in out.iterdir():
            path.unlink()
        out.rmdir()
    assert done["kept"] == ["workload.log", "command.txt", "trace.nsys-rep"]
    assert done["lost"] == [["trace.sqlite", "File too large"]]
    assert sorted(p.name for p in launch.iterdir()) == ["command.txt", "trace.nsys-rep", "workload.log"]  # no partial
    assert (launch / "trace.nsys-rep").stat().st_size == 90_000
    assert done["said"] == (f"{launch}: kept workload.log, command.txt, trace.nsys-rep; "
                            "not kept (cleaned copies dropped): trace.sqlite (File too large)")


def test_on_one_file_system_the_files_are_renamed(tmp_path: Path) -> None:
    out, launch = tmp_path / "out", tmp_path / "launch"
    out.mkdir()
    (out / "trace.sqlite").write_bytes(b"x")
    inode = (out / "trace.sqlite").stat().st_ino
    kept = capture_dir.keep(out, launch)
    assert [p.name for p in kept.kept] == ["trace.sqlite"] and kept.lost == []
    assert (launch / "trace.sqlite").stat().st_ino == inode and not any(out.iterdir())


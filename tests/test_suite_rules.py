"""The suite's own rules (tests/conftest.py) that make ``-n 2 --dist loadfile`` safe and even: the
files in the order the workers take them, and the lock that keeps a test which changes nsys's
machine-wide state away from every other test's nsys."""
from __future__ import annotations

import fcntl
import subprocess
import sys

import pytest

from conftest import NSYS_LOCK, file_weight, nsys_lock_mode


def _try_lock(mode: int) -> bool:
    """Whether another process gets :data:`NSYS_LOCK` in ``mode`` at once (without waiting)."""
    code = (f"import fcntl, sys\nf = open({str(NSYS_LOCK)!r}, 'a')\n"
            f"try:\n    fcntl.flock(f, {mode} | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_files_run_heaviest_first_each_file_together(request: pytest.FixtureRequest) -> None:
    """The session's items (as every worker collected them): each file's tests in one run, the
    zoo's files before other slow ones, those before the files that kill nsys, those before the
    rest."""
    files: list[str] = []
    markers: list[set[str]] = []
    for item in request.session.items:
        name = item.nodeid.split("::", 1)[0]
        if not files or files[-1] != name:
            assert name not in files, f"{name}'s tests are split: {files[-1]} runs between them"
            files.append(name)
            markers.append(set())
        markers[-1] |= {m.name for m in item.iter_markers()}
    weights = [file_weight(names) for names in markers]
    assert "tests/test_suite_rules.py" in files
    assert weights == sorted(weights), list(zip(files, weights))
    if "tests/test_zoo.py" in files:
        assert files[0] == "tests/test_zoo.py"


@pytest.mark.nsys_alone
def test_a_test_marked_nsys_alone_holds_the_lock_alone() -> None:
    assert not _try_lock(fcntl.LOCK_SH)


@pytest.mark.nsys
def test_a_test_that_runs_nsys_shares_the_lock() -> None:
    assert _try_lock(fcntl.LOCK_SH)
    assert not _try_lock(fcntl.LOCK_EX)


def test_which_tests_hold_the_lock_and_how() -> None:
    assert nsys_lock_mode({"nsys_alone", "nsys", "slow"}) == fcntl.LOCK_EX
    assert nsys_lock_mode({"nsys", "slow"}) == fcntl.LOCK_SH
    assert nsys_lock_mode({"torch", "slow"}) == fcntl.LOCK_SH
    assert nsys_lock_mode({"slow", "mermaid"}) is None

"""The suite's own rules (tests/conftest.py) that make ``-n 2 --dist loadfile`` safe and even: the
files in the order the workers take them, the lock that keeps a test which changes nsys's
machine-wide state away from every other test's nsys, and each worker on cores of its own."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys

import pytest

from conftest import NSYS_LOCK, PIN_VAR, file_weight, interleaved, nsys_lock_mode, worker_cores


def _try_lock(mode: int) -> bool:
    """Whether another process gets :data:`NSYS_LOCK` in ``mode`` at once (without waiting)."""
    code = (f"import fcntl, sys\nf = open({str(NSYS_LOCK)!r}, 'a')\n"
            f"try:\n    fcntl.flock(f, {mode} | fcntl.LOCK_NB)\nexcept BlockingIOError:\n    sys.exit(1)\n")
    return subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


def test_files_run_heaviest_first_each_file_together(request: pytest.FixtureRequest) -> None:
    """The session's items (as every worker collected them): each file's tests in one run, the
    zoo's files before other slow ones, those before the rest, where each file that runs alone is
    followed by a share of the fast files."""
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
    assert "tests/project/test_suite_rules.py" in files
    slow = [w for w in weights if w < 2]
    assert weights[:len(slow)] == sorted(slow), list(zip(files, weights))
    assert set(weights[len(slow):]) <= {2, 3}, list(zip(files, weights))
    if 2 in weights:
        assert weights[len(slow)] == 2, "the files that run alone start the rest"
    if weights.count(3) >= weights.count(2):        # enough fast files to share out
        alone_at = [i for i, w in enumerate(weights) if w == 2]
        assert all(b - a > 1 for a, b in zip(alone_at, alone_at[1:])), "fast files between the ones that run alone"
    if "tests/programs/test_zoo.py" in files:
        assert files[0] == "tests/programs/test_zoo.py"


@pytest.mark.nsys_alone
def test_a_test_marked_nsys_alone_holds_the_lock_alone() -> None:
    assert not _try_lock(fcntl.LOCK_SH)


@pytest.mark.nsys
def test_a_test_that_runs_nsys_shares_the_lock() -> None:
    assert _try_lock(fcntl.LOCK_SH)
    assert not _try_lock(fcntl.LOCK_EX)


def test_each_file_that_runs_alone_is_followed_by_a_share_of_the_fast_files() -> None:
    tests = {"a1": 5, "a2": 9, "a3": 2, **{f"f{i}": 10 for i in range(9)}}
    fast = [f"f{i}" for i in range(9)]
    assert interleaved(["a1", "a2", "a3"], fast, tests) == [
        "a1", "f0", "f1", "f2", "a2", "f3", "f4", "f5", "a3", "f6", "f7", "f8"]
    assert interleaved([], fast, tests) == fast
    assert interleaved(["a1"], [], tests) == ["a1"]


def test_which_tests_hold_the_lock_and_how() -> None:
    assert nsys_lock_mode({"nsys_alone", "nsys", "slow"}) == fcntl.LOCK_EX
    assert nsys_lock_mode({"nsys", "slow"}) == fcntl.LOCK_SH
    assert nsys_lock_mode({"torch", "slow"}) == fcntl.LOCK_SH
    assert nsys_lock_mode({"slow", "mermaid"}) is None


def test_each_worker_has_its_share_of_the_cores() -> None:
    two = {"PYTEST_XDIST_WORKER_COUNT": "2"}
    assert worker_cores({**two, "PYTEST_XDIST_WORKER": "gw0"}, [0, 1]) == [0]
    assert worker_cores({**two, "PYTEST_XDIST_WORKER": "gw1"}, [0, 1]) == [1]
    assert worker_cores({**two, "PYTEST_XDIST_WORKER": "gw1"}, [0, 1, 2, 3, 4]) == [2, 3]
    assert worker_cores({**two, "PYTEST_XDIST_WORKER": "gw1"}, [4, 6]) == [6]      # the cores the run was given
    assert worker_cores({"PYTEST_XDIST_WORKER_COUNT": "3", "PYTEST_XDIST_WORKER": "gw2"}, [0, 1]) == []
    assert worker_cores({**two, "PYTEST_XDIST_WORKER": "gw0", PIN_VAR: "0"}, [0, 1]) == []
    assert worker_cores({}, [0, 1]) == []


def test_this_worker_runs_on_its_own_cores() -> None:
    """Under ``-n 2`` on 2 cores, this test's process (and what it starts) runs on one core."""
    here = os.sched_getaffinity(0)
    child = subprocess.run([sys.executable, "-c", "import os; print(sorted(os.sched_getaffinity(0)))"],
                           capture_output=True, text=True, timeout=60).stdout.strip()
    assert child == str(sorted(here))
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        pytest.skip("not under pytest-xdist: every core is this process's")
    given = sorted(os.sched_getaffinity(os.getppid()))      # the run's own, in the process that started the workers
    assert sorted(here) == (worker_cores(os.environ, given) or given)
    if os.environ.get(PIN_VAR) != "0" and int(os.environ["PYTEST_XDIST_WORKER_COUNT"]) == len(given):
        assert len(here) == 1

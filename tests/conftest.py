"""Shared test fixtures.

Tests that need the real nsys or torch skip when these are missing on a developer machine, and
FAIL instead when PERFGATE_REQUIRE_REAL=1 (set by .ci/run), so CI can never go green by skipping."""
from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import pytest

from fixture_files import unpack

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
unpack(FIXTURES)   # the committed exports are stored as trace.sqlite.xz


def _missing(what: str) -> None:
    if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
        pytest.fail(f"{what} is required in CI (PERFGATE_REQUIRE_REAL=1) but missing", pytrace=False)
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="session")
def nsys_path() -> str:
    """Path of a real nsys (scripts/install-nsys.sh installs 2022.4 on Debian)."""
    path = shutil.which("nsys")
    if path is None:
        _missing("nsys")
    return path  # type: ignore[return-value]


@pytest.fixture(scope="session")
def torch_module():
    """The torch module (with torchvision importable), or skip/fail."""
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
    except Exception as exc:  # pragma: no cover - depends on machine
        _missing(f"torch/torchvision ({exc})")
    import torch

    return torch


@pytest.fixture(scope="session")
def mermaid_parse():
    """Mermaid's own parser (scripts/install-mermaid.sh: mermaid and jsdom under Node.js): a function
    from diagram texts to ``{"ok": bool, "type" or "error": str}`` each, or skip/fail."""
    import json
    import subprocess

    folder = Path(os.environ.get("PERFGATE_MERMAID_DIR", REPO / ".cache" / "mermaid")).resolve()
    node = shutil.which("node")
    if node is None or not (folder / "node_modules" / "mermaid").is_dir():
        _missing(f"Mermaid's parser (node and {folder}/node_modules/mermaid: bash scripts/install-mermaid.sh)")

    def parse(diagrams: list[str]) -> list[dict]:
        done = subprocess.run([node, str(REPO / "tests" / "mermaid" / "parse.mjs")], input=json.dumps(diagrams),
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PERFGATE_MERMAID_DIR": str(folder)})
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    return parse


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


# tests/zoo/programs holds public training programs (data for tests/programs/test_zoo.py), never tests
collect_ignore_glob = ["zoo/programs/*"]


#: The tiers, by rule: a test that uses one of these fixtures (itself or through another fixture)
#: carries these markers. ``python3 -m pytest -m "not slow"`` is the fast tier: the tests that read
#: committed captures and run no nsys and no torch (a few others are marked ``slow`` where they are).
FIXTURE_MARKS = {"nsys_path": ("nsys", "slow"), "torch_module": ("torch", "slow"), "mermaid_parse": ("mermaid",)}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers by rule (:data:`FIXTURE_MARKS`; the zoo's programs are ``slow`` too); then the zoo's
    slower programs (marker ``zoo_full``) run only when ``-m`` names the zoo (``-m zoo``): CI's test
    command runs the fast subset."""
    for item in items:
        names = {mark for fixture in getattr(item, "fixturenames", ()) for mark in FIXTURE_MARKS.get(fixture, ())}
        names |= {"slow"} if item.get_closest_marker("zoo") is not None else set()
        for name in sorted(names - {m.name for m in item.iter_markers()}):
            item.add_marker(name)
    if "zoo" not in (config.option.markexpr or ""):
        kept = [item for item in items if item.get_closest_marker("zoo_full") is None]
        if len(kept) != len(items):
            config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("zoo_full")])
            items[:] = kept


class _FileOrder:
    """Orders the files after every selection (``-m``, ``-k``: trylast), from what runs."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        items[:] = heaviest_files_first(items)


def pytest_configure(config: pytest.Config) -> None:
    """The files' order (:func:`heaviest_files_first`, after every selection): pytest-xdist's
    ``--dist loadfile`` would hand out files by their count of tests, the most first. A worker of
    pytest-xdist runs on cores of its own (:func:`worker_cores`)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.pluginmanager.register(_FileOrder(), "perfgate-tests-file-order")
    cores = worker_cores(os.environ, sorted(os.sched_getaffinity(0)))
    if cores:
        os.sched_setaffinity(0, cores)


#: ``PERFGATE_TESTS_PIN=0`` leaves pytest-xdist's workers on every core.
PIN_VAR = "PERFGATE_TESTS_PIN"


def worker_cores(env: Mapping[str, str], cores: list[int]) -> list[int]:
    """The cores of this pytest-xdist worker (``gw<i>`` of ``PYTEST_XDIST_WORKER_COUNT``): an equal
    share of ``cores``, the worker's own, which every process its tests start inherits. A test that
    times a program (the zoo's step against the program's own iteration, an unchanged rerun that must
    pass) then shares no core with the other worker's captures, as a CI job shares none with another
    job's runner. Empty (every core) outside xdist, with more workers than cores, or with
    ``PERFGATE_TESTS_PIN=0``."""
    worker, count = env.get("PYTEST_XDIST_WORKER", ""), env.get("PYTEST_XDIST_WORKER_COUNT", "")
    if env.get(PIN_VAR) == "0" or not worker.startswith("gw") or not count.isdigit():
        return []
    n, index = int(count), int(worker[2:])
    if n < 2 or n > len(cores) or index >= n:
        return []
    share = len(cores) // n
    return cores[index * share:(index + 1) * share]


def file_weight(markers: set[str]) -> int:
    """A test file's place in the run: 0 for one that gates the zoo's programs, 1 for one with
    other ``slow`` tests (nsys, torch), 2 for one that runs alone (``nsys_alone``: it waits for the
    other process's nsys test to end, so it goes where the other process turns to the fast files,
    :func:`interleaved` with them), 3 for the rest."""
    if "zoo" in markers:
        return 0
    return 2 if "nsys_alone" in markers else 1 if "slow" in markers else 3


def heaviest_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The items with whole files moved, the heaviest first (:func:`file_weight`), each file's
    tests kept together and in their order: ``-n 2`` (pytest-xdist, ``--dist loadfile``) hands
    out files in this order (:func:`pytest_configure`), and a file of the zoo's 4-5 minutes handed
    out late would keep one worker busy while the other idles; the fast files at the end even out
    the two workers' ends."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    weight = {name: file_weight({m.name for item in group for m in item.iter_markers()})
              for name, group in files.items()}
    ordered = sorted(files, key=lambda name: weight[name])      # stable: collection order within a weight
    ordered = [n for n in ordered if weight[n] < 2] + interleaved([n for n in ordered if weight[n] == 2],
                                                                  [n for n in ordered if weight[n] == 3],
                                                                  {n: len(g) for n, g in files.items()})
    return [item for name in ordered for item in files[name]]


def interleaved(alone: list[str], fast: list[str], tests: dict[str, int]) -> list[str]:
    """The files that run alone, each followed by an equal share (by tests) of the fast files: while
    one process holds the lock alone, the other runs fast files, which hold none, instead of waiting
    for the lock with the next file that runs alone."""
    if not alone:
        return fast
    share, out, taken, k = sum(tests[n] for n in fast) / len(alone), [], 0, 0
    for i, name in enumerate(alone):
        out.append(name)
        while k < len(fast) and (i == len(alone) - 1 or taken < share * (i + 1)):
            taken += tests[fast[k]]
            out.append(fast[k])
            k += 1
    return out


#: One lock file for the machine's nsys, across test sessions at once (pytest-xdist's workers, or
#: two developers' runs): a test that runs nsys or torch holds it shared from its setup to its
#: teardown (module fixtures' included), one marked ``nsys_alone`` (it changes nsys's machine-wide
#: state: its session table in /dev/shm) holds it alone.
NSYS_LOCK = Path(tempfile.gettempdir()) / "perfgate-tests-nsys.lock"


def nsys_lock_mode(markers: set[str]) -> int | None:
    """How a test with ``markers`` holds :data:`NSYS_LOCK`: alone, shared, or not at all."""
    if "nsys_alone" in markers:
        return fcntl.LOCK_EX
    return fcntl.LOCK_SH if markers & {"nsys", "torch"} else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    mode = nsys_lock_mode({m.name for m in item.iter_markers()})
    if mode is None:
        return (yield)
    with NSYS_LOCK.open("a") as lock:
        fcntl.flock(lock, mode)
        try:
            return (yield)   # the lock goes with the file's closing
        finally:
            if mode == fcntl.LOCK_EX:
                _no_nsys_state_left()


def _no_nsys_state_left(wait_s: float = 30.0) -> None:
    """After a test that killed nsys (still holding the lock alone): once its nsys processes have
    ended, nsys's session table goes too, so that the sessions of the tests after it, two at once,
    do not meet a table a killed session left ("Agent launcher failed."), which perfgate removes
    only where no other nsys runs."""
    from perfgate.system.nsys import _nsys_running, clear_stale_session_table

    deadline = time.monotonic() + wait_s
    while _nsys_running() and time.monotonic() < deadline:
        time.sleep(0.2)
    clear_stale_session_table()


#: Every process the suite starts inherits this variable (a name perfgate's tests do not strip, as
#: they strip PERFGATE_*), so that processes left running when the suite ends can be told from others'.
SUITE_MARK = "PGSUITE_SESSION"
#: How long processes the suite started may take to exit after its last test.
SUITE_EXIT_WAIT_S = 20.0


def _suite_processes(mark: bytes) -> list[str]:
    """``pid: command`` of the live processes whose environment holds ``mark`` (zombies and
    processes that cannot be read are skipped)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if mark not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        found.append(f"{proc.name}: {command[:300]}")
    return found


@pytest.fixture(scope="session", autouse=True)
def _no_process_outlives_the_suite() -> object:
    """Every process perfgate starts ends with it: a process the suite started (a workload, nsys,
    perfgate's supervisor) that is still running 20 s after the last test fails the suite; left
    behind, it would also slow every test after it."""
    if not Path("/proc/self/environ").exists():          # not Linux: nothing to read
        yield
        return
    value = uuid.uuid4().hex
    os.environ[SUITE_MARK] = value
    yield
    mark = f"{SUITE_MARK}={value}".encode()
    deadline = time.monotonic() + SUITE_EXIT_WAIT_S
    left = _suite_processes(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _suite_processes(mark)
    if left:
        pytest.fail(f"{len(left)} process(es) started by the test suite still run {SUITE_EXIT_WAIT_S:g} s after "
                    "its last test:\n" + "\n".join(left), pytrace=False)


@pytest.fixture(autouse=True)
def _short_capture_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Captures taken again in this process wait 0.1 s instead of capture.RETRY_WAITS_S (20 and 40 s
    and jitter): tests of retries check what is retried and said; the waits themselves are checked
    in tests/capture/test_capture_start.py. perfgate run as a subprocess keeps its real waits."""
    from perfgate.capture import launch as capture

    monkeypatch.setattr(capture, "RETRY_WAITS_S", (0.1, 0.1))
    monkeypatch.setattr(capture, "RETRY_JITTER_S", 0.0)

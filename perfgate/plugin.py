"""pytest plugin: ``pytest --perfgate`` adds one item per workload (``perfgate::<name>``).

Inert without ``--perfgate``: options are registered (built from perfgate.settings.config.SETTINGS,
as the ``perfgate`` command's are), nothing is collected or imported beyond this module and
perfgate.settings.config. Each workload's run and the reports are the ``perfgate run`` command's
(perfgate.commands.run.gate_workload, write_reports).
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import pytest

from perfgate.errors import PerfgateError

if TYPE_CHECKING:
    from perfgate.settings.config import Settings
    from perfgate.records.model import WorkloadResult
    from perfgate.settings.workloads import WorkloadSpec

SETTINGS_KEY = pytest.StashKey["Settings"]()
RESULTS_KEY = pytest.StashKey["list[WorkloadResult]"]()
REPORTS_KEY = pytest.StashKey["dict[str, Any]"]()
NOTES_KEY = pytest.StashKey["list[str]"]()   # files of the workloads folder skipped as helpers
TERMINATED_KEY = pytest.StashKey[int]()
PREVIOUS_HANDLERS_KEY = pytest.StashKey["dict[Any, Any]"]()
NOT_ACTIVE = "perfgate: performance gate runs only with --perfgate"


def pytest_addoption(parser: pytest.Parser) -> None:
    from perfgate.settings.config import PYTEST_PREFIX
    from perfgate.settings.options import add_setting_options

    group = parser.getgroup("perfgate", "perfgate: performance regression gate under Nsight Systems")
    add = group.addoption
    add("--perfgate", action="store_true", default=False,
        help="run the workloads under nsys and compare them with their baselines (one item each)")
    add("--perfgate-update-baselines", action="store_true", default=False,
        help="record the measured launches as the new baselines of this machine class")
    add("--perfgate-workload", action="append", default=[], metavar="NAME",
        help="run only this workload (NAME or NAME[variant]; repeatable; default: all enabled)")
    add_setting_options(add, PYTEST_PREFIX)   # the settings' options, shared with the perfgate command


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "perfgate(workload=None, args=(), variant=None): a test running a perfgate workload "
        "through the `perfgate` fixture; skipped without --perfgate")
    if not config.getoption("perfgate"):
        return
    from perfgate.settings.config import PYTEST_PREFIX
    from perfgate.settings.options import settings_from_options

    try:
        settings = settings_from_options(config.getoption, PYTEST_PREFIX, start=config.invocation_params.dir,
                                         selected=config.getoption("perfgate_workload"))
    except PerfgateError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    config.stash[SETTINGS_KEY] = settings
    config.stash[RESULTS_KEY] = []
    _raise_on_terminate(config)


def _raise_on_terminate(config: pytest.Config) -> None:
    """SIGTERM/SIGHUP raise perfgate.system.process_tree.Terminated (a KeyboardInterrupt): the running
    capture ends its process tree and cleans its artifacts, pytest reports the interruption, and
    pytest_unconfigure then ends the process by that signal (exit status 128 + N)."""
    import signal
    import threading

    from perfgate.system.process_tree import Terminated

    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, _frame: object) -> None:
        config.stash[TERMINATED_KEY] = signum
        raise Terminated(signum)

    config.stash[PREVIOUS_HANDLERS_KEY] = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}


def pytest_unconfigure(config: pytest.Config) -> None:
    import signal

    for signum, previous in config.stash.get(PREVIOUS_HANDLERS_KEY, {}).items():
        signal.signal(signum, previous)
    signum = config.stash.get(TERMINATED_KEY, None)
    if signum is not None:
        from perfgate.system.process_tree import reraise

        reraise(signum)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Append one PerfgateItem per selected workload, before -k/-m deselection runs."""
    settings = config.stash.get(SETTINGS_KEY, None)
    if settings is None:
        return
    try:
        specs = _specs(settings, settings.selected)
    except PerfgateError as exc:
        raise pytest.UsageError(f"perfgate: {exc}") from None
    from perfgate.settings.workloads import helper_notes

    config.stash[NOTES_KEY] = helper_notes(settings)
    added = [PerfgateItem.from_parent(session, name=spec.full_name, nodeid=f"perfgate::{spec.full_name}", spec=spec)
             for spec in specs]
    items.extend(added)
    # reported as collected, so that pytest's count ("collected N items / M deselected / K selected")
    # includes them: they may be deselected (-m, -k) like any other item
    config.hook.pytest_collectreport(report=pytest.CollectReport("perfgate", "passed", None, list(added)))


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("perfgate") is not None and SETTINGS_KEY not in item.config.stash:
        pytest.skip(NOT_ACTIVE)


class PerfgateFailure(Exception):
    """A workload failed the gate; its text is the whole failure report (no traceback)."""


class PerfgateItem(pytest.Item):
    """One workload (or variant) run through the pipeline."""

    def __init__(self, *, spec: WorkloadSpec, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.extra_keyword_matches.add("perfgate")
        self.add_marker("perfgate")  # `pytest --perfgate -m perfgate` runs the gate items alone

    def runtest(self) -> None:
        _run(self.config, self.spec)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, PerfgateFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"perfgate::{self.spec.full_name}"


class PerfgateRunner:
    """What the ``perfgate`` fixture returns: ``run(workload, *args) -> WorkloadResult``."""

    def __init__(self, config: pytest.Config, node: pytest.Item) -> None:
        self._config = config
        self._node = node

    def run(self, workload: str | None = None, *args: str, variant: str | None = None) -> WorkloadResult:
        """Run ``workload`` (default: the test's ``perfgate`` marker's) with extra ``args``; fails
        the test on regression. Extra args get their own baseline, named after ``variant``
        (default: the test's name)."""
        from dataclasses import replace

        marker = self._node.get_closest_marker("perfgate")
        marked = dict(marker.kwargs) if marker is not None else {}
        workload = workload or marked.get("workload") or (marker.args[0] if marker and marker.args else None)
        if not workload:
            raise pytest.UsageError(f"{self._node.nodeid}: perfgate.run() needs a workload name (or a perfgate marker)")
        all_args = (*marked.get("args", ()), *args)
        variant = variant or marked.get("variant")
        if all_args and not variant:
            variant = re.sub(r"[^A-Za-z0-9_.\-]+", "-", self._node.name).strip("-")
        settings = self._config.stash[SETTINGS_KEY]
        try:
            spec = _specs(settings, [workload])[0]
        except PerfgateError as exc:
            pytest.fail(str(exc), pytrace=False)
        spec = replace(spec, args=(*spec.args, *all_args), variant=variant or spec.variant)
        try:
            return _run(self._config, spec)
        except PerfgateFailure as exc:
            pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def perfgate(request: pytest.FixtureRequest) -> PerfgateRunner:
    """Run perfgate workloads from a test; skipped without --perfgate."""
    if SETTINGS_KEY not in request.config.stash:
        pytest.skip(NOT_ACTIVE)
    return PerfgateRunner(request.config, request.node)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    results = session.config.stash.get(RESULTS_KEY, None)
    if not results:
        return
    settings = session.config.stash[SETTINGS_KEY]
    try:
        from perfgate.commands.run import write_reports

        written = write_reports(results, settings.report_dir)
        session.config.stash[REPORTS_KEY] = {"dir": settings.report_dir, "files": written}
    except Exception as exc:  # reports must never turn a run into a crash, but a run without them fails
        text = str(exc) if isinstance(exc, PerfgateError) else f"{type(exc).__name__}: {exc}"
        session.config.stash[REPORTS_KEY] = {"error": text}
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS_KEY, None)
    if results is None:
        return
    try:
        from perfgate.report.terminal import render_summary

        terminalreporter.section("perfgate")
        for note in config.stash.get(NOTES_KEY, []):
            terminalreporter.write_line(_inert(f"perfgate: note: {note}"))
        for line in render_summary(results):
            terminalreporter.write_line(_inert(line))
        reports = config.stash.get(REPORTS_KEY, {})
        if "error" in reports:
            terminalreporter.write_line(_inert(f"perfgate: error: {reports['error']}"), red=True)
        elif "dir" in reports:
            terminalreporter.write_line(f"perfgate: reports in {reports['dir']}")
    except Exception as exc:  # never raise from a summary hook
        terminalreporter.write_line(f"perfgate: could not render the summary: {type(exc).__name__}: {exc}")


def _specs(settings: Settings, names: Sequence[str]) -> list[WorkloadSpec]:
    from perfgate.system.machine import machine_info
    from perfgate.settings.workloads import discover_workloads, select_workloads

    gpus = machine_info(None, settings.machine_class).gpu_count
    return select_workloads(discover_workloads(settings, gpus), list(names))


def _inert(text: str) -> str:
    """``text`` safe for the terminal and a CI log (perfgate.report.escape.terminal_text)."""
    from perfgate.report.escape import terminal_text

    return terminal_text(text)


def _progress(config: pytest.Config) -> Any:
    """A progress line printer that reaches the terminal while pytest captures the test's output
    (quiet under -qq)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")
    if reporter is None or config.get_verbosity() < -1:
        return None

    def say(line: str) -> None:
        if capman is not None:
            with capman.global_and_fixture_disabled():
                reporter.write_line(_inert(f"perfgate: {line}"))
        else:
            reporter.write_line(_inert(f"perfgate: {line}"))
    return say


def _run(config: pytest.Config, spec: WorkloadSpec) -> WorkloadResult:
    """Run ``spec`` through the pipeline, record its result; raise PerfgateFailure when it fails."""
    from perfgate.commands.run import gate_workload
    from perfgate.report.terminal import failure_message

    update = config.getoption("perfgate_update_baselines")
    result, problem = gate_workload(spec, config.stash[SETTINGS_KEY], update=update, progress=_progress(config))
    config.stash[RESULTS_KEY].append(result)
    if problem is not None:            # its history line could not be written
        raise PerfgateFailure(_inert(f"perfgate: error: {problem}")) from None
    if result.failed:
        raise PerfgateFailure(_inert(failure_message(result)))
    return result

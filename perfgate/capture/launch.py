"""Run one launch of a workload under ``nsys profile`` and keep its artifacts.

perfgate.capture.command builds the command line and environment (pure); ``run_capture`` runs it under perfgate's
supervisor (perfgate.system.process_tree: the whole process tree ends with the launch) with a timeout, in
a private folder (perfgate.capture.private_dir), and leaves in the launch directory, once cleaned of
secrets (perfgate.capture.redaction.launch_folder): ``trace.nsys-rep``, ``trace.sqlite``, ``command.txt`` (the command
line) and ``workload.log`` (stdout and stderr of nsys and the workload). nsys and the profiled
process get a scrubbed environment, and the private folder as ``TMPDIR``.
With ``autostep`` on (the default) that environment also carries ``PERFGATE_AUTOSTEP=1`` and
autostep's ``sitecustomize`` folder first on ``PYTHONPATH`` (perfgate.capture.autostep.install: NVTX ranges
for DataLoader, backward and optimizer step in code that has none).
"""
from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.capture import private_dir
from perfgate.capture.command import (
    TIMING, Rendezvous, capture_environment, nsys_command, pytorch_trace_mode, resolve_trace,
)
from perfgate.capture.nodes import multinode_command, node_stem
from perfgate.capture.nsys_log import failure_cause
from perfgate.capture.private_dir import Kept
from perfgate.capture.redaction.launch_folder import clean_artifacts
from perfgate.system.secrets import WITHHELD_SUFFIX, redact_text, secret_values
from perfgate.errors import CaptureError, CaptureTimeoutError, ImporterError, WorkloadFailedError
from perfgate.records.model import Capture
from perfgate.settings.config import Settings
from perfgate.settings.workloads import WorkloadSpec
from perfgate.system import process_tree

SELF_REPORT_PREFIX = "PERFGATE_SELF_REPORT "
REPORT_STEM = "trace"
REPORTS = f"{REPORT_STEM}*.*"      # the reports of a launch: trace.*, or trace-node<i>.* of each node
TAIL_LINES = 30
KILL_GRACE_S = 10.0
# Asked to stop (timeout, Ctrl-C, SIGTERM), nsys gets SIGINT and this long to stop the workload and
# write its report (2.2 to 2.6 s for a small CPU capture with nsys 2022.4, also for a workload that
# ignores SIGINT and SIGTERM); then the tree is ended.
FINALIZE_S = 60.0
ATTEMPTS = 3    # runs of nsys for one launch when it fails for a transient reason (nsys.transient_failure)
# nsys 2022.4 beside other sessions was seen to hang before it started the workload (its agent and
# nsys both waiting on a futex, nothing logged, until the launch's timeout): one that has started no
# program this long after it began is stopped and taken again, like a transient failure
START_S = 60.0
# Before attempt k+1, wait RETRY_WAITS_S[k-1] plus up to RETRY_JITTER_S: gates failing together
# (one nsys hung holds the machine's session table; the others fail in 10 s each) then try again
# after the hung one was stopped, one at a time
RETRY_WAITS_S = (20.0, 40.0)
RETRY_JITTER_S = 5.0
def parse_self_report(text: str) -> dict[str, Any] | None:
    """The last ``PERFGATE_SELF_REPORT {json}`` line of a workload's output, parsed."""
    for line in reversed(text.splitlines()):
        _, found, payload = line.partition(SELF_REPORT_PREFIX)
        if found:
            try:
                value = json.loads(payload)
            except json.JSONDecodeError:
                return None
            return value if isinstance(value, dict) else None
    return None


_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x08\x0b-\x1f\x7f]")


def log_tail(text: str, lines: int = TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, without nsys's progress-bar noise, terminal control
    sequences, and with a line the workload wrote as a GitHub workflow command (``::error::...``,
    ``::add-mask::``) made inert: perfgate prints this text where the CI runner reads commands."""
    kept = [_CONTROL.sub("", ln.rsplit("\r", 1)[-1]) for ln in text.splitlines()]
    kept = [ln for ln in kept if ln.strip() and not ln.lstrip().startswith("[1/2]") and not ln.lstrip().startswith("[2/2]")]
    return "\n".join(f"(log) {ln}" if ln.lstrip().startswith("::") else ln for ln in kept[-lines:])


def stopped_output(text: str, log_path: Path, why: str) -> str:
    """The tail of the log of a launch perfgate stopped (``why``: "at its timeout"), under a line
    that says whose lines they are. nsys, asked to finish, stops the workload with SIGINT: a Python
    workload's KeyboardInterrupt traceback then ends its output, and printed after perfgate's
    message it read as perfgate's own crash. It is said to be the workload's, and where it shows the
    workload was."""
    tail = log_tail(text)
    head = f"the last lines of the workload's output and nsys's ({log_path})"
    if any(ln.strip() == "KeyboardInterrupt" or ln.startswith("KeyboardInterrupt:") for ln in tail.splitlines()):
        head += (f"; the KeyboardInterrupt traceback is the workload's own: nsys stopped it with SIGINT when "
                 f"perfgate ended the launch {why}, and it shows where the workload was")
    return f"{head}:\n{tail}"


@dataclass
class _Attempt:
    """One run of nsys in its private folder, its cleaned files moved into the launch folder."""

    cmd: list[str]
    returncode: int | None     # None: stopped at the timeout
    wall_s: float
    text: str                  # the (cleaned) log
    kept: Kept
    tmp_note: str = ""         # private_dir.room_note: the temporary folder was (nearly) full
    hung: str | None = None    # nsys started no workload: what happened, in words


def run_capture(
    spec: WorkloadSpec,
    settings: Settings,
    launch_dir: Path,
    *,
    cwd: Path | None = None,
    extra_args: Sequence[str] = (),
    kind: str = TIMING,
    progress: Callable[[str], None] | None = None,
) -> Capture:
    """Run ``spec`` once under nsys as a launch of ``kind`` (its trace set: :func:`resolve_trace`);
    artifacts go to ``launch_dir`` (created).

    nsys writes into a private folder (perfgate.capture.private_dir) under perfgate's supervisor
    (perfgate.system.process_tree.PrivateRun): on success, failure, timeout, Ctrl-C or SIGTERM nsys is
    asked to finish (SIGINT: it writes the report of what ran), the whole process tree ends, the
    output is cleaned of secrets (perfgate.capture.redaction.launch_folder) and only then moved into ``launch_dir``;
    the supervisor removes the private folder, also when perfgate is killed. An nsys that failed
    for a reason nsys.transient_failure recognises (another nsys session's), or that had started
    no workload START_S after it began, is run again after a wait (RETRY_WAITS_S; nsys's stale
    session table removed first where no nsys runs), up to ATTEMPTS times, said through
    ``progress`` and in ``Capture.retried``.
    Raises NsysNotFoundError, WorkloadFailedError (non-zero exit, with the log's tail),
    CaptureTimeoutError (process tree ended), ImporterError (no report) or CaptureError (the
    artifacts folder could not hold the export, or nsys never started the workload)."""
    from perfgate.system.machine import machine_info
    from perfgate.system.nsys import clear_stale_session_table, find_nsys, transient_failure

    nsys = find_nsys(settings.nsys, settings.sources.get("nsys", "option"), settings.option("nsys"))
    pytorch = pytorch_trace_mode(settings.pytorch_trace, nsys)
    machine = machine_info(None, settings.machine_class)
    launch_dir.mkdir(parents=True, exist_ok=True)
    timeout_s = spec.timeout_s or settings.timeout_s
    retried: list[str] = []
    while True:
        attempt = _attempt(nsys, spec, settings, launch_dir, timeout_s, cwd=cwd, extra_args=extra_args,
                           trace=resolve_trace(settings.trace, machine.gpu_count, kind), pytorch=pytorch)
        reason = attempt.hung or (transient_failure(attempt.text) if _no_report(attempt, spec, launch_dir) else None)
        if reason is None or len(retried) + 1 >= ATTEMPTS:
            break
        retried.append(reason)
        _set_aside(launch_dir, len(retried))
        wait_s = RETRY_WAITS_S[len(retried) - 1] + random.uniform(0, RETRY_JITTER_S)
        if progress is not None:
            log = launch_dir / f"workload.attempt-{len(retried)}.log"
            progress(f"{spec.full_name}: nsys failed ({reason}); capturing again in {wait_s:.0f} s "
                     f"(attempt {len(retried) + 1} of {ATTEMPTS}); its log: {log}")
        _pause(wait_s)
        cleared = clear_stale_session_table()     # where no nsys runs any more
        if cleared and progress is not None:
            progress(f"{spec.full_name}: removed nsys's stale session table {', '.join(map(str, cleared))} "
                     "(no nsys runs on this machine)")
    return _outcome(spec, attempt, launch_dir, timeout_s, tuple(retried), cwd or settings.root, settings)


def _pause(seconds: float) -> None:
    process_tree.pause(seconds)     # a Ctrl-C another thread received ends it too


def _attempt(nsys: Path, spec: WorkloadSpec, settings: Settings, launch_dir: Path, timeout_s: float, *,
             cwd: Path | None, extra_args: Sequence[str], trace: str, pytorch: str | None) -> _Attempt:
    """One nsys run in a private folder; whatever ends it, its output cleaned and moved out."""
    from perfgate.system.nsys import await_start, supports_option
    from perfgate.system.nsys_program import turn_to_start

    known = secret_values(os.environ)
    folder = private_dir.make()
    private, out = folder.path, folder.path / "out"
    run: process_tree.PrivateRun | None = None
    returncode: int | None = None
    session = f"perfgate-{private.name.removeprefix(private_dir.PREFIX)}"

    def build(output: Path, name: str | None, rendezvous: Rendezvous | None = None) -> list[str]:
        return nsys_command(
            nsys, spec, output, trace=trace, capture_range=settings.capture_range, pytorch=pytorch,
            extra_args=extra_args, cuda_memory_usage=settings.cuda_memory_usage,
            wait_primary=supports_option(nsys, "--wait"), session=name, rendezvous=rendezvous)

    named = session if supports_option(nsys, "--session-new") else None
    cmd = (build(out / REPORT_STEM, named) if spec.nnodes == 1 else    # one nsys per node (capture.nodes)
           multinode_command(spec, build, out, REPORT_STEM, named, session))
    env = capture_environment(os.environ, settings.capture_range, autostep=settings.autostep, threads=settings.threads)
    env["TMPDIR"] = str(private / "tmp")
    started = time.monotonic()
    try:
        (out / "command.txt").write_text(redact_text(shlex.join(cmd), known) + "\n")
        # a Ctrl-C while the supervisor starts waits until it is ``run``, then stops it as below (one
        # that broke into subprocess.Popen lost the supervisor's handle: nsys was never asked to finish)
        # one nsys starts at a time on the machine (nsys_program.turn_to_start); a job's node fan-out
        # takes each node's turn itself
        with turn_to_start(START_S) if spec.nnodes == 1 else contextlib.nullcontext(False):
            began = time.monotonic()
            with (out / "workload.log").open("wb") as log, process_tree.signals_deferred():
                run = process_tree.PrivateRun(cmd, private=private, grace_s=KILL_GRACE_S,
                                              finalize=(signal.SIGINT, FINALIZE_S), cwd=str(cwd or settings.root),
                                              env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if spec.nnodes == 1:
                await_start(run.proc.pid, run.ended, began + min(START_S, timeout_s))
        returncode, hung = _wait(run, timeout_s, began)
    finally:
        with process_tree.signals_deferred():   # Ctrl-C or SIGTERM now would lose the launch's files
            try:
                if run is not None and returncode is None:
                    run.stop()      # nsys finishes its report of what ran; the tree ends
                room = private_dir.room_note(private)
                clean_artifacts(out, known, nsys)
                kept = private_dir.keep(out, launch_dir)
            finally:
                if run is not None:
                    run.release()
                else:
                    shutil.rmtree(private, ignore_errors=True)
                folder.close()
    log_path = launch_dir / "workload.log"
    text = log_path.read_text(errors="replace") if log_path.is_file() else ""
    return _Attempt(cmd=cmd, returncode=returncode, wall_s=time.monotonic() - started, text=text, kept=kept,
                    tmp_note=room, hung=hung)


def _wait(run: process_tree.PrivateRun, timeout_s: float, began: float) -> tuple[int | None, str | None]:
    """nsys's exit status (None: stopped at the timeout, counted from ``began``) and, where it had
    started no workload START_S after it began (nsys.started_workload), why it was stopped then."""
    from perfgate.system.nsys import started_workload

    first = min(START_S, timeout_s)
    try:
        return run.wait(max(0.0, began + first - time.monotonic())), None
    except subprocess.TimeoutExpired:
        pass
    if not started_workload(run.proc.pid):
        return None, f"nsys had started no workload {first:g} s after it began (it hung at its start)"
    try:
        return run.wait(max(0.0, began + timeout_s - time.monotonic())), None
    except subprocess.TimeoutExpired:
        return None, None


def _stems(spec: WorkloadSpec) -> list[str]:
    """The report stems of a launch of ``spec``: ``trace``, or ``trace-node<i>`` of each node."""
    return [REPORT_STEM] if spec.nnodes == 1 else [node_stem(REPORT_STEM, i) for i in range(spec.nnodes)]


def _missing(spec: WorkloadSpec, launch_dir: Path) -> list[str]:
    """The stems of the launch's reports that nsys did not write (no file of the stem)."""
    return [stem for stem in _stems(spec) if not any(launch_dir.glob(f"{stem}.*"))]


def _no_report(attempt: _Attempt, spec: WorkloadSpec, launch_dir: Path) -> bool:
    """nsys ended (not stopped at the timeout) and left no report, or a node's nsys none of its
    node's: nsys failed, not the workload (whose failure ends every node's nsys with a report)."""
    return attempt.returncode is not None and bool(_missing(spec, launch_dir))


def _set_aside(launch_dir: Path, n: int) -> None:
    """Keep a failed attempt's log as ``workload.attempt-<n>.log`` (and its command); the next
    attempt writes the launch's files afresh."""
    for name in ("workload.log", "command.txt"):
        path = launch_dir / name
        if path.is_file():
            stem, suffix = name.rsplit(".", 1)
            path.replace(launch_dir / f"{stem}.attempt-{n}.{suffix}")
    for report in launch_dir.glob(REPORTS):   # what nsys wrote of a run it never started
        report.unlink()


def _outcome(spec: WorkloadSpec, attempt: _Attempt, launch_dir: Path, timeout_s: float,
             retried: tuple[str, ...], root: Path, settings: Settings) -> Capture:
    """The Capture of the last attempt, or the error that says what went wrong."""
    log_path = launch_dir / "workload.log"
    text = attempt.text
    withheld = sorted(p.name for p in launch_dir.glob(f"*{WITHHELD_SUFFIX}"))
    if withheld:   # said in the error of a failed launch; a successful one's analysis notes them
        text += f"\nperfgate withheld (secrets it could not clean): {', '.join(withheld)}"
    if attempt.kept.lost:
        text += f"\nperfgate could not keep every file, the artifacts folder is full: {attempt.kept.describe(launch_dir)}"
    tried = f" (after {len(retried) + 1} attempts: {'; '.join(retried)})" if retried else ""
    stems = _stems(spec)
    report = launch_dir / f"{stems[0]}.nsys-rep"
    sqlite = launch_dir / f"{stems[0]}.sqlite"
    if attempt.hung:
        raise CaptureError(f"workload {spec.full_name} never ran: {attempt.hung}{tried}; "
                           f"log: {log_path}\n{log_tail(text)}")   # nsys's lines: it started no workload
    if attempt.returncode is None:
        kept = f"; the trace up to then: {sqlite}" if sqlite.is_file() else ""
        raise CaptureTimeoutError(
            f"workload {spec.full_name} ran past its timeout of {timeout_s:g} s; its process tree (nsys, "
            f"the workload and their children) was ended (timeout_s in [tool.perfgate] or {settings.option('timeout_s')}){kept}\n"
            + stopped_output(text, log_path, "at its timeout")
        )
    if attempt.returncode != 0:
        missing = _missing(spec, launch_dir)
        if not missing:   # nsys wrote every report: the workload's own exit
            raise WorkloadFailedError(
                f"workload {spec.full_name} exited with code {attempt.returncode} under nsys; "
                f"last lines of its output ({log_path}):\n{log_tail(text)}"
            )
        if len(missing) < len(stems):   # a node's nsys failed: the others were stopped
            raise WorkloadFailedError(
                f"the nsys of a node of workload {spec.full_name} wrote no report ({', '.join(missing)}) and the "
                f"job exited with code {attempt.returncode}: {failure_cause(text, os.environ)}{tried}; "
                f"last lines of the output ({log_path}):\n{log_tail(text)}"
            )
        raise WorkloadFailedError(   # no report at all: nsys may never have started the workload
            f"nsys exited with code {attempt.returncode} and wrote no report for workload {spec.full_name}: "
            f"{failure_cause(text, os.environ)}{tried}{attempt.tmp_note}; last lines of the output ({log_path}):\n{log_tail(text)}"
        )
    if attempt.kept.lost and not sqlite.is_file():
        raise CaptureError(f"the launch's SQLite export did not fit in the artifacts folder: "
                           f"{attempt.kept.describe(launch_dir)}")
    if not report.exists() and not report.with_name(report.name + WITHHELD_SUFFIX).exists() and not sqlite.exists():
        raise ImporterError(
            f"nsys exited 0 but wrote no {report.name} in {launch_dir}{tried}{attempt.tmp_note}: it lost its capture "
            f"(its importer could not convert it, or its agent went away); see {log_path}\n{log_tail(text, 10)}"
        )
    lost = [f"{s}.sqlite" for s in stems if not (launch_dir / f"{s}.sqlite").is_file()]
    if spec.nnodes > 1 and lost:
        raise ImporterError(f"nsys wrote no {', '.join(lost)} in {launch_dir}{tried}: a node of the job lost its "
                            f"capture; see {log_path}\n{log_tail(text, 10)}")
    from perfgate.capture.torch_build import check_ranges_recorded

    if sqlite.is_file():
        check_ranges_recorded(sqlite, sys.executable, root)   # a CPU-only torch, named
    return Capture(
        workload=spec.full_name, run_dir=launch_dir, command=tuple(attempt.cmd), report_path=report,
        sqlite_path=sqlite if sqlite.is_file() else None, log_path=log_path, returncode=attempt.returncode,
        wall_s=attempt.wall_s, self_report=parse_self_report(text), retried=retried,
        node_sqlite=tuple(launch_dir / f"{s}.sqlite" for s in stems) if spec.nnodes > 1 else (),
    )

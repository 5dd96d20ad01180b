"""Running nsys directly from a test, as perfgate runs it: under perfgate's supervisor
(perfgate.system.process_tree), so that every process the command starts ends with it, nsys's
``--start-agent`` daemon above all. A test's control capture that failed beside other nsys
sessions (subprocess.run, nsys run directly) left its agent running for over 100 minutes.
Like perfgate's capture, a run whose nsys failed for a transient reason (perfgate.system.nsys.
transient_failure: another nsys session's doing), or that had started no workload START_S after it
began (nsys 2022.4 beside other sessions hangs at its start: seen with two test processes, a
fixture's capture stopped at its 300 s timeout), is run again, up to ATTEMPTS times. Each run takes
the machine's turn at starting nsys until nsys has started its program
(perfgate.system.nsys_program.turn_to_start), as perfgate's captures do."""
from __future__ import annotations

import subprocess
import time
from collections.abc import Sequence
from typing import Any

from perfgate.capture.launch import START_S
from perfgate.system import process_tree
from perfgate.system.nsys import await_start, clear_stale_session_table, started_workload, transient_failure
from perfgate.system.nsys_program import turn_to_start

GRACE_S = 5.0
ATTEMPTS = 3
RETRY_WAIT_S = 5.0     # times the attempt, before the next: the other sessions' nsys may end meanwhile


def run_supervised(cmd: Sequence[str], *, timeout: float = 300, check: bool = False, capture_output: bool = True,
                   **popen: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, capture_output=True, ...)`` under the supervisor: on return, timeout
    (subprocess.TimeoutExpired) or error, the command's whole process tree has ended."""
    if not capture_output:
        raise ValueError("run_supervised always captures the output")
    for attempt in range(1, ATTEMPTS + 1):
        done, hung = _run_once(cmd, timeout, popen)
        out = done.stdout + done.stderr
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        if attempt == ATTEMPTS and hung:
            raise subprocess.TimeoutExpired(list(cmd), START_S, done.stdout, done.stderr)
        if not hung and (done.returncode == 0 or attempt == ATTEMPTS or transient_failure(text) is None):
            break
        time.sleep(RETRY_WAIT_S * attempt)
        clear_stale_session_table()      # a stopped session's, where no nsys runs any more
    if check:
        done.check_returncode()
    return done


def _run_once(cmd: Sequence[str], timeout: float,
              popen: dict[str, Any]) -> tuple[subprocess.CompletedProcess[Any], bool]:
    """The command's run, and whether it was stopped because nsys hung at its start."""
    first, hung = min(START_S, timeout), False
    with turn_to_start(START_S):     # one nsys starts at a time on the machine, as perfgate's capture does
        began = time.monotonic()
        proc = process_tree.start(list(cmd), grace_s=GRACE_S, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, **popen)
        try:
            await_start(proc.pid, lambda: proc.poll() is not None, began + first)
        except BaseException:
            process_tree.stop(proc, GRACE_S)    # a Ctrl-C while nsys starts: its tree ends too
            raise
    try:
        try:
            out, err = proc.communicate(timeout=max(0.0, began + first - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung = not started_workload(proc.pid)
            if hung:
                process_tree.stop(proc, GRACE_S)
                out, err = proc.communicate()
            else:
                out, err = proc.communicate(timeout=max(0.0, began + timeout - time.monotonic()))
    finally:
        process_tree.stop(proc, GRACE_S)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err), hung

"""Running nsys directly from a test, as perfgate runs it: under perfgate's supervisor
(perfgate.system.process_tree), so that every process the command starts ends with it, nsys's
``--start-agent`` daemon above all. A test's control capture that failed beside other nsys
sessions (subprocess.run, nsys run directly) left its agent running for over 100 minutes.
Like perfgate's capture, a run whose nsys failed for a transient reason (perfgate.system.nsys.
transient_failure: another nsys session's doing) is run again, up to ATTEMPTS times."""
from __future__ import annotations

import subprocess
from collections.abc import Sequence
from typing import Any

from perfgate.system import process_tree
from perfgate.system.nsys import transient_failure

GRACE_S = 5.0
ATTEMPTS = 3


def run_supervised(cmd: Sequence[str], *, timeout: float = 300, check: bool = False, capture_output: bool = True,
                   **popen: Any) -> subprocess.CompletedProcess[Any]:
    """``subprocess.run(cmd, capture_output=True, ...)`` under the supervisor: on return, timeout
    (subprocess.TimeoutExpired) or error, the command's whole process tree has ended."""
    if not capture_output:
        raise ValueError("run_supervised always captures the output")
    for attempt in range(1, ATTEMPTS + 1):
        done = _run_once(cmd, timeout, popen)
        out = done.stdout + done.stderr
        text = out.decode(errors="replace") if isinstance(out, bytes) else out
        if done.returncode == 0 or attempt == ATTEMPTS or transient_failure(text) is None:
            break
    if check:
        done.check_returncode()
    return done


def _run_once(cmd: Sequence[str], timeout: float, popen: dict[str, Any]) -> subprocess.CompletedProcess[Any]:
    proc = process_tree.start(list(cmd), grace_s=GRACE_S, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, **popen)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        process_tree.stop(proc, GRACE_S)
    return subprocess.CompletedProcess(list(cmd), proc.returncode, out, err)

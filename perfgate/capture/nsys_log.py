"""What nsys's own lines in a launch's log say, for the message of a launch that nsys failed
(exit status non-zero, no report written): the lines quoted as nsys wrote them, and their cause
where perfgate knows it, never a guess presented as one.

Known lines (nsys 2022.4 to 2025.x):

- ``Agent launcher failed.``: nsys could not start its agent. A ``TMPDIR`` that is not a folder
  nsys can write gives exactly this line and nothing else (nsys keeps its session files there), as
  does, now and then, another nsys session starting at the same moment.
- ``Connection reset by peer``, ``End of file``, ``Local Endpoint is not available``,
  ``ClientProxy::GetLocalEndpoint``: the connection between nsys and its agent broke (seen with
  other nsys sessions running on the machine).
- ``sem_open ...``: nsys could not open a semaphore of its session (the same).
"""
from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Mapping

_AGENT = re.compile(r"Agent launcher failed")
_CONNECTION = re.compile(r"Connection reset by peer|End of file|Local Endpoint is not available|"
                         r"ClientProxy::GetLocalEndpoint")
_SEMAPHORE = re.compile(r"sem_open")
_PERMISSION = re.compile(r"[Pp]ermission denied|[Oo]peration not permitted|perf_event_paranoid")
_KNOWN = (_AGENT, _CONNECTION, _SEMAPHORE, _PERMISSION)
CONCURRENT = "another nsys session on this machine at the same time; a retry usually succeeds"


def nsys_lines(log: str, limit: int = 3) -> list[str]:
    """The log's lines that nsys writes when it fails (the known ones above), first ``limit``."""
    found = [line.strip() for line in log.splitlines() if any(p.search(line) for p in _KNOWN)]
    return list(dict.fromkeys(found))[:limit]


def temp_dir_problem(env: Mapping[str, str]) -> str | None:
    """What is wrong with the temporary folder nsys would use (``TMPDIR``), None when nothing is."""
    tmp = env.get("TMPDIR")
    if not tmp:
        return None
    if not os.path.isdir(tmp):
        return f"TMPDIR={tmp} does not exist" if not os.path.exists(tmp) else f"TMPDIR={tmp} is not a folder"
    if not os.access(tmp, os.W_OK | os.X_OK):
        return f"TMPDIR={tmp} is not writable"
    return None


def failure_cause(log: str, env: Mapping[str, str]) -> str:
    """Why nsys failed, in words: what its lines say and what that means (see the module docstring)."""
    lines = nsys_lines(log)
    text = "\n".join(lines)
    if not lines:
        return ("nsys wrote no line perfgate knows: nsys itself failed, or the workload ended before nsys "
                "recorded it (see the last lines below)")
    said = "nsys's log says " + "; ".join(f'"{line}"' for line in lines)
    if _AGENT.search(text):
        problem = temp_dir_problem(env)
        if problem is not None:
            return (f"{said}: nsys could not start its agent because {problem} (nsys keeps its session files in "
                    "TMPDIR): create the folder or unset TMPDIR")
        return (f"{said}: nsys could not start its agent (a temporary folder it cannot use: "
                f"{tempfile.gettempdir()}, or {CONCURRENT})")
    if _CONNECTION.search(text) or _SEMAPHORE.search(text):
        return f"{said}: nsys lost its connection to its agent ({CONCURRENT})"
    return f"{said}: nsys may not trace here (permissions of this user or container)"

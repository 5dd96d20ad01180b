"""``perfgate init --check``: each training script that init found, started bare (``python -m``, no
nsys, no autostep) in the repository for a few seconds, and what it needs read from how it ended,
before any baseline is recorded. Nothing is recorded and nothing is written.

:func:`check_script` runs one (under perfgate's supervisor: its whole process tree ends when the
check does); :func:`read_outcome` is the pure part: an argparse error names the arguments the script
requires (and a table line that gives them), a missing file its path, a missing module its
package, a script that needs a GPU says so; a script still running when the time is up starts.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from perfgate.system import process_tree

CHECK_S = 15.0          # how long a script runs bare before it counts as started
OUTPUT_TAIL = 4000      # characters of its output read
GRACE_S = 2.0

RUNS, FINISHED, NEEDS = "runs", "finished", "needs"

_REQUIRED = re.compile(r"error: the following arguments are required: (.+)$", re.MULTILINE)
_ARGPARSE_ERROR = re.compile(r"^\S+: error: (.+)$", re.MULTILINE)
_USAGE = re.compile(r"^usage: (.+(?:\n {2,}.+)*)", re.MULTILINE)
_NO_FILE = re.compile(r"(?:FileNotFoundError|IsADirectoryError|NotADirectoryError): \[Errno \d+\] [^:']+: '([^']+)'")
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([^']+)'")
_NETWORK = re.compile(r"urlopen error|Name or service not known|Temporary failure in name resolution"
                      r"|Failed to establish a new connection|Network is unreachable|ConnectionError:")
USAGE_SHOWN = 160       # characters of the usage line quoted beside a proposed table line
_NEEDS_GPU = re.compile(r"Torch not compiled with CUDA enabled|No CUDA GPUs are available|Found no NVIDIA driver"
                        r"|CUDA driver initialization failed|no CUDA-capable device", re.IGNORECASE)


@dataclass(frozen=True)
class ScriptCheck:
    """How one script's bare start ended: ``outcome`` (runs, finished, needs), what it needs (one
    line each), table lines that would give it (empty where perfgate cannot propose one)."""

    name: str
    path: str
    outcome: str
    seconds: float
    exit_code: int | None
    needs: tuple[str, ...] = ()
    table_lines: tuple[str, ...] = ()

    def describe(self) -> list[str]:
        head = f"{self.name} ({self.path}): "
        if self.outcome == RUNS:
            return [head + f"starts: still running after {self.seconds:.0f} s, then stopped"]
        if self.outcome == FINISHED:
            return [head + f"ran to its end in {self.seconds:.1f} s (exit 0): a short run gives the gate few steps"]
        lines = [head + f"exited {self.exit_code} after {self.seconds:.1f} s: " + "; ".join(self.needs)]
        if self.table_lines:
            lines.append(f"  add to [tool.perfgate.workloads.{self.name}]:")
            lines += [f"    {line}" for line in self.table_lines]
        return lines


def read_outcome(name: str, path: str, exit_code: int | None, seconds: float, output: str) -> ScriptCheck:
    """What a bare start that ended with ``exit_code`` (None: still running when stopped) after
    ``seconds``, printing ``output``, says the script needs."""
    if exit_code is None:
        return ScriptCheck(name, path, RUNS, seconds, None)
    if exit_code == 0:
        return ScriptCheck(name, path, FINISHED, seconds, 0)
    needs: list[str] = []
    lines: list[str] = []
    required = _REQUIRED.search(output)
    if required:
        names = [n.strip() for n in required.group(1).split(",") if n.strip()]
        needs.append(f"it requires the arguments {', '.join(names)} (its argparse error)")
        found = _USAGE.search(output)
        usage = " ".join(found.group(1).split()) if found else ""
        given = [f'"{n.upper()}"' if not n.startswith("-") else f'"{n.split("/")[0]}", "{_metavar(n, usage)}"'
                 for n in names]
        shown = usage if len(usage) <= USAGE_SHOWN else usage[:USAGE_SHOWN - 1] + "…"
        lines.append(f"args = [{', '.join(given)}]" + (f"   # its usage: {shown}" if shown else ""))
    elif exit_code == 2 and _USAGE.search(output) and (refused := _ARGPARSE_ERROR.search(output)):
        needs.append(f"its arguments were refused: {refused.group(1)}")
    missing = _NO_FILE.search(output)
    if missing:
        needs.append(f"it reads {missing.group(1)}, which does not exist here (data to download or make first, or "
                     "an argument that points at it)")
    module = _NO_MODULE.search(output)
    if module:
        needs.append(f"it imports {module.group(1)}, which is not installed in this environment")
    if _NETWORK.search(output):
        needs.append("it reached for the network and could not connect (a dataset or model to download: fetch it "
                     "on the runner beforehand)")
    if _NEEDS_GPU.search(output):
        needs.append("it needs a GPU: give it cpu_args that run it on the CPU, or gate it on the GPU runner only")
    if not needs:
        last = [line.strip() for line in output.strip().splitlines() if line.strip()]
        said = last[-1][:300] if last else ""
        if re.fullmatch(r"[\w.]+(Error|Exception)", said) and len(last) > 1:   # a bare assert: its source line
            said += f" at `{last[-2][:200]}`"
        needs.append(f"its last line: {said}" if said else "it printed nothing")
    return ScriptCheck(name, path, NEEDS, seconds, exit_code, tuple(needs), tuple(lines))


def _metavar(flag: str, usage: str) -> str:
    """What the usage line calls ``flag``'s value (``--dataset DATASET``: DATASET; its choices when it
    lists them), else VALUE."""
    for name in flag.split("/"):
        found = re.search(rf"(?<![\w-]){re.escape(name)}[ =](\{{[^}}]*\}}|[^\s\[\]]+)", usage)
        if found:
            return found.group(1)
    return "VALUE"


def check_script(root: Path, name: str, module: str, path: str, seconds: float = CHECK_S) -> ScriptCheck:
    """Start workload ``name`` (``python -m module``, its file ``path``) bare in ``root`` for up to
    ``seconds`` and read how it ended."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PERFGATE_AUTOSTEP": "0"}
    with tempfile.TemporaryFile() as log:
        started = time.monotonic()
        proc = process_tree.start([sys.executable, "-m", module], grace_s=GRACE_S, cwd=root,
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        code: int | None
        try:
            code = process_tree.wait(proc, seconds)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            process_tree.stop(proc, GRACE_S)
        elapsed = time.monotonic() - started
        log.seek(0)
        data = log.read()
    output = data[-OUTPUT_TAIL:].decode("utf-8", errors="replace")
    return read_outcome(name, path, code, min(elapsed, seconds) if code is None else elapsed,
                        output)

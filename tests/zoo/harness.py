"""The zoo's harness: each public program of ``tests/zoo/programs/`` gated the way its user would,
through the ``perfgate`` command in a copy of its folder: a baseline recorded, an unchanged rerun, a
pull request that slows its input pipeline and one that adds compute (tests/zoo/README.md).

Used by tests/programs/test_zoo.py (CPU, the real nsys) and scripts/gpu/zoo-gate.py (the GPU machine); standard
library only, so that the GPU script can run it with the image's Python.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from git_repo import git
from perfgate.records.facts import STEP_CODE  # the words a reason uses for the step's own code

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

PROGRAMS = Path(__file__).resolve().parent / "programs"


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (exactly once in ``file``) with ``new``."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Change:
    """A pull request: edits and extra command-line args; ``first``: the phases any of which the
    diagnosis must name first."""

    edits: tuple[Edit, ...] = ()
    args: tuple[str, ...] = ()
    first: tuple[str, ...] = ()


@dataclass(frozen=True)
class Program:
    name: str
    folder: Path
    shapes: tuple[str, ...]
    gpu: bool
    cpu: bool
    fast: bool
    setup: tuple[str, ...]
    iterations: int | None
    own_time_regex: str | None
    own_time_unit: str
    env: dict[str, str]
    input_slowdown: Change
    compute_slowdown: Change

    @property
    def nproc(self) -> int:
        """Processes the workload runs as (torchrun's ``nproc`` in its table; 1 for python)."""
        table = _workload_table(self.folder, self.name)
        return int(table.get("nproc", 2)) if table.get("launcher") == "torchrun" else 1


def _change(raw: dict[str, Any] | None) -> Change:
    raw = raw or {}
    return Change(tuple(Edit(e["file"], e["old"], e["new"]) for e in raw.get("edits", ())),
                  tuple(str(a) for a in raw.get("args", ())), tuple(raw.get("first", ())))


def load_program(folder: Path) -> Program:
    with (folder / "zoo.toml").open("rb") as fh:
        raw = tomllib.load(fh)
    return Program(name=raw["name"], folder=folder, shapes=tuple(raw.get("shapes", ())), gpu=bool(raw.get("gpu", False)),
                   cpu=bool(raw.get("cpu", True)), fast=bool(raw.get("fast", False)),
                   setup=tuple(raw.get("setup", ())), iterations=raw.get("iterations"),
                   own_time_regex=raw.get("own_time_regex"), own_time_unit=raw.get("own_time_unit", "ms"),
                   env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
                   input_slowdown=_change(raw.get("input_slowdown")),
                   compute_slowdown=_change(raw.get("compute_slowdown")))


def programs(root: Path = PROGRAMS) -> list[Program]:
    """Every program folder with a zoo.toml (folders starting with ``_`` are not programs)."""
    return [load_program(d) for d in sorted(root.iterdir())
            if d.is_dir() and not d.name.startswith(("_", ".")) and (d / "zoo.toml").is_file()]


def _workload_table(folder: Path, name: str) -> dict[str, Any]:
    with (folder / "pyproject.toml").open("rb") as fh:
        return tomllib.load(fh).get("tool", {}).get("perfgate", {}).get("workloads", {}).get(name, {})


def workload_command(program: Program, project: Path, extra: tuple[str, ...] = (), gpu: bool = True,
                     python: str = sys.executable) -> list[str]:
    """The command the workload declared in ``project``'s pyproject.toml runs (its ``gpu_args`` or
    ``cpu_args``, then ``extra``; torchrun with one process per node for a torchrun launcher), as a
    script run outside perfgate runs it (scripts/gpu/model-prs.py, forward-phase.py)."""
    table = _workload_table(project, program.name)
    args = [*table["gpu_args" if gpu else "cpu_args"], *extra]
    if table.get("launcher") == "torchrun":
        return [python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=1", "-m", table["module"], *args]
    return [python, "-m", table["module"], *args]


# --------------------------------------------------------------------------- a user's project


def prepare(program: Program, dest: Path, python: str = sys.executable) -> Path:
    """A copy of the program's folder at ``dest`` (the user's project), its data made by its setup."""
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(program.folder, dest, ignore=shutil.ignore_patterns("__pycache__", ".perfgate", "zoo.toml"))
    if program.setup:
        done = subprocess.run([python, *program.setup, str(dest)], cwd=dest, capture_output=True, text=True,
                              timeout=600, env={**os.environ, **program.env})
        if done.returncode != 0:
            raise RuntimeError(f"{program.name}: setup {program.setup} failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return dest


def apply(change: Change, project: Path) -> None:
    """Make the pull request in ``project``: each edit's text replaced (it must be there exactly once),
    the extra args added at the end of the workload's ``cpu_args`` and ``gpu_args``."""
    for edit in change.edits:
        path = project / edit.file
        text = path.read_text(encoding="utf-8")
        if text.count(edit.old) != 1:
            raise ValueError(f"{path}: the edit's old text occurs {text.count(edit.old)} times, not once: {edit.old!r}")
        path.write_text(text.replace(edit.old, edit.new), encoding="utf-8")
    if change.args:     # after the base args: a flag given twice takes the later value
        path = project / "pyproject.toml"
        extra = ", ".join(json.dumps(a) for a in change.args)
        text, n = re.subn(r"^(\s*(?:cpu_args|gpu_args)\s*=\s*\[[^\]]*?)(,?\s*\])",
                          lambda m: f"{m.group(1)}, {extra}{m.group(2).lstrip(',')}",
                          path.read_text(encoding="utf-8"), flags=re.M | re.S)
        if n == 0:
            raise ValueError(f"{path}: no cpu_args/gpu_args to add {change.args} to")
        path.write_text(text, encoding="utf-8")


def commit(project: Path, message: str) -> None:
    """The user's repository, one commit at a time on main: the program, then the baselines recorded
    from it (the runs folder ignored, as ``perfgate init`` has it). A gate run in it can then be
    confirmed in the same job against the commit its baseline was recorded from (confirm = "auto")."""
    if not (project / ".git").exists():
        (project / ".gitignore").write_text(".perfgate/\n", encoding="utf-8")
        git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", message)


def changed_copy(program: Program, project: Path, change: Change, dest: Path) -> Path:
    """The pull request as a folder of its own, not a git checkout: the program prepared anew at
    ``dest`` with the base branch's baselines (``project``'s) and ``change`` applied; its gate run is
    decided by the stored baseline alone (no base to confirm against)."""
    changed = prepare(program, dest)
    (changed / "baselines").mkdir(exist_ok=True)
    for baseline in (project / "baselines").iterdir():
        if baseline.is_dir():
            shutil.copytree(baseline, changed / "baselines" / baseline.name)
    apply(change, changed)
    return changed


def pull_request(project: Path, change: Change, dest: Path) -> Path:
    """The pull request as its CI checks it out: a clone of the user's repository (the program and
    its baselines, committed) at ``dest``, ``change`` committed on a branch of its own."""
    if dest.exists():
        shutil.rmtree(dest)
    git(dest.parent, "clone", "-q", str(project), str(dest))
    git(dest, "checkout", "-q", "-b", "pull-request")
    apply(change, dest)
    commit(dest, "the pull request")
    return dest


# --------------------------------------------------------------------------- perfgate, as the user runs it


@dataclass
class Run:
    """One ``perfgate`` command: its exit status, output, and the result record it wrote."""

    command: list[str]
    returncode: int
    output: str
    wall_s: float
    result: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        return str(self.result.get("verdict", "ERROR"))

    @property
    def first_reason(self) -> str | None:
        attribution = (self.result.get("extra") or {}).get("attribution") or {}
        return attribution.get("first_reason")

    @property
    def first_phase(self) -> str | None:
        """The phase the first reason names: its ``where``, "self time" for the step's own code."""
        attribution = (self.result.get("extra") or {}).get("attribution") or {}
        text = attribution.get("first_reason") or ""
        if "self time" in text:
            return "self time"
        reasons = attribution.get("reasons") or []
        if reasons and reasons[0].get("where"):
            where = str(reasons[0]["where"])
            return "self time" if where == STEP_CODE else where
        return text.split(" ", 1)[0] or None

    @property
    def analyses(self) -> list[dict[str, Any]]:
        return list(self.result.get("analyses") or [])


def perfgate(project: Path, *args: str, python: str = sys.executable, env: dict[str, str] | None = None,
             timeout: float = 1800, log: Path | None = None) -> Run:
    """``python -m perfgate <args> --root <project>``; the result record of the run folder it made.
    With ``log``, the output goes to that file as it is printed (kept if the caller is stopped)."""
    runs = project / ".perfgate" / "runs"
    before = set(runs.iterdir()) if runs.is_dir() else set()
    command = [python, "-m", "perfgate", *args, "--root", str(project)]
    started = time.monotonic()
    if log is None:
        done = subprocess.run(command, cwd=project, capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else dict(os.environ))
        output, returncode = done.stdout + done.stderr, done.returncode
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w", encoding="utf-8") as fh:
            fh.write(" ".join(command) + "\n\n")
            fh.flush()
            returncode = subprocess.run(command, cwd=project, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout,
                                        env=env if env is not None else dict(os.environ)).returncode
        output = log.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[-1]
    run = Run(command, returncode, output, time.monotonic() - started)
    made = sorted(set(runs.iterdir()) - before) if runs.is_dir() else []
    if made and (made[-1] / "result.json").is_file():
        run.result = json.loads((made[-1] / "result.json").read_text(encoding="utf-8"))
    return run


def own_times_ms(program: Program, project: Path, result: dict[str, Any]) -> list[float]:
    """The per-iteration times (ms) the program printed in its timing launches' logs."""
    if not program.own_time_regex:
        return []
    run_dir = Path(result["run_dir"]) if result.get("run_dir") else None
    if run_dir is None:
        return []
    scale = 1000.0 if program.own_time_unit == "s" else 1.0
    pattern = re.compile(program.own_time_regex)
    out: list[float] = []
    for log in sorted(run_dir.glob("launch-*/workload.log")):
        values = [float(m.group(1)) * scale for m in pattern.finditer(log.read_text(encoding="utf-8", errors="replace"))]
        out += values[len(values) // 5:]          # the first fifth is warm-up
    return out


@dataclass(frozen=True)
class StepCheck:
    """perfgate's step against the program's own measure of its iteration."""

    step_ms: float                   # perfgate's step time (``step_time_ms``, median of its launches)
    median_ms: float                 # the median of perfgate's periods (median of its launches)
    marker: str
    own_ms: float | None             # the program's own per-iteration time (median of what it printed)
    iterations_found: int | None     # iterations perfgate's steps account for in a launch (per process)
    iterations: int | None           # what the program runs (per training process)

    @property
    def own_ratio(self) -> float | None:
        """The median of perfgate's periods over the median of the program's own times."""
        return None if self.own_ms is None else self.median_ms / self.own_ms


def step_check(program: Program, project: Path, recorded: Run) -> StepCheck:
    analyses = recorded.analyses
    step = statistics.median(float(a["metrics"]["step_time_ms"]) for a in analyses)
    median = statistics.median(float(a["steps"]["median_ms"]) for a in analyses)
    first = analyses[0]["steps"]
    found = None
    if first.get("source") == "autostep":
        # boundaries: the first only opens a step, the last step has no next start, warm-up, interludes
        processes = max(int(analyses[0].get("processes") or program.nproc), 1)   # training processes
        found = (int(first["count"]) // processes + int(first["warmup_skipped"]) + 2
                 + int(first.get("interludes") or 0) // processes)
    own = own_times_ms(program, project, recorded.result)
    return StepCheck(step, median, str(first.get("marker") or first.get("source")),
                     statistics.median(own) if own else None, found, program.iterations)

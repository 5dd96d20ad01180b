"""``perfgate init``: set up a user's repository for the gate. Finds the training scripts (files
that import torch and train: ``.backward(``, ``.step(``, ``Trainer(``), writes the
``[tool.perfgate]`` table into pyproject.toml (or prints it with ``--dry-run``), creates
``baselines/``, writes ``.github/workflows/perfgate.yml`` for a self-hosted GPU runner (perfgate's
Action, action.yml: baselines from the default branch; no pull_request trigger: a fork's copy of the
workflow would run on the runner), adds ``.perfgate/`` to ``.gitignore`` and prints the next two commands. An existing table
or workflow is replaced only with ``--force``; otherwise exit 2 naming the file. ``--check`` then
starts each script bare and says what it needs (``perfgate/commands/init_check.py``).
"""
from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError
from perfgate.records.safe_names import is_safe_name
from perfgate.settings.workloads import is_helper

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

WORKFLOW = Path(".github/workflows/perfgate.yml")
BASELINES = Path("baselines")
IGNORED = ".perfgate/"
NEXT_COMMANDS = ("perfgate baseline update", "perfgate run")
#: Folders never searched for training scripts: environments, outputs, caches, tests.
SKIPPED_DIRS = frozenset({"venv", "env", "node_modules", "build", "dist", "site-packages", "__pycache__",
                          "tests", "test", "baselines"})
_IMPORTS_TORCH = re.compile(r"^\s*(import|from)\s+torch\b", re.MULTILINE)
_IMPORTS_TRAINER = re.compile(r"^\s*(import|from)\s+(torch|transformers|lightning|pytorch_lightning)\b",
                              re.MULTILINE)
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")


@dataclass(frozen=True)
class TrainingScript:
    """A candidate workload: its file, the module ``python -m`` runs, its workload name and what
    made it a candidate."""

    path: Path            # relative to the repository root
    module: str
    name: str
    evidence: tuple[str, ...]


@dataclass(frozen=True)
class InitPlan:
    """What ``perfgate init`` writes: the pyproject.toml text after it, the table alone, the workflow."""

    root: Path
    scripts: tuple[TrainingScript, ...]
    table: str
    pyproject_text: str
    workflow_text: str


def _python_files(root: Path) -> Iterator[Path]:
    for path in sorted(root.iterdir()):
        if path.is_dir():
            if path.name.startswith(".") or path.name in SKIPPED_DIRS or (path / "pyvenv.cfg").exists():
                continue
            yield from _python_files(path)
        elif path.suffix == ".py" and not path.name.startswith(("test_", "_")) and path.name != "conftest.py":
            yield path


def training_evidence(text: str) -> tuple[str, ...]:
    """What makes a file's source a training script (empty: it is not one)."""
    found = []
    if _IMPORTS_TORCH.search(text):
        if ".backward(" in text:
            found.append(".backward(")
        if re.search(r"\boptimi[sz]er\.step\(|\.step\(", text):
            found.append(".step(")
    if "Trainer(" in text and _IMPORTS_TRAINER.search(text):
        found.append("Trainer(")
    return tuple(found)


def find_training_scripts(root: Path) -> list[TrainingScript]:
    """The files under ``root`` that import torch and train, and run when executed (a file that only
    defines things is a helper: perfgate.settings.workloads.is_helper), each with a distinct safe name."""
    scripts: list[TrainingScript] = []
    names: set[str] = set()
    for path in _python_files(root):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        evidence = training_evidence(text)
        relative = path.relative_to(root)
        parts = relative.with_suffix("").parts
        if not evidence or is_helper(path) or not all(p.isidentifier() for p in parts):
            continue
        name = parts[-1] if parts[-1] not in names else "_".join(parts)
        if not is_safe_name(name) or name in names:
            continue
        names.add(name)
        scripts.append(TrainingScript(relative, ".".join(parts), name, evidence))
    return scripts


def perfgate_table(scripts: list[TrainingScript] | tuple[TrainingScript, ...]) -> str:
    """The ``[tool.perfgate]`` tables for ``scripts`` (keys: docs/reference/configuration.md)."""
    lines = [
        "[tool.perfgate]",
        "# Written by `perfgate init`; every key: perfgate's docs/reference/configuration.md.",
        'baseline_dir = "baselines"          # baselines/<workload>/<machine class>.json, committed after review',
        'artifacts_dir = ".perfgate/runs"    # traces and logs of each run (ignored by git)',
        'report_dir = ".perfgate/report"     # JUnit, Markdown and JSON reports',
    ]
    for script in scripts:
        lines += [
            "",
            f"[tool.perfgate.workloads.{script.name}]",
            _commented(f'module = "{script.module}"',
                       f"{script.path.as_posix()}, run as python -m {script.module} from this folder"),
            "cpu_args = []                      # extra arguments on a machine without a GPU (e.g. fewer steps)",
            "gpu_args = []                      # extra arguments on the GPU runner",
        ]
    return "\n".join(lines) + "\n"


def _commented(line: str, comment: str) -> str:
    return f"{line}{' ' * max(1, 35 - len(line))}# {comment}"


def workflow_text() -> str:
    """``.github/workflows/perfgate.yml``: the gate on a self-hosted GPU runner for pushes and for
    reviewed refs run by hand, through perfgate's Action (action.yml; docs/ci.md)."""
    return _WORKFLOW_TEXT


_WORKFLOW_TEXT = """\
# The performance gate, written by `perfgate init`: the training step time of every push is compared
# with the baselines of the default branch, on a self-hosted GPU runner that has Nsight Systems
# 2023.1+ (nsys on PATH or PERFGATE_NSYS) and a CUDA build of torch. See perfgate's docs/ci.md.
# The steps are perfgate's Action (its action.yml): pin the tag you have read.
#
# No pull_request trigger: a fork's pull request would run its own copy of this file on your runner.
# Pushes come from people with write access; a fork's pull request is measured when a maintainer,
# having reviewed it, runs this workflow by hand with ref refs/pull/N/head. Install the runner's
# pre-job script (perfgate's scripts/runner/job-started.sh) so the runner refuses everything else.
name: perfgate

on:
  push:
    branches: ["**"]
  workflow_dispatch:
    inputs:
      ref:
        description: "Ref to measure (refs/pull/N/head of a reviewed pull request); empty: the branch run from"
        required: false
        default: ""

permissions:
  contents: read

concurrency:
  group: perfgate-${{ inputs.ref || github.ref }}
  cancel-in-progress: true

jobs:
  gate:
    if: github.event_name == 'push' || github.event_name == 'workflow_dispatch'
    runs-on: [self-hosted, linux, x64, gpu]
    timeout-minutes: 60
    permissions:
      contents: read
      statuses: write              # one commit status per workload
      pull-requests: write         # the report as the pull request's comment, updated in place
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ inputs.ref || github.sha }}
          fetch-depth: 0
          persist-credentials: false

      - name: Gate
        # Edit: where your perfgate comes from (OWNER/perfgate@TAG); its inputs are in its action.yml
        # (workloads, args, baselines, install, report-dir, post-status, comment, github-token).
        uses: OWNER/perfgate@main

      - name: Upload reports and traces
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: perfgate-${{ github.run_id }}-${{ github.run_attempt }}
          path: .perfgate/
          if-no-files-found: warn
          retention-days: 14
"""


def _load_toml(path: Path, text: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc}); fix it, then run perfgate init again") from None


def has_perfgate_table(data: dict) -> bool:
    tool = data.get("tool")
    return isinstance(tool, dict) and "perfgate" in tool


def without_perfgate_tables(text: str) -> str:
    """``text`` without its ``[tool.perfgate]`` and ``[tool.perfgate.*]`` tables (header to the next
    other table), for ``--force``."""
    kept, skipping = [], False
    for line in text.splitlines(keepends=True):
        header = _HEADER.match(line)
        if header:
            key = header.group(1).replace(" ", "").replace('"', "")
            skipping = key == "tool.perfgate" or key.startswith("tool.perfgate.")
        if not skipping:
            kept.append(line)
    return "".join(kept)


def plan_init(root: Path, *, force: bool = False) -> InitPlan:
    """What init would write in ``root``; ConfigError naming the file when a table or the workflow
    exists and ``force`` is off, or when no training script is found."""
    pyproject = root / "pyproject.toml"
    scripts = find_training_scripts(root)
    if not scripts:
        raise ConfigError(
            f"{root}: no training script found (a .py file that imports torch and calls .backward( or "
            ".step(, or uses Trainer(); declare one by hand in pyproject.toml: "
            '[tool.perfgate.workloads.<name>] module = "<module>"')
    table = perfgate_table(scripts)
    existing = pyproject.read_text(encoding="utf-8") if pyproject.is_file() else ""
    if existing and has_perfgate_table(_load_toml(pyproject, existing)):
        if not force:
            raise ConfigError(f"{pyproject}: already has a [tool.perfgate] table; perfgate init --force "
                              "replaces it (perfgate init --dry-run prints the new one)")
        existing = without_perfgate_tables(existing)
        if has_perfgate_table(_load_toml(pyproject, existing)):
            raise ConfigError(f"{pyproject}: its perfgate settings are not in [tool.perfgate] tables that "
                              "perfgate init can replace; remove them by hand")
    if (root / WORKFLOW).exists() and not force:
        raise ConfigError(f"{root / WORKFLOW}: already exists; perfgate init --force replaces it")
    text = (existing.rstrip("\n") + "\n\n" if existing.strip() else "") + table
    _load_toml(pyproject, text)   # what is written must read back
    return InitPlan(root, tuple(scripts), table, text, workflow_text())


def apply_init(plan: InitPlan) -> list[str]:
    """Write the plan; what was done, one line each."""
    root, done = plan.root, []
    (root / "pyproject.toml").write_text(plan.pyproject_text, encoding="utf-8")
    done.append("wrote [tool.perfgate] into pyproject.toml")
    (root / BASELINES).mkdir(exist_ok=True)
    done.append(f"created {BASELINES}/ (commit it once it holds baselines)")
    workflow = root / WORKFLOW
    workflow.parent.mkdir(parents=True, exist_ok=True)
    workflow.write_text(plan.workflow_text, encoding="utf-8")
    done.append(f"wrote {WORKFLOW.as_posix()} (a self-hosted GPU runner labelled gpu; edit where perfgate is "
                "installed from)")
    gitignore = root / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.is_file() else []
    if not any(line.strip().rstrip("/") in (".perfgate", "/.perfgate") for line in lines):
        with gitignore.open("a", encoding="utf-8") as out:
            if lines and not gitignore.read_text(encoding="utf-8").endswith("\n"):
                out.write("\n")
            out.write(IGNORED + "\n")
        done.append(f"added {IGNORED} to .gitignore")
    return done


def add_parser(sub: Any) -> None:
    init = sub.add_parser("init", help="set up this repository for the gate: pyproject table, baselines/, "
                                       "a GitHub workflow, .gitignore")
    init.add_argument("--root", type=Path, default=None, help="the repository (default: the current folder)")
    init.add_argument("--dry-run", action="store_true", help="print the [tool.perfgate] table; write nothing")
    init.add_argument("--force", action="store_true",
                      help="replace an existing [tool.perfgate] table and .github/workflows/perfgate.yml")
    init.add_argument("--check", action="store_true",
                      help="then start each found script bare (no nsys) for up to --check-seconds and say what it "
                           "needs (required arguments, missing files or packages, a GPU) with the table lines to "
                           "add; records nothing; exit 1 when one cannot start as declared")
    init.add_argument("--check-seconds", type=float, default=None, metavar="S",
                      help="how long --check lets each script run before it counts as started (default 15)")
    init.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    root = (args.root or Path.cwd()).resolve()
    if not root.is_dir():
        raise ConfigError(f"--root {args.root}: not a folder")
    if args.check_seconds is not None and not args.check_seconds > 0:
        raise ConfigError(f"--check-seconds {args.check_seconds:g}: expected a number of seconds above 0")
    plan = plan_init(root, force=args.force or args.dry_run)
    for script in plan.scripts:
        print(f"perfgate: found {script.path.as_posix()} ({', '.join(script.evidence)}): workload {script.name}",
              file=sys.stderr)
    if args.dry_run:
        print(plan.table, end="")
    else:
        for line in apply_init(plan):
            print(f"perfgate: {line}", file=sys.stderr)
    ready = check_scripts(plan, args.check_seconds) if args.check else True
    if not args.dry_run and ready:
        print("next, on the machine that gates (then commit baselines/):")
        for command in NEXT_COMMANDS:
            print(f"  {command}")
    return 0 if ready else 1


def check_scripts(plan: InitPlan, seconds: float | None) -> bool:
    """``--check``: each script started bare and what it needs printed; whether all of them start."""
    from perfgate.commands.init_check import CHECK_S, NEEDS, check_script

    limit = seconds if seconds is not None else CHECK_S
    print(f"perfgate: checking each workload, started bare for up to {limit:g} s (no nsys; nothing recorded):")
    checks = [check_script(plan.root, s.name, s.module, s.path.as_posix(), limit) for s in plan.scripts]
    for check in checks:
        for line in check.describe():
            print(f"  {line}")
    return not any(c.outcome == NEEDS for c in checks)

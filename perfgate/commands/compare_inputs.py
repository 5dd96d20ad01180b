"""What each input of ``perfgate compare`` measured: its workload (and variant) and machine class,
as far as the file says. A baseline file and a result JSON name both; a trace names its machine
(nsys records the GPUs and the CPU architecture: ``TARGET_INFO_GPU``, ``TARGET_INFO_SYSTEM_ENV``)
and, inside a perfgate run folder, its workload (the run's ``result.json``). Two inputs of
different workloads or machine classes are refused (ConfigError, exit 2; ``--force`` compares
them anyway): their difference is not a change of the code."""
from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from perfgate.baselines.store import FORMAT as BASELINE_FORMAT
from perfgate.errors import ConfigError

TRACE_SUFFIXES = (".sqlite", ".nsys-rep")


@dataclass(frozen=True)
class Identity:
    """What one input measured; None where the file does not say."""

    path: Path
    workload: str | None = None
    machine_class: str | None = None

    def describe(self) -> str:
        parts = [f"workload {self.workload!r}" if self.workload else "workload not recorded",
                 f"machine class {self.machine_class}" if self.machine_class else "machine class not recorded"]
        return f"{self.path} ({', '.join(parts)})"


def identity(path: Path) -> Identity:
    """The Identity of a trace, baseline file, ``result.json`` or ``perfgate-report.json``; an
    unreadable or unknown file says nothing (reading it properly reports its problem)."""
    try:
        if path.is_dir():          # a job's reports, one per node: what its first says
            reports = sorted(p for p in path.iterdir() if p.suffix in TRACE_SUFFIXES)
            return replace(identity(reports[0]), path=path) if reports else Identity(path)
        if path.suffix in TRACE_SUFFIXES:
            sqlite = path if path.suffix == ".sqlite" else path.with_suffix(".sqlite")
            run_result = path.parent.parent / "result.json"    # <run>/launch-<k>/trace.sqlite
            workload = _document_identity(_read(run_result))[0] if run_result.is_file() else None
            return Identity(path, workload, _trace_machine_class(sqlite) if sqlite.is_file() else None)
        workload, machine_class = _document_identity(_read(path))
        return Identity(path, workload, machine_class)
    except (OSError, ValueError, RecursionError, sqlite3.Error):
        return Identity(path)


def check_comparable(b: Identity, c: Identity) -> None:
    """ConfigError when the two inputs (their identities) name different workloads or machine classes."""
    differ = [what for what, x, y in (("workloads", b.workload, c.workload),
                                      ("machine classes", b.machine_class, c.machine_class)) if x and y and x != y]
    if differ:
        raise ConfigError(
            f"BASELINE and CURRENT measured different {' and '.join(differ)}: BASELINE is {b.describe()}, "
            f"CURRENT is {c.describe()}; their difference says nothing about a change of the code. "
            "Pass --force to compare them anyway")


def _read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _name(workload: Any, variant: Any) -> str | None:
    if not isinstance(workload, str) or not workload:
        return None
    return f"{workload}[{variant}]" if isinstance(variant, str) and variant else workload


def _document_identity(doc: Any) -> tuple[str | None, str | None]:
    """(workload, machine class) of a baseline, a result or a one-workload report."""
    if not isinstance(doc, dict):
        return None, None
    if doc.get("format") == BASELINE_FORMAT:
        machine_class = doc.get("machine_class")
        return _name(doc.get("workload"), doc.get("variant")), machine_class if isinstance(machine_class, str) else None
    results = doc.get("results")
    if isinstance(results, list):
        if len(results) != 1:
            return None, None
        doc = results[0] if isinstance(results[0], dict) else {}
    machine = doc.get("machine")
    machine_class = machine.get("machine_class") if isinstance(machine, dict) else None
    return _name(doc.get("workload"), doc.get("variant")), machine_class if isinstance(machine_class, str) else None


def _trace_machine_class(sqlite: Path) -> str | None:
    """The machine class of the machine a trace was taken on (perfgate.system.machine's naming)."""
    from perfgate.system.machine import machine_class_for

    with contextlib.closing(sqlite3.connect(f"file:{sqlite}?mode=ro", uri=True)) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        gpus: list[str] = []
        if "TARGET_INFO_GPU" in tables:
            columns = {r[1] for r in conn.execute("PRAGMA table_info(TARGET_INFO_GPU)")}
            if "name" in columns:
                gpus = [str(r[0]) for r in conn.execute("SELECT name FROM TARGET_INFO_GPU") if r[0]]
        arch = None
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            columns = {r[1] for r in conn.execute("PRAGMA table_info(TARGET_INFO_SYSTEM_ENV)")}
            if {"name", "value"} <= columns:
                row = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'CpuArchitecture'").fetchone()
                arch = str(row[0]) if row and row[0] else None
    if not gpus and arch is None:
        return None
    return machine_class_for(gpus[0] if gpus else None, len(gpus), arch)

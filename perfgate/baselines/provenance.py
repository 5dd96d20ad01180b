"""What a baseline measured, and whether a current run measures the same thing.

A baseline records its workload's command line, a fingerprint of the workload's source files (the
module and every file it imports from the repository, found by reading their imports), perfgate's
record version, the CPU threads its operators were given (the ``threads`` setting, or the
``OMP_NUM_THREADS`` it inherited) and the machine's software (torch, CUDA, driver, nsys). ``Provenance`` is that
record (``to_dict`` / ``from_dict`` side by side; the baseline file's ``provenance`` and ``machine``
objects hold it); ``staleness(recorded, current)`` is what differs, as a ``Staleness``
(perfgate.records.staleness) whose ``text()`` the gate prints first: ``the baseline was recorded from other code: workloads/
transformer_lm.py changed; torch 2.11.0 -> 2.12.0``.

A baseline written before the fingerprint existed is compared through git when the checkout holds
the commit it was recorded at (its ``git_commit``); otherwise the text says that its code is not
known."""
from __future__ import annotations

import ast
import hashlib
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfgate.records.model import MachineInfo
from perfgate.records.staleness import Staleness
from perfgate.records.version import RECORD_VERSION

#: The machine's software a baseline records (MachineInfo fields), in the order a message names them.
SOFTWARE = ("torch", "cuda", "driver", "nsys")
DIGEST_CHARS = 16                     # of a file's sha256: enough to tell two versions apart
SKIPPED_DIRS = frozenset({".venv", "venv", "site-packages", "node_modules", "__pycache__", "build", "dist"})
GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class Provenance:
    """What one measurement ran: ``command`` (the workload's command line, ``python -m MODULE
    ARGS``), ``sources`` (repository-relative path -> digest of each file it runs), the record
    version, ``threads`` (the workload's OMP_NUM_THREADS, ``"default"`` where it had none: torch's
    own count), the machine's ``software`` and the git commit (with whether the tree was dirty).
    A field that a baseline did not record is None (``sources`` None: not fingerprinted)."""

    command: str | None = None
    sources: dict[str, str] | None = None
    record_version: int | None = None
    threads: str | None = None
    software: dict[str, str | None] = field(default_factory=dict)
    git_commit: str | None = None
    git_dirty: bool | None = None
    created_utc: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The keys a baseline's ``provenance`` object gains (the software lives in its ``machine``)."""
        return {"workload_command": self.command, "sources": self.sources, "record_version": self.record_version,
                "threads": self.threads}

    @classmethod
    def from_dict(cls, provenance: Mapping[str, Any], machine: Mapping[str, Any] | None = None) -> Provenance:
        """A baseline's provenance from its ``provenance`` and ``machine`` objects (values of the
        wrong type read as not recorded)."""
        sources = provenance.get("sources")
        version = provenance.get("record_version")
        return cls(
            command=_text(provenance.get("workload_command")),
            sources={str(k): str(v) for k, v in sources.items()} if isinstance(sources, Mapping) else None,
            record_version=version if isinstance(version, int) and not isinstance(version, bool) else None,
            threads=_text(provenance.get("threads")),
            software={k: _text((machine or {}).get(k)) for k in SOFTWARE if k in (machine or {})},
            git_commit=_text(provenance.get("git_commit")),
            git_dirty=provenance.get("git_dirty") if isinstance(provenance.get("git_dirty"), bool) else None,
            created_utc=_text(provenance.get("created_utc")),
        )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# ----------------------------------------------------------------------------- the current run


def recorded_command(module: str, args: Sequence[str], launcher: str = "python", nproc: int = 1,
                     nnodes: int = 1) -> str:
    """The workload's command line as a baseline records it (no interpreter path: that is the
    machine's, not the workload's; a job of several nodes: ``--nnodes``, not its rendezvous)."""
    where = ["--standalone"] if nnodes == 1 else [f"--nnodes={nnodes}"]
    head = ["python", "-m", module] if launcher != "torchrun" else [
        "torchrun", *where, f"--nproc-per-node={nproc}", "-m", module]
    return shlex.join([*head, *args])


def module_file(root: Path, module: str) -> Path | None:
    """The file of dotted ``module`` under ``root`` (``a/b.py`` or ``a/b/__init__.py``), None when it
    is not a file of the repository."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file() and not SKIPPED_DIRS.intersection(candidate.relative_to(root).parts):
            return candidate
    return None


def _imported_modules(path: Path, module: str) -> set[str]:
    """Dotted names ``path`` (module ``module``) imports, anywhere in it, with each package on the
    way (``a.b.c`` also names ``a`` and ``a.b``, whose ``__init__`` runs first)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".") if package else []
                parent = ".".join(parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts)
                base = ".".join(filter(None, (parent, node.module)))
            else:
                base = node.module or ""
            if base:
                names.add(base)
                names.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    out: set[str] = set()
    for name in names:
        parts = name.split(".")
        out.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return out


def source_files(root: Path, module: str) -> tuple[Path, ...]:
    """The files of the repository at ``root`` that running ``module`` executes: its file, its
    packages' ``__init__`` files, and every repository module it imports, transitively (imports
    read with ``ast``, those inside functions included). Sorted; empty when ``module`` is no file
    of the repository (an installed module)."""
    root = root.resolve()
    pending = [p for p in (".".join(module.split(".")[:k]) for k in range(1, module.count(".") + 2))]
    seen: dict[Path, str] = {}
    while pending:
        name = pending.pop()
        path = module_file(root, name)
        if path is None or path in seen:
            continue
        seen[path] = name
        pending.extend(_imported_modules(path, name))
    return tuple(sorted(seen))


def fingerprint(root: Path, files: Sequence[Path]) -> dict[str, str]:
    """Repository-relative path (``/`` separated) -> the first DIGEST_CHARS hex digits of its sha256."""
    root = root.resolve()
    return {p.resolve().relative_to(root).as_posix(): _digest(p.read_bytes()) for p in files}


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:DIGEST_CHARS]


def workload_threads(setting: int | None, environ: Mapping[str, str]) -> str:
    """The CPU threads a workload's operators get, as a baseline records them: the ``threads``
    setting, else the ``OMP_NUM_THREADS`` it inherits, else ``"default"`` (torch's own count)."""
    if setting is not None:
        return str(setting)
    return environ.get("OMP_NUM_THREADS", "").strip() or "default"


def current(root: Path, module: str, args: Sequence[str], machine: MachineInfo | None, *,
            launcher: str = "python", nproc: int = 1, nnodes: int = 1, threads: str | None = None) -> Provenance:
    """The provenance of a run of ``module`` with ``args`` from the repository at ``root`` on
    ``machine``, its operators given ``threads`` (workload_threads)."""
    return Provenance(
        command=recorded_command(module, args, launcher, nproc, nnodes),
        sources=fingerprint(root, source_files(root, module)),
        record_version=RECORD_VERSION,
        threads=threads,
        software={k: getattr(machine, k) for k in SOFTWARE} if machine is not None else {},
    )


# ----------------------------------------------------------------------------- the comparison


def staleness(recorded: Provenance, now: Provenance, *, root: Path | None = None,
                compare_software: bool = True) -> Staleness:
    """How ``recorded`` (a baseline's) differs from ``now``. Without a recorded fingerprint, the
    files of ``now`` are compared with their versions at the baseline's git commit when ``root``
    is a git checkout that holds it. ``compare_software``: False for a baseline of another machine
    class (its software is that machine's)."""
    code: list[str] = []
    unknown: str | None = None
    if recorded.sources is not None and now.sources is not None:
        code += _file_changes(recorded.sources, now.sources)
    elif recorded.sources is None and now.sources:
        at_commit = git_fingerprint(root, recorded.git_commit, list(now.sources)) if root is not None else None
        when = f"recorded {recorded.created_utc[:10]}" if recorded.created_utc else "recorded"
        commit = f" at {recorded.git_commit[:7]}" if recorded.git_commit else ""
        dirty = " from a tree with uncommitted changes" if recorded.git_dirty else ""
        if at_commit is None:
            unknown = f"{when}{commit}{dirty}, before baselines fingerprinted their code; re-record it"
        else:
            code += [f"{c} since {recorded.git_commit[:7]}" if recorded.git_commit else c
                     for c in _file_changes(at_commit, now.sources)]
            if dirty:
                unknown = f"{when}{commit}{dirty}: its code is not known exactly"
    if recorded.command is not None and now.command is not None and recorded.command != now.command:
        code.append(f"command {recorded.command} -> {now.command}")
    environment: list[str] = []
    if recorded.record_version is not None and now.record_version is not None \
            and recorded.record_version != now.record_version:
        environment.append(f"perfgate record version {recorded.record_version} -> {now.record_version}")
    if recorded.threads is not None and now.threads is not None and recorded.threads != now.threads:
        environment.append(f"CPU threads {recorded.threads} -> {now.threads}")
    if compare_software:
        for key in SOFTWARE:
            before, after = recorded.software.get(key), now.software.get(key)
            if before and after and before != after:
                environment.append(f"{key} {before} -> {after}")
    return Staleness(code=tuple(code), environment=tuple(environment), unknown=unknown)


def _file_changes(before: Mapping[str, str], after: Mapping[str, str]) -> list[str]:
    changed = [f"{p} changed" for p in sorted(before.keys() & after.keys()) if before[p] != after[p]]
    added = [f"{p} added" for p in sorted(after.keys() - before.keys())]
    removed = [f"{p} removed" for p in sorted(before.keys() - after.keys())]
    return changed + added + removed


def git_fingerprint(root: Path, commit: str | None, paths: Sequence[str]) -> dict[str, str] | None:
    """The fingerprint of ``paths`` as they were at ``commit`` in the git checkout at ``root`` (a
    path the commit lacks is left out); None without git, outside a checkout, or when the checkout
    does not hold the commit (a shallow clone)."""
    if not commit:
        return None
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True,
                             text=True, timeout=GIT_TIMEOUT_S, check=False)
        if top.returncode != 0:
            return None
        prefix = Path(root).resolve().relative_to(Path(top.stdout.strip()).resolve()).as_posix()
        probe = subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=root, capture_output=True,
                               timeout=GIT_TIMEOUT_S, check=False)
        if probe.returncode != 0:
            return None
        out: dict[str, str] = {}
        for path in paths:
            spec = f"{commit}:{path}" if prefix in ("", ".") else f"{commit}:{prefix}/{path}"
            shown = subprocess.run(["git", "show", spec], cwd=root, capture_output=True, timeout=GIT_TIMEOUT_S,
                                   check=False)
            if shown.returncode == 0:
                out[path] = _digest(shown.stdout)
        return out
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def git_provenance(root: Path) -> dict[str, Any]:
    """Commit and dirty flag of the git checkout at ``root`` (None outside git)."""
    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"git_commit": commit, "git_dirty": None if status is None else bool(status)}


def command_line() -> str:
    """The command that asked for a baseline (``perfgate baseline update x``, ``pytest --perfgate ...``)."""
    if not sys.argv or not sys.argv[0]:
        return "perfgate"
    program = Path(sys.argv[0])
    name = program.parent.name if program.name == "__main__.py" else program.name
    return " ".join([name, *sys.argv[1:]])


def recording(root: Path, command: str) -> dict[str, Any]:
    """What a new baseline records of its recording: git commit/dirty, UTC date, perfgate version, command."""
    from perfgate import __version__

    return {
        **git_provenance(root),
        "created_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "perfgate_version": __version__,
        "command": command,
    }

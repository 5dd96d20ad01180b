"""Which workloads the gate runs: WorkloadSpec discovery.

A workload is every ``<workloads_dir>/<name>.py`` whose name does not start with ``_`` (module
``<dir>.<name>``) and that runs something when executed, plus every declared
``[tool.perfgate.workloads.<name>]`` table; a table's keys refine the discovered file,
``enabled = false`` keeps it out of default runs (naming it explicitly still runs it). Each
declared variant gives one more spec (``name[variant]``). A file that only defines things (a
helper the workloads import: imports, functions, classes, assignments, no ``if __name__ ==
"__main__":`` and no statement that runs) is skipped with a note (``helper_notes``), unless a table
declares it.
"""
from __future__ import annotations

import ast

from dataclasses import dataclass, field, replace
from pathlib import Path

from perfgate.errors import ConfigError
from perfgate.records.model import Tolerance
from perfgate.records.safe_names import check_name
from perfgate.settings.config import Settings
from perfgate.settings.pyproject import WorkloadConfig


@dataclass(frozen=True)
class WorkloadSpec:
    """One runnable workload (or variant), with its arguments resolved for this machine."""

    name: str
    module: str
    args: tuple[str, ...] = ()
    launcher: str = "python"              # "python" or "torchrun"
    nproc: int = 1                        # processes (torchrun), per node
    nnodes: int = 1                       # torchrun nodes, all on this machine, one nsys report each
    rdzv_endpoint: str | None = None      # the nodes' c10d rendezvous (None: 127.0.0.1 and a free port)
    batch_size: int | None = None
    step_pattern: str | None = None
    skip_steps: int | None = None         # step ranges of each process the analysis skips (None: its default)
    timeout_s: float | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    variant: str | None = None
    enabled: bool = True
    gate_alone: tuple[str, ...] = ()      # metrics that gate on their own (compare.ComparePolicy)

    @property
    def full_name(self) -> str:
        """``resnet_cifar`` or ``resnet_cifar[pinned]`` (pytest item and report name)."""
        return self.name if not self.variant else f"{self.name}[{self.variant}]"


def workload_files(workloads_dir: Path, declared: frozenset[str] | set[str] = frozenset()) -> dict[str, Path]:
    """``<name> -> <dir>/<name>.py`` for every module not starting with ``_`` that is not a helper
    (``is_helper``; one that ``declared`` names is kept); ConfigError naming the file when its name
    is not a safe name (perfgate.records.safe_names: it becomes a path component)."""
    if not workloads_dir.is_dir():
        return {}
    files = {p.stem: p for p in sorted(workloads_dir.glob("*.py")) if not p.name.startswith("_")}
    for name, path in files.items():
        check_name(name, f"{path}: workload name")
    return {name: path for name, path in files.items() if name in declared or not is_helper(path)}


def is_helper(path: Path) -> bool:
    """Whether executing ``path`` would only define things: its top level holds nothing but a
    docstring, imports, function and class definitions, assignments, ``if TYPE_CHECKING:`` blocks
    and ``try:`` blocks of those, and no ``if __name__ == "__main__":`` block. A file that cannot
    be read or parsed is not called a helper (running it says what is wrong)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return False
    return all(_defines_only(node) for node in tree.body)


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
                ast.AnnAssign, ast.Pass)


def _defines_only(node: ast.stmt) -> bool:
    if isinstance(node, _DEFINITIONS):
        return True
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)                 # a docstring
    if isinstance(node, ast.If):
        test = ast.unparse(node.test)
        if "__name__" in test:
            return False                                            # if __name__ == "__main__":
        return "TYPE_CHECKING" in test and all(_defines_only(n) for n in node.body + node.orelse)
    if isinstance(node, ast.Try):
        parts = node.body + node.orelse + node.finalbody + [n for h in node.handlers for n in h.body]
        return all(_defines_only(n) for n in parts)
    return False


def helper_notes(settings: Settings) -> list[str]:
    """One note per file of the workloads folder skipped as a helper (``is_helper``)."""
    folder = settings.workloads_dir
    if not folder.is_dir():
        return []
    kept = workload_files(folder, set(settings.workloads))
    return [f"{p} is not a workload: it only defines things (no `if __name__ == \"__main__\":` block, no "
            f"statement that runs); name it _{p.name} to say it is a helper, or declare it in "
            f"[tool.perfgate.workloads.{p.stem}] to run it"
            for p in sorted(folder.glob("*.py")) if not p.name.startswith("_") and p.stem not in kept]


def module_prefix(settings: Settings) -> str:
    """Dotted package of the workloads dir relative to the project root (``workloads``)."""
    try:
        relative = settings.workloads_dir.relative_to(settings.root)
    except ValueError:
        return settings.workloads_dir.name
    return ".".join(relative.parts) or settings.workloads_dir.name


def discover_workloads(settings: Settings, gpu_count: int = 0) -> list[WorkloadSpec]:
    """Every workload and variant known to ``settings`` (disabled ones included, flagged).

    ConfigError when a workloads_dir that was set (pyproject, option or environment) does not
    exist, and when there is no workload at all: a gate that runs nothing must not pass."""
    source = settings.sources.get("workloads_dir", "default")
    if source != "default" and not settings.workloads_dir.is_dir():
        raise ConfigError(f"{source}: {settings.workloads_dir} is not a folder")
    files = workload_files(settings.workloads_dir, set(settings.workloads))
    if not files and not settings.workloads:
        tables = f"{settings.pyproject} has no" if settings.pyproject else "no pyproject.toml with"
        state = "holds no <name>.py file" if settings.workloads_dir.is_dir() else "does not exist"
        raise ConfigError(f"no workloads: {settings.workloads_dir} ({source} workloads_dir) {state}, and "
                          f"{tables} [tool.perfgate.workloads.<name>] tables")
    prefix = module_prefix(settings)
    names = sorted(set(files) | set(settings.workloads))
    specs: list[WorkloadSpec] = []
    for name in names:
        config = settings.workloads.get(name, WorkloadConfig(name=name))
        if config.module is None and name not in files:
            where = f"{settings.pyproject} [tool.perfgate.workloads.{name}]"
            raise ConfigError(f"{where}: no module given and no {settings.workloads_dir / (name + '.py')}")
        specs.extend(_specs_for(config, f"{prefix}.{name}", settings, gpu_count))
    return specs


def select_workloads(specs: list[WorkloadSpec], names: tuple[str, ...] | list[str]) -> list[WorkloadSpec]:
    """The enabled specs when ``names`` is empty; else those named (``name`` selects the workload
    and all its variants, ``name[variant]`` one variant). Unknown names raise ConfigError."""
    if not names:
        return [s for s in specs if s.enabled]
    chosen: list[WorkloadSpec] = []
    for wanted in names:
        matches = [s for s in specs if wanted in (s.name, s.full_name)]
        if not matches:
            known = ", ".join(s.full_name for s in specs) or "none"
            raise ConfigError(f"workload {wanted!r} not found (known: {known})")
        chosen.extend(m for m in matches if m not in chosen)
    return chosen


def selected_specs(settings: Settings, gpu_count: int) -> list[WorkloadSpec]:
    """The workloads a run runs on a machine of ``gpu_count`` GPUs (the front end counts them:
    perfgate.system.machine): those named in ``settings.selected``, else all enabled (ConfigError
    when there are none)."""
    specs = select_workloads(discover_workloads(settings, gpu_count), settings.selected)
    if not specs:
        raise ConfigError(f"no enabled workloads in {settings.workloads_dir} or [tool.perfgate.workloads]")
    return specs


def _specs_for(config: WorkloadConfig, default_module: str, settings: Settings, gpu_count: int) -> list[WorkloadSpec]:
    size = settings.size if settings.size != "auto" else ("gpu" if gpu_count > 0 else "cpu")
    args = config.args + (config.gpu_args if size == "gpu" else config.cpu_args)
    if settings.size != "auto":
        args += ("--size", settings.size)
    nproc = config.nproc or (gpu_count if gpu_count > 0 else 2)
    base = WorkloadSpec(
        name=config.name,
        module=config.module or default_module,
        args=args,
        launcher=config.launcher,
        nproc=nproc if config.launcher == "torchrun" else 1,
        nnodes=config.nnodes,
        rdzv_endpoint=config.rdzv_endpoint,
        batch_size=config.batch_size,
        step_pattern=config.step_pattern,
        skip_steps=config.skip_steps if config.skip_steps is not None else settings.skip_steps,
        timeout_s=config.timeout_s,
        tolerances=dict(config.tolerances),
        enabled=config.enabled,
        gate_alone=config.gate_alone,
    )
    out = [base]
    for variant, extra in config.variants.items():
        out.append(replace(base, args=args + extra, variant=variant))
    return out

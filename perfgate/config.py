"""Settings: the gate's configuration, resolved once per run.

Precedence, highest first: command-line / pytest option > environment ``PERFGATE_<KEY>`` >
``[tool.perfgate]`` in pyproject.toml > defaults. Per-workload tables
``[tool.perfgate.workloads.<name>]`` and the tolerance table ``[tool.perfgate.tolerance]``
come from pyproject; tolerance options (``--perfgate-tolerance METRIC=SPEC``) override entries.
"""
from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError
from perfgate.model import Tolerance
from perfgate.names import check_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "PERFGATE_"
SIZES = ("auto", "cpu", "gpu")
LAUNCHERS = ("python", "torchrun")

# Global keys: name -> (kind, default). Kinds: path, str, int, float, bool.
GLOBAL_KEYS: dict[str, tuple[str, Any]] = {
    "workloads_dir": ("path", "workloads"),
    "baseline_dir": ("path", "baselines"),
    "artifacts_dir": ("path", ".perfgate/runs"),
    "report_dir": ("path", ".perfgate/report"),
    "nsys": ("str", None),
    "trace": ("str", "auto"),
    "capture_range": ("str", "none"),
    "timeout_s": ("float", 900.0),
    "launches": ("int", 3),
    "warmup_steps": ("int", None),
    "size": ("str", "auto"),
    "strict": ("bool", False),
    "alpha": ("float", 0.01),
    "machine_class": ("str", None),
    "autostep": ("bool", True),
    "pytorch_trace": ("str", "off"),
}
WORKLOAD_KEYS = frozenset({
    "module", "args", "cpu_args", "gpu_args", "launcher", "nproc", "batch_size", "step_pattern",
    "warmup_steps", "timeout_s", "tolerance", "enabled", "variants",
})
TABLE_KEYS = frozenset(GLOBAL_KEYS) | {"tolerance", "workloads"}


@dataclass(frozen=True)
class WorkloadConfig:
    """One ``[tool.perfgate.workloads.<name>]`` table, validated."""

    name: str
    module: str | None = None
    args: tuple[str, ...] = ()
    cpu_args: tuple[str, ...] = ()
    gpu_args: tuple[str, ...] = ()
    launcher: str = "python"
    nproc: int | None = None              # torchrun processes; None: GPU count (2 on CPU)
    batch_size: int | None = None
    step_pattern: str | None = None
    warmup_steps: int | None = None
    timeout_s: float | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    enabled: bool = True
    variants: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """Everything a gate run needs to know; paths are absolute."""

    root: Path
    workloads_dir: Path
    baseline_dir: Path
    artifacts_dir: Path
    report_dir: Path
    nsys: str | None = None
    trace: str = "auto"                   # "auto": cuda,nvtx,osrt with a GPU, nvtx,osrt without
    capture_range: str = "none"           # none | cudaProfilerApi | nvtx:<range name>
    timeout_s: float = 900.0
    launches: int = 1
    warmup_steps: int | None = None
    size: str = "auto"
    strict: bool = False
    alpha: float = 0.01
    machine_class: str | None = None      # overrides the detected machine class
    autostep: bool = True                 # NVTX ranges from hooks in the profiled process (perfgate.autostep)
    pytorch_trace: str = "off"            # nsys --pytorch: off | auto | a mode list like functions-trace
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    workloads: dict[str, WorkloadConfig] = field(default_factory=dict)
    selected: tuple[str, ...] = ()        # workloads named on the command line
    pyproject: Path | None = None


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``."""
    start = start.resolve()
    for folder in (start, *start.parents):
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def read_table(pyproject: Path) -> dict[str, Any]:
    """The ``[tool.perfgate]`` table of ``pyproject`` (empty when absent)."""
    try:
        with pyproject.open("rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{pyproject}: not valid TOML: {exc}") from exc
    table = data.get("tool", {}).get("perfgate", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject} [tool.perfgate]: expected a table")
    return table


def load_settings(
    root: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    pyproject: Path | None = None,
) -> Settings:
    """Resolve Settings for the project at ``root`` (default: the current directory).

    ``overrides`` holds option values (``None`` means "not given"); keys are GLOBAL_KEYS plus
    ``tolerance`` (mapping metric -> spec string) and ``selected`` (workload names)."""
    overrides = dict(overrides or {})
    env = os.environ if env is None else env
    pyproject = pyproject or find_pyproject(root or Path.cwd())
    root = (root or (pyproject.parent if pyproject else Path.cwd())).resolve()
    table = read_table(pyproject) if pyproject else {}
    where = f"{pyproject} [tool.perfgate]" if pyproject else "[tool.perfgate]"
    unknown = sorted(set(table) - TABLE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TABLE_KEYS))})")

    values: dict[str, Any] = {}
    for key, (kind, default) in GLOBAL_KEYS.items():
        env_name = ENV_PREFIX + key.upper()
        if overrides.get(key) is not None:
            source, raw = f"option --{key.replace('_', '-')}", overrides[key]
        elif env.get(env_name, "") != "":
            source, raw = f"environment variable {env_name}", env[env_name]
        elif key in table:
            source, raw = f"{where} {key}", table[key]
        else:
            values[key] = (root / default).resolve() if kind == "path" else default
            continue
        value = _coerce(raw, kind, source)
        _check_global(key, value, source)
        if kind == "path" and value is not None:
            value = (root / value).resolve()
        values[key] = value

    tolerances = parse_tolerances(table.get("tolerance", {}), f"{where.rstrip(']')}.tolerance]")
    tolerances.update(parse_tolerances(overrides.get("tolerance") or {}, "option --perfgate-tolerance"))
    workloads_table = table.get("workloads", {})
    if not isinstance(workloads_table, dict):
        raise ConfigError(f"{where} workloads: expected a table of workload tables")
    workloads = {
        name: parse_workload(name, spec, f"{pyproject or 'pyproject.toml'} [tool.perfgate.workloads.{name}]")
        for name, spec in workloads_table.items()
    }
    return Settings(
        root=root, tolerances=tolerances, workloads=workloads,
        selected=tuple(overrides.get("selected") or ()), pyproject=pyproject, **values,
    )


def parse_tolerances(table: Any, where: str) -> dict[str, Tolerance]:
    """Metric (or fnmatch pattern) -> Tolerance, each spec parsed by compare.parse_tolerance."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table of metric = \"tolerance\" entries")
    if not table:
        return {}
    from perfgate.compare import parse_tolerance

    out: dict[str, Tolerance] = {}
    for metric, spec in table.items():
        if not isinstance(spec, str):
            raise ConfigError(f"{where} {metric}: expected a string like \"5%\" or \"5%+0.5\", got {spec!r}")
        out[str(metric)] = parse_tolerance(spec, f"{where} {metric}")
    return out


def parse_tolerance_option(text: str) -> tuple[str, str]:
    """``METRIC=SPEC`` from ``--perfgate-tolerance`` / ``--tolerance``."""
    metric, sep, spec = text.partition("=")
    if not sep or not metric.strip() or not spec.strip():
        raise ConfigError(f"option --perfgate-tolerance: expected METRIC=SPEC (e.g. step_time_ms=5%), got {text!r}")
    return metric.strip(), spec.strip()


def parse_workload(name: str, spec: Any, where: str) -> WorkloadConfig:
    """Validate one ``[tool.perfgate.workloads.<name>]`` table."""
    check_name(name, f"{where}: workload name")
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(spec) - WORKLOAD_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(WORKLOAD_KEYS))})")
    launcher = spec.get("launcher", "python")
    if launcher not in LAUNCHERS:
        raise ConfigError(f"{where} launcher: expected one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    variants_table = spec.get("variants", {})
    if not isinstance(variants_table, dict):
        raise ConfigError(f"{where} variants: expected a table of name = [args...]")
    variants: dict[str, tuple[str, ...]] = {}
    for variant, args in variants_table.items():
        check_name(variant, f"{where} variants: variant name")
        variants[variant] = _str_list(args, f"{where} variants.{variant}")
    module = spec.get("module")
    if module is not None and not (isinstance(module, str) and re.fullmatch(r"[\w.]+", module)):
        raise ConfigError(f"{where} module: expected a dotted module name, got {module!r}")
    step_pattern = spec.get("step_pattern")
    if step_pattern is not None:
        try:
            re.compile(step_pattern)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"{where} step_pattern: not a regular expression: {exc}") from exc
    return WorkloadConfig(
        name=name,
        module=module,
        args=_str_list(spec.get("args", []), f"{where} args"),
        cpu_args=_str_list(spec.get("cpu_args", []), f"{where} cpu_args"),
        gpu_args=_str_list(spec.get("gpu_args", []), f"{where} gpu_args"),
        launcher=launcher,
        nproc=_optional(spec, "nproc", "int", where),
        batch_size=_optional(spec, "batch_size", "int", where),
        step_pattern=step_pattern,
        warmup_steps=_optional(spec, "warmup_steps", "int", where, allow_zero=True),
        timeout_s=_optional(spec, "timeout_s", "float", where),
        tolerances=parse_tolerances(spec.get("tolerance", {}), f"{where} tolerance"),
        enabled=_coerce(spec.get("enabled", True), "bool", f"{where} enabled"),
        variants=variants,
    )


def _optional(spec: Mapping[str, Any], key: str, kind: str, where: str, *, allow_zero: bool = False) -> Any:
    if spec.get(key) is None:
        return None
    value = _coerce(spec[key], kind, f"{where} {key}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{where} {key}: expected a positive number, got {spec[key]!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ConfigError(f"{where}: expected a list of strings, got {value!r}")
    return tuple(str(v) for v in value)


def _coerce(value: Any, kind: str, where: str) -> Any:
    """Convert a TOML/env/option value to ``kind``; ConfigError names ``where``."""
    if kind in ("str", "path"):
        if not isinstance(value, (str, Path)):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return str(value)
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{where}: expected true or false, got {value!r}")
    number_type = int if kind == "int" else float
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected a {'whole' if kind == 'int' else 'positive'} number, got {value!r}")
    try:
        number = number_type(value)
    except (TypeError, ValueError, OverflowError):
        label = "a whole number" if kind == "int" else "a positive number"
        raise ConfigError(f"{where}: expected {label}, got {value!r}") from None
    if not math.isfinite(number):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if kind == "int" and isinstance(value, float) and not value.is_integer():
        raise ConfigError(f"{where}: expected a whole number, got {value!r}")
    return number


def _check_global(key: str, value: Any, where: str) -> None:
    """Range checks of one global key; ``where`` names the option, variable or file."""
    problem = None
    if key == "size" and value not in SIZES:
        problem = f"expected one of {', '.join(SIZES)}"
    elif key == "timeout_s" and value <= 0:
        problem = "expected a positive number"
    elif key == "launches" and value < 1:
        problem = "expected a whole number >= 1"
    elif key == "warmup_steps" and value < 0:
        problem = "expected a whole number >= 0"
    elif key == "alpha" and not 0 < value < 1:
        problem = "expected a number between 0 and 1"
    elif key == "machine_class" and value is not None:
        check_name(value, where)
    elif key == "capture_range" and value not in ("none", "cudaProfilerApi") and not re.fullmatch(r"nvtx:.+", value):
        problem = "expected none, cudaProfilerApi or nvtx:<range name>"
    elif key == "trace" and value != "auto" and not re.fullmatch(r"[a-z0-9\-]+(,[a-z0-9\-]+)*", value):
        problem = "expected 'auto' or a comma-separated nsys trace list like 'cuda,nvtx,osrt'"
    elif key == "pytorch_trace" and (
        not re.fullmatch(r"[a-z0-9\-]+(,[a-z0-9\-]+)*", value)
        or (value not in ("off", "auto") and {"off", "auto"} & set(value.split(",")))
    ):
        problem = "expected off, auto or an nsys --pytorch mode list like 'functions-trace'"
    if problem:
        raise ConfigError(f"{where}: {problem}, got {value!r}")

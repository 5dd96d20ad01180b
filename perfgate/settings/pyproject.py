"""Reading pyproject.toml for perfgate: where it is, its ``[tool.perfgate]`` table, the
per-workload tables ``[tool.perfgate.workloads.<name>]`` (WorkloadConfig), tolerance tables, and
how a value from pyproject, the environment or an option becomes a number, a flag or a string
(``coerce``). perfgate.settings.config resolves the settings from them.
"""
from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError
from perfgate.gate.metric_specs import parse_tolerance
from perfgate.gate.tolerance_names import check_metric_name
from perfgate.records.model import Tolerance
from perfgate.records.safe_names import check_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

LAUNCHERS = ("python", "torchrun")
WORKLOAD_KEYS = frozenset({
    "module", "args", "cpu_args", "gpu_args", "launcher", "nproc", "nnodes", "rdzv_endpoint", "batch_size",
    "step_pattern", "skip_steps", "warmup_steps", "timeout_s", "tolerance", "enabled", "variants", "gate_alone",
})


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
    nnodes: int = 1                       # torchrun nodes, each its own nsys report (docs/guides/multi-node.md)
    rdzv_endpoint: str | None = None      # their c10d rendezvous host[:port]; None: 127.0.0.1, a free port
    batch_size: int | None = None
    step_pattern: str | None = None
    skip_steps: int | None = None         # step ranges the analysis skips per process (key warmup_steps too)
    timeout_s: float | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    enabled: bool = True
    variants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    gate_alone: tuple[str, ...] = ()      # metrics (or patterns) that gate on their own, as memory does


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
    except UnicodeDecodeError as exc:   # TOML is UTF-8
        raise ConfigError(f"{pyproject}: not valid TOML: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{pyproject}: cannot read: {exc.strerror or exc}") from None
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{pyproject} [tool]: expected a table, got {tool!r}")
    table = tool.get("perfgate", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{pyproject} [tool.perfgate]: expected a table")
    return table


def parse_tolerances(table: Any, where: str) -> dict[str, Tolerance]:
    """Metric (or fnmatch pattern) -> Tolerance, each spec parsed by metrics.parse_tolerance."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table of metric = \"tolerance\" entries")
    out: dict[str, Tolerance] = {}
    for metric, spec in table.items():
        if not isinstance(spec, str):
            raise ConfigError(f"{where} {metric}: expected a string like \"5%\" or \"5%+0.5\", got {spec!r}")
        check_metric_name(str(metric), where)
        out[str(metric)] = parse_tolerance(spec, f"{where} {metric}")
    return out


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
    nnodes = _optional(spec, "nnodes", "int", where) or 1
    if nnodes > 1 and launcher != "torchrun":
        raise ConfigError(f"{where} nnodes: {nnodes} nodes need launcher = \"torchrun\" (got {launcher!r})")
    rdzv = spec.get("rdzv_endpoint")
    if rdzv is not None and not (isinstance(rdzv, str) and re.fullmatch(r"[\w.\-\[\]:]+?(:\d{1,5})?", rdzv)):
        raise ConfigError(f"{where} rdzv_endpoint: expected host or host:port, got {rdzv!r}")
    return WorkloadConfig(
        name=name,
        module=module,
        args=_str_list(spec.get("args", []), f"{where} args"),
        cpu_args=_str_list(spec.get("cpu_args", []), f"{where} cpu_args"),
        gpu_args=_str_list(spec.get("gpu_args", []), f"{where} gpu_args"),
        launcher=launcher,
        nproc=_optional(spec, "nproc", "int", where),
        nnodes=nnodes,
        rdzv_endpoint=rdzv,
        batch_size=_optional(spec, "batch_size", "int", where),
        step_pattern=step_pattern,
        skip_steps=_skip_steps(spec, where),
        timeout_s=_optional(spec, "timeout_s", "float", where),
        tolerances=parse_tolerances(spec.get("tolerance", {}), f"{where} tolerance"),
        enabled=coerce(spec.get("enabled", True), "bool", f"{where} enabled", typed=True),
        variants=variants,
        gate_alone=_str_list(spec.get("gate_alone", []), f"{where} gate_alone"),
    )


def _skip_steps(spec: Mapping[str, Any], where: str) -> int | None:
    """A workload table's ``skip_steps`` (or its old name ``warmup_steps``)."""
    if "skip_steps" in spec and "warmup_steps" in spec:
        raise ConfigError(f"{where}: warmup_steps and skip_steps are the same setting; keep skip_steps")
    key = "warmup_steps" if "warmup_steps" in spec else "skip_steps"
    value: int | None = _optional(spec, key, "int", where, allow_zero=True)
    return value


def _optional(spec: Mapping[str, Any], key: str, kind: str, where: str, *, allow_zero: bool = False) -> Any:
    if spec.get(key) is None:
        return None
    value = coerce(spec[key], kind, f"{where} {key}", typed=True)
    if value < 0 or (value == 0 and not allow_zero):
        raise ConfigError(f"{where} {key}: expected a positive number, got {spec[key]!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings (quote numbers: [\"--steps\", \"10\"]), got {value!r}")
    return tuple(value)


def coerce(value: Any, kind: str, where: str, *, typed: bool = False) -> Any:
    """Convert a TOML/env/option value to ``kind``; ConfigError names ``where``. ``typed``: a
    pyproject value, which must already be of its TOML type (``strict = "yes"`` is an error, not
    true: only an environment variable's or option's text is read as yes/no or a number)."""
    if typed and kind == "bool" and not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false (a TOML boolean, unquoted), got {value!r}")
    if typed and kind in ("int", "float") and (isinstance(value, bool) or not isinstance(value, (int, float))):
        label = "a whole number" if kind == "int" else "a positive number"
        raise ConfigError(f"{where}: expected {label}, got {value!r} (a TOML number, unquoted)")
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

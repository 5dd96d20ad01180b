"""Settings: the gate's configuration, declared once and resolved once per run.

:data:`SETTINGS` is the one declaration of every global setting: its ``[tool.perfgate]`` key (and
``Settings`` field), kind, default, check and help, and whether it is a command-line option.
The pytest options (``--perfgate-<name>``) and the ``perfgate`` command's options (``--<name>``)
are both built from it by :func:`add_setting_options` (the way pytest-benchmark shares option
builders between its plugin and its CLI), and :func:`load_settings` resolves and checks every
value before anything runs, naming where a bad value came from.

Precedence, highest first: command-line / pytest option > environment ``PERFGATE_<KEY>`` >
``[tool.perfgate]`` in pyproject.toml > default. Tolerances: an option (``--perfgate-tolerance
METRIC=SPEC``) > the workload's ``[tool.perfgate.workloads.<name>] tolerance`` table > the
``[tool.perfgate.tolerance]`` table > the metric's default; a metric takes its tolerance from the
first of these with an entry for it (its exact name, else the longest matching pattern).
"""
from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfgate.errors import ConfigError
from perfgate.metrics import alpha_problem, parse_tolerance
from perfgate.model import Tolerance
from perfgate.names import MAX_LENGTH, RULE, check_name, is_safe_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "PERFGATE_"
PYTEST_PREFIX = "perfgate-"
SIZES = ("auto", "cpu", "gpu")
LAUNCHERS = ("python", "torchrun")
_LIST = r"[a-z0-9\-]+(,[a-z0-9\-]+)*"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"expected one of {', '.join(choices)}"


def _at_least(low: float, what: str) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"expected {what}"


def _capture_range(v: str) -> str | None:
    ok = v in ("none", "cudaProfilerApi") or re.fullmatch(r"nvtx:.+", v)
    return None if ok else "expected none, cudaProfilerApi or nvtx:<range name>"


def _trace(v: str) -> str | None:
    ok = v == "auto" or re.fullmatch(_LIST, v)
    return None if ok else "expected 'auto' or a comma-separated nsys trace list like 'cuda,nvtx,osrt'"


def _pytorch_trace(v: str) -> str | None:
    ok = re.fullmatch(_LIST, v) and (v in ("off", "auto") or not {"off", "auto"} & set(v.split(",")))
    return None if ok else "expected off, auto or an nsys --pytorch mode list like 'functions-trace'"


def _machine_class(v: str) -> str | None:
    return None if is_safe_name(v) else f"not a safe name (use {RULE}; at most {MAX_LENGTH} characters)"


@dataclass(frozen=True)
class Setting:
    """One global setting. ``option``: its command-line name without prefix (``--launches``,
    ``--perfgate-launches``), None when it is set in pyproject or the environment only. A bool
    option comes with its negation (``--no-perfgate-autostep``). ``check`` returns what is wrong
    with a converted value (None: nothing)."""

    key: str
    kind: str                                   # path | str | int | float | bool
    default: Any
    help: str
    option: str | None = None
    metavar: str | None = None
    check: Callable[[Any], str | None] | None = None

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.key.upper()

    def flag(self, prefix: str = "") -> str:
        assert self.option is not None
        return f"--{prefix}{self.option}"

    def dest(self, prefix: str = "") -> str:
        return (prefix + self.key).replace("-", "_")

    def value(self, raw: Any, where: str) -> Any:
        """``raw`` (from an option, the environment or the table) converted and checked;
        ConfigError naming ``where``."""
        value = _coerce(raw, self.kind, where)
        problem = self.check(value) if self.check is not None and value is not None else None
        if problem:
            raise ConfigError(f"{where}: {problem}, got {value!r}")
        return value

    def parse_option(self, text: str) -> Any:
        """An option's ``type=``: the converted, checked value (argparse names the option)."""
        import argparse

        try:
            return self.value(text, "") if self.kind != "path" else text
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(": ")) from None


#: Every global setting, once. Adding one is a row here and its typed field in Settings
#: (tests/test_config.py checks that the two agree).
SETTINGS: tuple[Setting, ...] = (
    Setting("workloads_dir", "path", "workloads", "folder whose <name>.py files are workloads"),
    Setting("baseline_dir", "path", "baselines", "baseline folder", "baseline-dir", "DIR"),
    Setting("artifacts_dir", "path", ".perfgate/runs", "where nsys reports and logs go", "artifacts-dir", "DIR"),
    Setting("report_dir", "path", ".perfgate/report", "where junit/markdown/json reports go", "report-dir", "DIR"),
    Setting("nsys", "str", None, "the nsys executable", "nsys", "PATH"),
    Setting("trace", "str", "auto", "nsys --trace set (auto: cuda,nvtx,osrt with a GPU, nvtx,osrt without)",
            "trace", "LIST", _trace),
    Setting("capture_range", "str", "none", "none, cudaProfilerApi or nvtx:<range name>", check=_capture_range),
    Setting("timeout_s", "float", 900.0, "timeout per launch, in seconds", "timeout", "SECONDS",
            lambda v: None if v > 0 else "expected a positive number"),
    Setting("launches", "int", 3, "launches (separate processes) per workload: the unit of replication",
            "launches", "N", _at_least(1, "a whole number >= 1")),
    Setting("skip_steps", "int", None, "step ranges of each process the analysis skips before measuring "
            "(also read as warmup_steps)", check=_at_least(0, "a whole number >= 0")),
    Setting("size", "str", "auto", "workload size preset passed as --size", "size", "{auto,cpu,gpu}",
            _one_of(*SIZES)),
    Setting("strict", "bool", False, "a workload without a baseline for this machine fails instead of passing as NEW",
            "strict"),
    Setting("alpha", "float", 0.01, "false-alarm budget per primary metric",
            check=alpha_problem),
    Setting("machine_class", "str", None, "overrides the detected machine class (the baseline key)",
            check=_machine_class),
    Setting("autostep", "bool", True, "NVTX ranges for DataLoader, backward and optimizer step from hooks in "
            "the profiled process", "autostep"),
    Setting("pytorch_trace", "str", "off", "nsys --pytorch: off, auto or a mode list like functions-trace",
            check=_pytorch_trace),
)
SETTING = {s.key: s for s in SETTINGS}
#: Keys a table may still use for a setting that was renamed: old -> new.
RENAMED = {"warmup_steps": "skip_steps"}
WORKLOAD_KEYS = frozenset({
    "module", "args", "cpu_args", "gpu_args", "launcher", "nproc", "batch_size", "step_pattern",
    "skip_steps", "warmup_steps", "timeout_s", "tolerance", "enabled", "variants",
})
TABLE_KEYS = frozenset(SETTING) | frozenset(RENAMED) | {"tolerance", "workloads"}
TOLERANCE_OPTION = "tolerance"


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
    skip_steps: int | None = None         # step ranges the analysis skips per process (key warmup_steps too)
    timeout_s: float | None = None
    tolerances: dict[str, Tolerance] = field(default_factory=dict)
    enabled: bool = True
    variants: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Settings:
    """Everything a gate run needs to know; paths are absolute. Built by :func:`load_settings`
    only: the defaults are :data:`SETTINGS`'."""

    root: Path
    workloads_dir: Path
    baseline_dir: Path
    artifacts_dir: Path
    report_dir: Path
    nsys: str | None
    trace: str                            # "auto": cuda,nvtx,osrt with a GPU, nvtx,osrt without
    capture_range: str                    # none | cudaProfilerApi | nvtx:<range name>
    timeout_s: float
    launches: int
    skip_steps: int | None                # step ranges skipped per process (None: the analysis default)
    size: str
    strict: bool
    alpha: float
    machine_class: str | None             # overrides the detected machine class
    autostep: bool                        # NVTX ranges from hooks in the profiled process (perfgate.autostep)
    pytorch_trace: str                    # nsys --pytorch: off | auto | a mode list like functions-trace
    tolerances: dict[str, Tolerance] = field(default_factory=dict)         # [tool.perfgate.tolerance]
    option_tolerances: dict[str, Tolerance] = field(default_factory=dict)  # --perfgate-tolerance / --tolerance
    workloads: dict[str, WorkloadConfig] = field(default_factory=dict)
    selected: tuple[str, ...] = ()        # workloads named on the command line
    pyproject: Path | None = None


# --------------------------------------------------------------------------- options


def add_setting_options(add: Callable[..., Any], prefix: str = "") -> None:
    """Add an option per :data:`SETTINGS` row that has one, and the repeatable tolerance option.
    ``add`` is argparse's ``parser.add_argument`` (``prefix=""``: ``--launches``) or pytest's
    ``group.addoption`` (``prefix="perfgate-"``: ``--perfgate-launches``). A bad value is a usage
    error naming the option (the row's check); an absent one is None."""
    for s in SETTINGS:
        if s.option is None:
            continue
        default = ("found" if s.default is None else str(s.default).lower() if s.kind == "bool"
                   else f"{s.default:g}" if s.kind == "float" else s.default)
        where = f"default {default}; [tool.perfgate] {s.key}, {s.env}"
        if s.kind == "bool":
            add(s.flag(prefix), action="store_const", const=True, dest=s.dest(prefix), default=None,
                help=f"{s.help} ({where})")
            add(f"--no-{prefix}{s.option}", action="store_const", const=False, dest=s.dest(prefix), default=None,
                help=f"the opposite of {s.flag(prefix)}")
        else:
            add(s.flag(prefix), dest=s.dest(prefix), default=None, metavar=s.metavar, type=s.parse_option,
                help=f"{s.help} ({where})")
    add(f"--{prefix}{TOLERANCE_OPTION}", dest=(prefix + TOLERANCE_OPTION).replace("-", "_"), action="append",
        default=[], metavar="METRIC=SPEC",
        help="tolerance override, e.g. step_time_ms=5%% or 'phase.*.cpu_ms=10%%+0.5' (repeatable; beats "
             "the pyproject tables)")


def option_values(get: Callable[[str], Any], prefix: str = "") -> dict[str, Any]:
    """The options :func:`add_setting_options` added, read back with ``get(dest)``: the
    ``overrides`` of :func:`load_settings`."""
    values = {s.key: get(s.dest(prefix)) for s in SETTINGS if s.option is not None}
    values[TOLERANCE_OPTION] = list(get((prefix + TOLERANCE_OPTION).replace("-", "_")) or [])
    return values


def settings_from_options(get: Callable[[str], Any], prefix: str = "", *, root: Path | None = None,
                          start: Path | None = None, selected: Sequence[str] = (),
                          env: Mapping[str, str] | None = None) -> Settings:
    """Settings of the project at ``root`` (default: the nearest pyproject.toml at or above
    ``start``, the current directory by default) with the options read by ``get`` on top."""
    pyproject = find_pyproject(root or start or Path.cwd())
    if root is None:
        root = pyproject.parent if pyproject is not None else (start or Path.cwd())
    overrides = {**option_values(get, prefix), "selected": tuple(selected)}
    return load_settings(root, overrides=overrides, env=env, pyproject=pyproject, option_prefix=prefix)


def add_command_options(parser: Any) -> None:
    """The options of every ``perfgate`` command that runs workloads (``run``, ``baseline update``,
    ``ab``, ``calibrate``): ``--root`` and the settings' options (same meaning as the pytest ones)."""
    parser.add_argument("--root", type=Path, default=None, help="project folder (default: nearest pyproject.toml)")
    add_setting_options(parser.add_argument)


def settings_from_args(args: Any) -> Settings:
    """Settings for a ``perfgate`` command: pyproject/env with its options (add_command_options)
    and named workloads on top."""
    return settings_from_options(lambda dest: getattr(args, dest, None), "", root=getattr(args, "root", None),
                                 selected=getattr(args, "workloads", None) or ())


# --------------------------------------------------------------------------- resolving


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


def _renamed(table: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``table`` with its renamed keys under their new names (both at once is an error)."""
    out = dict(table)
    for old, new in RENAMED.items():
        if old in out:
            if new in out:
                raise ConfigError(f"{where}: {old} and {new} are the same setting; keep {new}")
            out[new] = out.pop(old)
    return out


def load_settings(
    root: Path | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    pyproject: Path | None = None,
    option_prefix: str = PYTEST_PREFIX,
) -> Settings:
    """Resolve and check Settings for the project at ``root`` (default: the current directory).

    ``overrides`` holds option values (``None`` means "not given"); keys are :data:`SETTINGS`
    keys plus ``tolerance`` (``METRIC=SPEC`` strings, or a mapping metric -> spec) and
    ``selected`` (workload names). ``option_prefix`` spells the options in errors
    (``option --perfgate-launches``; ``""`` for the ``perfgate`` command's ``--launches``)."""
    overrides = dict(overrides or {})
    env = os.environ if env is None else env
    pyproject = pyproject or find_pyproject(root or Path.cwd())
    root = (root or (pyproject.parent if pyproject else Path.cwd())).resolve()
    where = f"{pyproject} [tool.perfgate]" if pyproject else "[tool.perfgate]"
    raw_table = read_table(pyproject) if pyproject else {}
    unknown = sorted(set(raw_table) - TABLE_KEYS)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(TABLE_KEYS))})")
    table = _renamed(raw_table, where)

    values: dict[str, Any] = {}
    for s in SETTINGS:
        old = next((o for o, n in RENAMED.items() if n == s.key), None)
        env_names = [s.env, *([ENV_PREFIX + old.upper()] if old else [])]
        env_name = next((n for n in env_names if env.get(n, "") != ""), None)
        if overrides.get(s.key) is not None:
            flag = s.flag(option_prefix) if s.option else f"--{s.key}"
            source, raw = f"option {flag}", overrides[s.key]
        elif env_name is not None:
            source, raw = f"environment variable {env_name}", env[env_name]
        elif s.key in table:
            key = old if old in raw_table else s.key
            source, raw = f"{where} {key}", table[s.key]
        else:
            values[s.key] = (root / s.default).resolve() if s.kind == "path" else s.default
            continue
        value = s.value(raw, source)
        values[s.key] = (root / value).resolve() if s.kind == "path" and value is not None else value

    tolerances = parse_tolerances(table.get("tolerance", {}), f"{where.rstrip(']')}.tolerance]")
    flag = f"--{option_prefix}{TOLERANCE_OPTION}"
    given = overrides.get(TOLERANCE_OPTION) or {}
    if not isinstance(given, Mapping):
        given = dict(parse_tolerance_option(text, flag) for text in given)
    option_tolerances = parse_tolerances(given, f"option {flag}")
    workloads_table = table.get("workloads", {})
    if not isinstance(workloads_table, dict):
        raise ConfigError(f"{where} workloads: expected a table of workload tables")
    workloads = {
        name: parse_workload(name, spec, f"{pyproject or 'pyproject.toml'} [tool.perfgate.workloads.{name}]")
        for name, spec in workloads_table.items()
    }
    return Settings(
        root=root, tolerances=tolerances, option_tolerances=option_tolerances, workloads=workloads,
        selected=tuple(overrides.get("selected") or ()), pyproject=pyproject, **values,
    )


def parse_tolerances(table: Any, where: str) -> dict[str, Tolerance]:
    """Metric (or fnmatch pattern) -> Tolerance, each spec parsed by metrics.parse_tolerance."""
    if not isinstance(table, Mapping):
        raise ConfigError(f"{where}: expected a table of metric = \"tolerance\" entries")
    out: dict[str, Tolerance] = {}
    for metric, spec in table.items():
        if not isinstance(spec, str):
            raise ConfigError(f"{where} {metric}: expected a string like \"5%\" or \"5%+0.5\", got {spec!r}")
        out[str(metric)] = parse_tolerance(spec, f"{where} {metric}")
    return out


def parse_tolerance_option(text: str, flag: str = "--perfgate-tolerance") -> tuple[str, str]:
    """``METRIC=SPEC`` from ``--perfgate-tolerance`` / ``--tolerance`` (``flag``, for errors)."""
    metric, sep, spec = text.partition("=")
    if not sep or not metric.strip() or not spec.strip():
        raise ConfigError(f"option {flag}: expected METRIC=SPEC (e.g. step_time_ms=5%), got {text!r}")
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
        skip_steps=_skip_steps(spec, where),
        timeout_s=_optional(spec, "timeout_s", "float", where),
        tolerances=parse_tolerances(spec.get("tolerance", {}), f"{where} tolerance"),
        enabled=_coerce(spec.get("enabled", True), "bool", f"{where} enabled"),
        variants=variants,
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

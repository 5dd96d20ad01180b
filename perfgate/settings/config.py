"""Settings: the gate's configuration, declared once and resolved once per run.

:data:`SETTINGS` is the one declaration of every global setting: its ``[tool.perfgate]`` key (and
``Settings`` field), kind, default, check and help, and whether it is a command-line option.
The pytest options (``--perfgate-<name>``) and the ``perfgate`` command's options (``--<name>``)
are both built from it by :func:`add_setting_options` (the way pytest-benchmark shares option
builders between its plugin and its CLI), and :func:`load_settings` resolves and checks every
value before anything runs, naming where a bad value came from.

Precedence, highest first: command-line / pytest option > environment ``PERFGATE_<KEY>`` >
``[tool.perfgate]`` in pyproject.toml > default; ``launches`` is the default of the three launch
counts, each of which keeps a value of its own set where the precedence is higher. Tolerances: an
option (``--perfgate-tolerance METRIC=SPEC``) > the workload's ``[tool.perfgate.workloads.<name>] tolerance`` table > the
``[tool.perfgate.tolerance]`` table > the metric's default; a metric takes its tolerance from the
first of these with an entry for it (its exact name, else the longest matching pattern).
"""
from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from shlex import quote
from typing import Any

from perfgate.errors import ConfigError
from perfgate.gate.metric_specs import alpha_problem
from perfgate.gate.sequential_looks import LaunchBudget
from perfgate.records.model import Tolerance
from perfgate.records.safe_names import MAX_LENGTH, RULE, is_safe_name
from perfgate.settings.pyproject import (
    WorkloadConfig, coerce, find_pyproject, parse_tolerances, parse_workload, read_table,
)

ENV_PREFIX = "PERFGATE_"
PYTEST_PREFIX = "perfgate-"
#: Precedence of a setting's sources, highest wins: an option, the environment, pyproject, the default.
OPTION, ENVIRONMENT, PYPROJECT, DEFAULT = 3, 2, 1, 0
#: What a fixed design (``launches``) sets, unless set where the precedence is higher.
LAUNCH_COUNTS = ("min_launches", "max_launches", "record_launches")
SIZES = ("auto", "cpu", "gpu")
_LIST = r"[a-z0-9\-]+(,[a-z0-9\-]+)*"


def _one_of(*choices: str) -> Callable[[Any], str | None]:
    return lambda v: None if v in choices else f"expected one of {', '.join(choices)}"


def _at_least(low: float, what: str) -> Callable[[Any], str | None]:
    return lambda v: None if v >= low else f"expected {what}"


#: The most launches any count may ask for: every look of the gate tests at a level that falls with
#: the number of looks (perfgate.gate.sequential_looks.look_level; alpha / looks beyond 40), so a count with a
#: few zeros too many would make it unable to decide and let it launch for ever.
MAX_LAUNCHES = 1000


def _launch_count(v: int) -> str | None:
    if v < 1:
        return "expected a whole number >= 1"
    return None if v <= MAX_LAUNCHES else f"expected a whole number <= {MAX_LAUNCHES}"


def _budget(v: float) -> str | None:
    return None if v >= 0 and math.isfinite(v) else "expected a number of seconds >= 0 (0: no limit)"


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

    def value(self, raw: Any, where: str, *, typed: bool = False) -> Any:
        """``raw`` (from an option, the environment or the table) converted and checked;
        ConfigError naming ``where``. ``typed``: a pyproject value, which must already be of its
        TOML type (perfgate.settings.pyproject.coerce)."""
        value = coerce(raw, self.kind, where, typed=typed)
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
#: (tests/settings/test_config.py checks that the two agree).
SETTINGS: tuple[Setting, ...] = (
    Setting("workloads_dir", "path", "workloads", "folder whose <name>.py files are workloads"),
    Setting("baseline_dir", "path", "baselines", "baseline folder", "baseline-dir", "DIR"),
    Setting("artifacts_dir", "path", ".perfgate/runs", "where nsys reports and logs go", "artifacts-dir", "DIR"),
    Setting("report_dir", "path", ".perfgate/report", "where junit/markdown/json reports go", "report-dir", "DIR"),
    Setting("nsys", "str", None, "the nsys executable", "nsys", "PATH"),
    Setting("trace", "str", "auto", "nsys --trace set of every launch (auto: nvtx for timing launches, "
            "cuda,nvtx for the profile launch)",
            "trace", "LIST", _trace),
    Setting("capture_range", "str", "none", "none, cudaProfilerApi or nvtx:<range name>", check=_capture_range),
    Setting("timeout_s", "float", 900.0, "timeout per launch, in seconds", "timeout", "SECONDS",
            lambda v: None if v > 0 else "expected a positive number"),
    Setting("launches", "int", None, "a fixed design: exactly N timing launches per workload, recording "
            "included (the default of min_launches, max_launches and record_launches)",
            "launches", "N", _launch_count),
    Setting("min_launches", "int", 1, "timing launches before the first look (perfgate.gate.sequential_looks)",
            "min-launches", "N", _launch_count),
    Setting("max_launches", "int", 10, "most timing launches per workload: one more per look while the verdict "
            "is unclear", "max-launches", "N", _launch_count),
    Setting("record_launches", "int", 5, "timing launches recorded into a new baseline",
            "record-launches", "N", _launch_count),
    Setting("budget_s", "float", 0.0, "no new launch of a workload after this many seconds (0: no limit)",
            "budget", "SECONDS", _budget),
    Setting("profile", "str", "auto", "the CUDA-traced profile launch for GPU metrics and the diagnosis, with a "
            "GPU: auto (when recording and when the timing launches did not PASS), always or off",
            "profile", "{auto,always,off}",
            lambda v: None if v in ("auto", "always", "off") else "expected auto, always or off"),
    Setting("confirm", "str", "auto", "before a verdict fails, stays unclear or says faster, measure the base of "
            "the change in the same job, interleaved launch by launch with this checkout, and decide on those pairs: "
            "auto (when the stored baseline's verdict is REGRESSED, INCONCLUSIVE or IMPROVED, and a PASS of a "
            "workload too noisy for its tolerance, which the pairs can only fail), always or never",
            "confirm", "{auto,always,never}", _one_of("auto", "always", "never")),
    Setting("confirm_base", "str", "auto", "the base of the change, which the confirmation measures and staleness "
            "compares the baseline with: a ref whose merge-base with HEAD is the base (the branch the change merges "
            "into, such as origin/main, or a commit before it), or auto: the merge-base of HEAD with "
            "$GITHUB_BASE_REF in a pull request's job, else the commit the baseline was recorded from "
            "(confirmation only)", "confirm-base", "REF",
            lambda v: None if v.strip() else "expected auto or a git ref"),
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
    Setting("threads", "int", None, "the profiled workload's CPU threads: OMP_NUM_THREADS and MKL_NUM_THREADS "
            "in its environment (torch's intra-op threads; unset: as perfgate's own environment has them). 1 "
            "steadies a CPU workload's step time on a machine that other processes share (docs/ci.md); "
            "its step times change with it: record the baselines again", "threads", "N",
            _at_least(1, "a whole number >= 1")),
    Setting("pytorch_trace", "str", "off", "nsys --pytorch: off, auto or a mode list like functions-trace",
            check=_pytorch_trace),
    Setting("cuda_memory_usage", "bool", True, "nsys --cuda-memory-usage=true with CUDA tracing (peak GPU memory)"),
    Setting("history_dir", "path", None, "opt in: one JSON line per run and workload (perfgate.commands.history)"),
)
SETTING = {s.key: s for s in SETTINGS}
#: Keys a table may still use for a setting that was renamed: old -> new.
RENAMED = {"warmup_steps": "skip_steps"}
TABLE_KEYS = frozenset(SETTING) | frozenset(RENAMED) | {"tolerance", "workloads"}
TOLERANCE_OPTION = "tolerance"


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
    trace: str                            # "auto": timing launches nvtx, a CUDA profile launch on a GPU
    capture_range: str                    # none | cudaProfilerApi | nvtx:<range name>
    timeout_s: float
    launches: int | None                  # a fixed design of N launches: min = max = record = N
    min_launches: int                     # timing launches before the first look (perfgate.gate.sequential_looks)
    max_launches: int                     # timing launches at most, one more per look while INCONCLUSIVE
    record_launches: int                  # timing launches recorded into a new baseline
    budget_s: float                       # no new launch after this many seconds (0: no limit)
    profile: str                          # the CUDA profile launch: auto (record; gate runs that did not PASS) | always | off
    confirm: str                          # the base measured in this job before failing: auto | always | never
    confirm_base: str                     # the ref it measures: auto (the PR's merge-base, else the baseline's commit) | a ref
    skip_steps: int | None                # step ranges skipped per process (None: the analysis default)
    size: str
    strict: bool
    alpha: float
    machine_class: str | None             # overrides the detected machine class
    autostep: bool                        # NVTX ranges from hooks in the profiled process (capture/autostep/)
    threads: int | None                   # the profiled workload's OMP_NUM_THREADS / MKL_NUM_THREADS (None: as inherited)
    pytorch_trace: str                    # nsys --pytorch: off | auto | a mode list like functions-trace
    cuda_memory_usage: bool               # nsys --cuda-memory-usage=true with CUDA tracing (peak GPU memory)
    history_dir: Path | None              # opt in: one JSON line per run and workload (perfgate.commands.history)
    tolerances: dict[str, Tolerance] = field(default_factory=dict)         # [tool.perfgate.tolerance]
    option_tolerances: dict[str, Tolerance] = field(default_factory=dict)  # --perfgate-tolerance / --tolerance
    workloads: dict[str, WorkloadConfig] = field(default_factory=dict)
    selected: tuple[str, ...] = ()        # workloads named on the command line
    pyproject: Path | None = None
    sources: dict[str, str] = field(default_factory=dict)   # key -> where its value came from (errors name it)
    option_prefix: str = PYTEST_PREFIX    # how the command in use spells its options: "perfgate-" (pytest) or ""

    @property
    def budget(self) -> LaunchBudget:
        """The launches a gate run may take (perfgate.gate.sequential_looks)."""
        return LaunchBudget(self.min_launches, self.max_launches, self.budget_s)

    @property
    def under_pytest(self) -> bool:
        """Whether the command in use is ``pytest --perfgate`` (else ``perfgate``)."""
        return self.option_prefix == PYTEST_PREFIX

    def option(self, key: str) -> str:
        """A setting's option as the command in use spells it: ``--timeout`` under ``perfgate``,
        ``--perfgate-timeout`` under pytest; a setting without an option by its pyproject key."""
        s = SETTING[key]
        return s.flag(self.option_prefix) if s.option is not None else f"{key} in [tool.perfgate]"

    def record_command(self, name: str | None = None) -> str:
        """How the command in use records the baseline of workload ``name`` (of every enabled one
        without a name)."""
        if self.under_pytest:
            return "pytest --perfgate --perfgate-update-baselines" + (f" --perfgate-workload {quote(name)}" if name else "")
        return "perfgate baseline update" + (f" {quote(name)}" if name else "")


# --------------------------------------------------------------------------- resolving


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
    options: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve and check Settings for the project at ``root`` (default: the current directory).

    ``overrides`` holds option values (``None`` means "not given"); keys are :data:`SETTINGS`
    keys plus ``tolerance`` (``METRIC=SPEC`` strings, or a mapping metric -> spec) and
    ``selected`` (workload names). ``option_prefix`` spells the options in errors
    (``option --perfgate-launches``; ``""`` for the ``perfgate`` command's ``--launches``);
    ``options`` names a key's option as the caller offers it where it differs
    (``{"timeout_s": "--timeout"}``). ``Settings.sources`` says where each value came from."""
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

    options = dict(options or {})
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    levels: dict[str, int] = {}           # where each value came from: OPTION, ENVIRONMENT, PYPROJECT, DEFAULT
    for s in SETTINGS:
        old = next((o for o, n in RENAMED.items() if n == s.key), None)
        env_names = [s.env, *([ENV_PREFIX + old.upper()] if old else [])]
        env_name = next((n for n in env_names if env.get(n, "") != ""), None)
        typed = False                     # a pyproject value must be of its TOML type
        if overrides.get(s.key) is not None:
            flag = options.get(s.key) or (s.flag(option_prefix) if s.option else f"--{s.key}")
            source, raw, levels[s.key] = f"option {flag}", overrides[s.key], OPTION
        elif env_name is not None:
            source, raw, levels[s.key] = f"environment variable {env_name}", env[env_name], ENVIRONMENT
        elif s.key in table:
            key = old if old in raw_table else s.key
            source, raw, typed, levels[s.key] = f"{where} {key}", table[s.key], True, PYPROJECT
        else:
            values[s.key] = (root / s.default).resolve() if s.kind == "path" and s.default is not None else s.default
            sources[s.key], levels[s.key] = "default", DEFAULT
            continue
        sources[s.key] = source
        value = s.value(raw, source, typed=typed)
        values[s.key] = (root / value).resolve() if s.kind == "path" and value is not None else value

    values, sources = _fixed_design(values, sources, levels)
    if values["max_launches"] < values["min_launches"]:
        raise ConfigError(f"max_launches ({values['max_launches']}) is below min_launches ({values['min_launches']}): "
                          "the most launches a run may take must be at least the launches it starts with "
                          f"(max_launches from {sources['max_launches']}, min_launches from {sources['min_launches']})")

    tolerances = parse_tolerances(table.get("tolerance", {}), f"{where.rstrip(']')}.tolerance]")
    flag = options.get(TOLERANCE_OPTION) or f"--{option_prefix}{TOLERANCE_OPTION}"
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
        selected=tuple(overrides.get("selected") or ()), pyproject=pyproject, sources=sources,
        option_prefix=option_prefix, **values,
    )


def _fixed_design(values: Mapping[str, Any], sources: Mapping[str, str],
                  levels: Mapping[str, int]) -> tuple[dict[str, Any], dict[str, str]]:
    """``values`` and ``sources`` with ``launches`` (a fixed design of N launches) as the default of
    the three launch counts: a count set where the precedence is higher (an option above the
    environment above pyproject) keeps its own value; one set at the same level with another value
    is a ConfigError naming both; the others take N (their source says so)."""
    values, sources = dict(values), dict(sources)
    n = values["launches"]
    if n is None:
        return values, sources
    for key in LAUNCH_COUNTS:
        if levels[key] > levels["launches"]:
            continue
        if levels[key] == levels["launches"] and values[key] != n:
            raise ConfigError(f"{sources['launches']} ({n}) and {sources[key]} ({values[key]}) disagree: launches "
                              f"sets {key} too; give one of the two")
        values[key] = n
        sources[key] = f"{sources['launches']} (launches sets {key})"
    return values, sources


def parse_tolerance_option(text: str, flag: str = "--perfgate-tolerance") -> tuple[str, str]:
    """``METRIC=SPEC`` from ``--perfgate-tolerance`` / ``--tolerance`` (``flag``, for errors)."""
    metric, sep, spec = text.partition("=")
    if not sep or not metric.strip() or not spec.strip():
        raise ConfigError(f"option {flag}: expected METRIC=SPEC (e.g. step_time_ms=5%), got {text!r}")
    return metric.strip(), spec.strip()



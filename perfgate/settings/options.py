"""The settings on the command line: the pytest options (``--perfgate-<name>``) and the
``perfgate`` command's options (``--<name>``), both built from perfgate.settings.config.SETTINGS, the one
declaration of every setting (the way pytest-benchmark shares option builders between its plugin
and its CLI). A bad value is a usage error naming the option; an absent one is None, so that the
environment, pyproject and the default apply in that order (perfgate.settings.config.load_settings).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from perfgate.settings.config import SETTINGS, TOLERANCE_OPTION, Settings, load_settings
from perfgate.settings.pyproject import find_pyproject


def add_setting_options(add: Callable[..., Any], prefix: str = "") -> None:
    """Add an option per :data:`SETTINGS` row that has one, and the repeatable tolerance option.
    ``add`` is argparse's ``parser.add_argument`` (``prefix=""``: ``--launches``) or pytest's
    ``group.addoption`` (``prefix="perfgate-"``: ``--perfgate-launches``). A bad value is a usage
    error naming the option (the row's check); an absent one is None."""
    for s in SETTINGS:
        if s.option is None:
            continue
        unset = "found" if s.key == "nsys" else "unset"
        default = (unset if s.default is None else str(s.default).lower() if s.kind == "bool"
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

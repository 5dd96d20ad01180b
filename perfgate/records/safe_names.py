"""Names that become path components: workload and variant names, machine classes.

A baseline lives at ``<baseline_dir>/<workload>[/<variant>]/<machine_class>.json`` and a run in
``<artifacts_dir>/<time>-<workload>``, so each of these names must stay one harmless path
component: letters, digits, ``_``, ``-`` and ``.``, not starting with ``.`` or ``-`` (no ``..``,
no hidden files, no option look-alikes), at most :data:`MAX_LENGTH` characters. The same rule
keeps them free of Markdown, HTML and newlines in the reports.
"""
from __future__ import annotations

import re

from perfgate.errors import ConfigError

MAX_LENGTH = 128
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
RULE = "letters, digits, '_', '-' and '.', not starting with '.' or '-'"


def is_safe_name(name: object) -> bool:
    """Whether ``name`` is a string usable as one path component (see the module docstring)."""
    return isinstance(name, str) and len(name) <= MAX_LENGTH and _SAFE.fullmatch(name) is not None


def check_name(name: object, where: str) -> str:
    """``name`` itself when :func:`is_safe_name`, else ConfigError naming ``where`` and the rule."""
    if not is_safe_name(name):
        raise ConfigError(f"{where}: {name!r} is not a safe name (use {RULE}; at most {MAX_LENGTH} characters)")
    assert isinstance(name, str)
    return name

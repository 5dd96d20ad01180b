"""The version of perfgate's record schema, and a record read back from its JSON form.

Every record perfgate writes as JSON carries ``"record_version": RECORD_VERSION``: the analysis
record (``Analysis.to_dict``: ``perfgate analyze --format json``, the analyses and profile of a
result), each launch record of a baseline file (``baseline.BaselineLaunch.to_dict``) and each
result record (``report.json_report.result_dict``: ``result.json``, the results of
``perfgate-report.json``). A record without it was written before the field existed and is read as
version 1; a newer version is refused (docs/schema.md says what each version changed).
"""
from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

from perfgate.errors import PerfgateError

#: The one version of the analysis, baseline launch and result records (docs/schema.md).
#: 2: ``step_time_ms`` is the median of runs' means (``steps.statistic``), no longer the median period.
RECORD_VERSION = 2
VERSION_KEY = "record_version"


def check_record_version(record: Mapping[str, Any], where: str,
                         error: type[PerfgateError] = PerfgateError) -> int:
    """The record's version (1 when it has none: written before the field existed); ``error``
    naming ``where`` for a version this perfgate cannot read."""
    version = record.get(VERSION_KEY, 1)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= RECORD_VERSION:
        raise error(f"{where}: {VERSION_KEY} {version!r} is not supported by this perfgate (it reads "
                    f"records up to version {RECORD_VERSION}); upgrade perfgate or re-record the file")
    return version


def from_record(cls: type[Any], data: Mapping[str, Any]) -> Any:
    """The dataclass ``cls`` back from ``dataclasses.asdict`` output: nested dataclasses and tuples
    rebuilt from their field types, keys that are not fields ignored, missing ones defaulted."""
    hints = _hints(cls)
    return cls(**{f.name: _value(hints[f.name], data[f.name])
                  for f in dataclasses.fields(cls) if f.name in data})


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved field types of ``cls`` (read once per class)."""
    if cls not in _HINTS:
        _HINTS[cls] = get_type_hints(cls)
    return _HINTS[cls]


def _value(kind: Any, value: Any) -> Any:
    if value is None:
        return None
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, types.UnionType):
        kind = next(a for a in args if a is not type(None))
        origin, args = get_origin(kind), get_args(kind)
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        return from_record(kind, value)
    if origin is tuple:
        return tuple(_value(args[0], v) for v in value)
    if origin is dict:
        return dict(value)
    return value

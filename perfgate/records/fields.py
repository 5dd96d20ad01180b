"""Reading a typed record back from the mapping its ``to_dict`` wrote (JSON read back): the record
of the mapping's fields when each value is of its field's kind and writing the record again gives
the mapping, else None, so that a value of another perfgate stays where it was read, as read.

Records layer (stdlib only).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import fields
from typing import Any, Protocol, TypeVar


class _Record(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Record)


def read_fields(cls: type[R], d: Any, derived: Iterable[str] = ()) -> R | None:
    """``cls`` of ``d``'s fields when ``d`` has exactly those keys and ``derived`` (what ``to_dict``
    adds), each field's value of its kind (a str, a bool, an int, a number, a list of such for a
    tuple, None only where the field may be), and ``to_dict`` of it gives ``d`` back; else None."""
    names = [f.name for f in fields(cls)]        # type: ignore[arg-type]
    if not isinstance(d, Mapping) or set(d) != {*names, *derived}:
        return None
    values = {}
    for f in fields(cls):                        # type: ignore[arg-type]
        value, kind = d[f.name], str(f.type)
        if value is None:
            if "None" not in kind:
                return None
        elif kind.startswith("tuple"):
            item = kind.removeprefix("tuple[").split(",")[0]
            if not (isinstance(value, (list, tuple)) and all(_of_kind(v, item) for v in value)):
                return None
            value = tuple(value)
        elif not _of_kind(value, kind):
            return None
        values[f.name] = value
    found = cls(**values)
    return found if _as_read(found.to_dict()) == _as_read(d) else None


def _of_kind(value: Any, kind: str) -> bool:
    """Whether ``value`` is of ``kind`` (a field's type, ``None`` aside): a str, a bool, an int (not a
    bool), else a number (not a bool)."""
    if kind.startswith("str"):
        return isinstance(value, str)
    if kind.startswith("bool"):
        return isinstance(value, bool)
    return not isinstance(value, bool) and isinstance(value, int if kind.startswith("int") else (int, float))


def _as_read(d: Mapping[str, Any]) -> dict[str, Any]:
    """``d`` with its tuples as lists, as JSON reads them back."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

"""How a baseline differs from the current run (``WorkloadResult.provenance``): the code it
measured, perfgate's record version and the machine's software; perfgate.baselines.provenance finds
the differences.

Records layer (stdlib only). A result record writes it under ``"extra"`` as ``"provenance"``
(``to_dict``, with its ``text``); ``from_dict`` reads it back.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Staleness:
    """How a baseline differs from the current run: its code (files changed, added, removed; the
    command line), perfgate's record version, and the machine's software. ``unknown`` says why the
    code could not be compared (a baseline without a fingerprint and without its commit)."""

    code: tuple[str, ...] = ()
    environment: tuple[str, ...] = ()
    unknown: str | None = None
    # the change under test: how this checkout differs from the base it was compared against (a
    # pull request's own edits), when the baseline was compared with that base; never stale
    edits: tuple[str, ...] = ()
    base: str | None = None               # that base's commit

    @property
    def stale(self) -> bool:
        return bool(self.code or self.environment or self.unknown)

    @property
    def other_code(self) -> bool:
        return bool(self.code)

    def text(self) -> str:
        """One sentence, empty when nothing differs: the code first, then the software."""
        if not self.stale:
            return ""
        parts = [*self.code, *self.environment]
        if self.code:
            head = "the baseline was recorded from other code"
        elif self.unknown:
            head = f"the baseline does not record which code it measured ({self.unknown})"
        else:
            head = "the baseline was recorded with other software"
        return head + (": " + "; ".join(parts) if parts else "") + (
            f" ({self.unknown})" if self.code and self.unknown else "")

    def edits_text(self) -> str:
        """One line naming the change under test, empty when there is none known."""
        if not self.edits:
            return ""
        base = f" {self.base[:12]}" if self.base else ""
        return f"the change under test, against the base{base}: " + "; ".join(self.edits)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"code": list(self.code), "environment": list(self.environment), "unknown": self.unknown,
                             "text": self.text()}
        if self.base is not None:   # a record without a base is written as before bases were known
            d.update(edits=list(self.edits), base=self.base)
        return d

    @classmethod
    def from_dict(cls, d: Any) -> Staleness | None:
        """The Staleness of ``d`` when ``to_dict`` of it gives ``d`` back (its keys, kinds and
        text), else None."""
        keys = {"code", "environment", "unknown", "text"}
        if not isinstance(d, Mapping) or set(d) not in (keys, keys | {"edits", "base"}):
            return None
        code, environment, unknown = d["code"], d["environment"], d["unknown"]
        edits, base = d.get("edits", []), d.get("base")
        if not (_strings(code) and _strings(environment) and _strings(edits) and (unknown is None or isinstance(unknown, str))
                and (base is None or isinstance(base, str))):
            return None
        found = cls(tuple(code), tuple(environment), unknown, tuple(edits), base)
        return found if found.to_dict() == dict(d) else None


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)

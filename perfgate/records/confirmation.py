"""What the confirmation against the base decided (``WorkloadResult.confirmation``): the base it
measured in the same job and how it was found, the stored baseline's verdict it was asked to
confirm, the interleaved pairs' verdict and step times, and why none ran when none did;
perfgate.pipeline.confirmation makes it.

Records layer (stdlib only). A result record writes it under ``"extra"`` as ``"confirmation"``
(``to_dict``: its fields, by name); ``from_dict`` reads it back.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any


@dataclass(frozen=True)
class Confirmation:
    """The stored baseline's verdict and, when the base was measured, the pairs' verdict (which
    decides). ``skipped``: why no pair was measured (no base, a base that would not run).
    ``vouch``: the pairs checked a stored PASS of a workload too noisy for its stored baseline to
    vouch for: they decide only when they fail it (``decided``), else the stored PASS stands."""

    stored_verdict: str                     # the verdict against the stored baseline
    stored_summary: str                     # its one line
    base_commit: str | None = None          # the commit measured as the base
    base_how: str | None = None             # how it was found (the pull request's merge-base, ...)
    verdict: str | None = None              # the pairs' verdict; None: none measured
    summary: str | None = None              # its one line
    pairs: int = 0
    order: tuple[str, ...] = ()             # "base-0", "head-0", "head-1", "base-1", ...
    base_step_ms: tuple[float, ...] = ()    # each pair's step_time_ms, base and head
    head_step_ms: tuple[float, ...] = ()
    interval_ratio: float | None = None     # the paired interval's width / the unpaired one's
    level: float | None = None              # each look's level (Pocock's, over the pairs' looks)
    stopped: str | None = None              # why the rounds stopped
    skipped: str | None = None              # why none was measured
    machine: str | None = None              # how the machine differed from the baseline's recording
    vouch: bool = False                     # the pairs checked a stored PASS (they decide only to fail it)

    @property
    def decided(self) -> bool:
        """Whether the pairs decided the verdict."""
        return self.verdict is not None and (not self.vouch or self.verdict == "REGRESSED")

    def lines(self) -> tuple[str, ...]:
        """What a result says of it, a line each: which comparison decided, against which base;
        the stored baseline's verdict; the machine's difference; how much pairing narrowed the
        interval."""
        noisy = "the workload is too noisy for one launch against its stored baseline to vouch for a PASS"
        if self.verdict is None:
            return (f"not {'checked' if self.vouch else 'confirmed'} against the base ({self.skipped or 'no pair measured'}"
                    f"{'; ' + noisy if self.vouch else ''}): the stored baseline decided",)
        commit = f" {self.base_commit[:12]}" if self.base_commit else ""
        pairs = (f"{self.pairs} interleaved pair{'s' if self.pairs != 1 else ''} of launches of the base{commit} "
                 f"({self.base_how}) and this checkout, measured in this job ({self.stopped})")
        if not self.decided:
            return (f"checked by {pairs}, as {noisy}: {self.summary}; the stored baseline's PASS stands",)
        out = [f"decided by {pairs}" + (f", as {noisy}" if self.vouch else ""),
               f"against the stored baseline alone: {self.stored_summary}"]
        if self.machine:
            out.append(self.machine)
        if self.interval_ratio is not None:
            out.append(f"pairing: the interval of step_time_ms is {self.interval_ratio:.2f}x as wide as with the "
                       "same launches unpaired")
        return tuple(out)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        return {**d, "order": list(self.order), "base_step_ms": list(self.base_step_ms),
                "head_step_ms": list(self.head_step_ms)}

    @classmethod
    def from_dict(cls, d: Any) -> Confirmation | None:
        """The Confirmation of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        names = {f.name for f in fields(cls)}
        if not isinstance(d, Mapping) or set(d) not in (names, names - {"vouch"}):   # written before vouch was
            return None
        d = {"vouch": False, **d}
        try:
            found = cls(**{**d, "order": tuple(d["order"]), "base_step_ms": tuple(d["base_step_ms"]),
                           "head_step_ms": tuple(d["head_step_ms"])})
        except TypeError:
            return None
        return found if found.to_dict() == dict(d) and _kinds(found) and isinstance(found.vouch, bool) else None


def _kinds(c: Confirmation) -> bool:
    texts = (c.base_commit, c.base_how, c.verdict, c.summary, c.stopped, c.skipped, c.machine)
    numbers = (c.interval_ratio, c.level)
    return (isinstance(c.stored_verdict, str) and isinstance(c.stored_summary, str)
            and all(t is None or isinstance(t, str) for t in texts)
            and all(n is None or (isinstance(n, (int, float)) and not isinstance(n, bool)) for n in numbers)
            and isinstance(c.pairs, int) and not isinstance(c.pairs, bool)
            and all(isinstance(o, str) for o in c.order)
            and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (*c.base_step_ms, *c.head_step_ms)))

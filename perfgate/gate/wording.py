"""How perfgate writes a comparison, in one wording wherever it appears (the comparison's summary
line, the terminal, Markdown, JUnit, annotations, commit statuses):

    phase.forward.cpu_ms +48.3 % (4.10 ms -> 6.08 ms, tolerance 10 % and 0.500 ms, p=0.001, CI [+31.0 %, +66.2 %])
    gpu_idle_fraction +18.4 pp (44.1 % -> 62.5 %, tolerance 3 pp, p=0.0008, CI [+12.0 pp, +24.9 pp])

Values carry their unit (a fraction as a percentage), a change is relative (``%``), in
percentage points for a fraction (``pp``), or in the metric's unit when there is no relative
change (a baseline of 0); a confidence interval is written like the change it bounds. A tolerance
is its relative and absolute parts, both of which must be exceeded to fail (``10 % and 0.500 ms``).
"""
from __future__ import annotations

import math

from perfgate.records.model import MetricComparison, Tolerance

FRACTION = "fraction"


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def fmt_number(value: float | None, digits: int = 3) -> str:
    """``value`` with ``digits`` significant figures (at least 1 decimal below 1000); "-" for None."""
    if not _finite(value):
        return "-" if value is None else str(value)
    assert value is not None
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{min(decimals, 6)}f}"


def fmt_value(value: float | None, unit: str) -> str:
    """A metric value with its unit: ``12.3 ms``, ``4.5 %`` (fractions), ``2,113 samples/s``."""
    if value is None:
        return "-"
    if unit == FRACTION:
        return f"{value * 100:.1f} %"
    text = fmt_number(value)
    return f"{text} {unit}" if unit else text


def fmt_change(change: float | None) -> str:
    """Relative change as a signed percentage: ``+22.8 %``."""
    if not _finite(change):
        return "-"
    assert change is not None
    return f"{change * 100:+.1f} %"


def fmt_points(delta: float | None) -> str:
    """A change of a fraction in signed percentage points: ``+18.4 pp``."""
    if not _finite(delta):
        return "-"
    assert delta is not None
    return f"{delta * 100:+.1f} pp"


def fmt_metric_change(c: MetricComparison) -> str:
    """A comparison's change: relative (``+22.8 %``), in percentage points for a fraction
    (``+18.4 pp``), or in the metric's unit without a relative change (``+2.00 calls``)."""
    if c.unit == FRACTION:
        return fmt_points(c.delta)
    if c.change is None and _finite(c.delta):
        assert c.delta is not None
        return ("+" if c.delta > 0 else "") + fmt_value(c.delta, c.unit)
    return fmt_change(c.change)


def fmt_tolerance(tol: Tolerance, unit: str) -> str:
    """``5 %``, ``0.200 ms`` or ``5 % and 0.200 ms`` (both must be exceeded to fail); ``3 pp`` for a
    fraction's absolute part; ``off``; ``-`` for none."""
    if tol.rel is not None and math.isinf(tol.rel):
        return "off"
    parts = []
    if tol.rel is not None:
        parts.append(f"{tol.rel * 100:g} %")
    if tol.abs is not None:
        parts.append(f"{tol.abs * 100:g} pp" if unit == FRACTION else fmt_value(tol.abs, unit))
    return " and ".join(parts) if parts else "-"


def fmt_interval(c: MetricComparison) -> str:
    """``CI [+4.1 %, +9.0 %]`` in the terms of the change (pp for a fraction), or ""."""
    if c.ci_low is None or c.ci_high is None:
        return ""
    if c.unit == FRACTION:  # ci_* are relative to the baseline: back to a difference of fractions
        if c.baseline is None:
            return ""
        return f"CI [{fmt_points(c.ci_low * c.baseline)}, {fmt_points(c.ci_high * c.baseline)}]"
    return f"CI [{fmt_change(c.ci_low)}, {fmt_change(c.ci_high)}]"


def fmt_stats(c: MetricComparison) -> str:
    """``p=0.003, CI [+4.1 %, +9.0 %]`` when the comparison carries them, else ""."""
    parts = [f"p={c.p_value:.2g}"] if c.p_value is not None else []
    if interval := fmt_interval(c):
        parts.append(interval)
    return ", ".join(parts)


def describe(c: MetricComparison) -> str:
    """``phase.forward.cpu_ms +48.3 % (4.10 ms -> 6.08 ms, tolerance 10 %, p=0.001)``."""
    extra = fmt_stats(c)
    return (f"{c.metric} {fmt_metric_change(c)} ({fmt_value(c.baseline, c.unit)} -> "
            f"{fmt_value(c.current, c.unit)}, tolerance {fmt_tolerance(c.tolerance, c.unit)}"
            f"{', ' + extra if extra else ''})")

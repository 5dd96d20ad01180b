"""Change points in a workload's history: where on the main branch the step time moved, and by how much.

Pure: takes one sequence of runs (each a list of its launches' step times, in run order) and returns
the change points between runs. The method is Otava's E-divisive means (docs/bisect.md; Fleming et
al., ICPE 2023, research notes stats.md 1.2), on launch values rather than one value per run:

1. **Location** (binary segmentation): in a segment of runs, the split between two runs that
   maximises E-divisive's energy statistic (Matteson and James, exponent 1) of the launches' log
   step times before and after it: ``Q = m n / (m + n) (2 E|x - y| - E|x - x'| - E|y - y'|)``,
   robust to a single slow launch. Splits fall only between runs (a run's launches stay on one
   side). The pairwise distances take O(N^2) memory in the launches N (``--last`` bounds N).
2. **Significance**: Student's t-test (pooled variance, two-sided) of the two sides' log launch
   values, at ``max_pvalue`` (default 0.01) after a Bonferroni adjustment for the number of splits
   the segment offered, so that a series without any change raises a false alarm at most about
   ``max_pvalue`` of the time (the gate's false-alarm budget), not once per tried split.
3. **Magnitude**: a change smaller than ``min_magnitude`` (default 0.03: the gate's default
   step-time tolerance) is no change point, however significant.
4. **Merge** (Otava's second pass): each change point is tested again between its neighbours (the
   change points before and after it), and the weakest that no longer passes is dropped, until
   every one passes.

For each change point: the last run before and the first after (their commits), the size as the
relative change of the geometric mean (segment after vs segment before, each bounded by the
neighbouring change points) with a 95 % confidence interval, and whether the machine identity
(GPU, driver, CUDA, torch, nsys) differs between the two runs.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from perfgate.gate.statistics import shift_test

MAX_PVALUE = 0.01
MIN_MAGNITUDE = 0.03
#: The fields of a history entry's ``machine`` that make its identity (a change there explains a step)
IDENTITY_FIELDS = ("gpu_model", "gpu_count", "driver", "cuda", "torch", "nsys")


@dataclass(frozen=True)
class Run:
    """One run of the history: its launches' step times (ms), its commit and machine identity."""

    values: tuple[float, ...]
    commit: str | None = None
    time: str | None = None
    machine: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ChangePoint:
    """A change between run ``index - 1`` (the last before) and run ``index`` (the first after)."""

    index: int
    before_commit: str | None
    after_commit: str | None
    change: float                 # relative change of the geometric mean, after vs before
    ci_low: float                 # 95 % confidence interval of ``change``
    ci_high: float
    p_value: float                # two-sided, Bonferroni-adjusted over the splits tried
    runs_before: int
    runs_after: int
    machine_changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)   # field -> (before, after)

    @property
    def machine_changed(self) -> bool:
        return bool(self.machine_changes)

    def describe(self) -> str:
        where = f"{(self.before_commit or '-')[:10]} -> {(self.after_commit or '-')[:10]}"
        text = (f"run {self.index}: {where}: step time {self.change * 100:+.1f} % "
                f"(95 % CI {self.ci_low * 100:+.1f} .. {self.ci_high * 100:+.1f} %, p={self.p_value:.2g}, "
                f"{self.runs_before} run(s) before, {self.runs_after} after)")
        if self.machine_changes:
            moved = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(self.machine_changes.items()))
            text += f"; machine changed here: {moved}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "before_commit": self.before_commit, "after_commit": self.after_commit,
                "change": self.change, "ci_low": self.ci_low, "ci_high": self.ci_high, "p_value": self.p_value,
                "runs_before": self.runs_before, "runs_after": self.runs_after,
                "machine_changed": self.machine_changed,
                "machine_changes": {k: list(v) for k, v in self.machine_changes.items()}}


def _logs(runs: Sequence[Run], start: int, stop: int) -> list[float]:
    return [math.log(v) for r in runs[start:stop] for v in r.values]


def _test(runs: Sequence[Run], start: int, split: int, stop: int, splits: int) -> tuple[float, float, float] | None:
    """(|t|, adjusted two-sided p, change) of runs[start:split] vs runs[split:stop]; None untestable."""
    before, after = _logs(runs, start, split), _logs(runs, split, stop)
    test = shift_test(before, after, log_scale=False)
    if test is None:
        return None
    p = min(1.0, 2.0 * min(test.p_increase, test.p_decrease) * splits)
    return abs(test.t), p, math.expm1(test.estimate)


class _Energy:
    """E-divisive's energy statistic (exponent 1) of any split of runs[start:stop], from prefix
    sums of the launches' pairwise distances (of log step times): O(1) per split after O(N^2)."""

    def __init__(self, runs: Sequence[Run]) -> None:
        logs = np.array(_logs(runs, 0, len(runs)), dtype=float)
        self.offsets = np.concatenate([[0], np.cumsum([len(r.values) for r in runs])]).astype(int)
        prefix = np.zeros((logs.size + 1, logs.size + 1))
        prefix[1:, 1:] = np.abs(logs[:, None] - logs[None, :]).cumsum(0).cumsum(1)
        self.prefix = prefix

    def _block(self, a: int, b: int, c: int, d: int) -> float:
        p = self.prefix
        return float(p[b, d] - p[a, d] - p[b, c] + p[a, c])

    def q(self, start: int, split: int, stop: int) -> float:
        """Q = m n / (m + n) (2 mean|x - y| - mean|x - x'| - mean|y - y'|), x before, y after."""
        a, k, e = (int(self.offsets[i]) for i in (start, split, stop))
        m, n = k - a, e - k
        if m == 0 or n == 0:
            return 0.0
        within_x = self._block(a, k, a, k) / (m * (m - 1)) if m > 1 else 0.0
        within_y = self._block(k, e, k, e) / (n * (n - 1)) if n > 1 else 0.0
        return m * n / (m + n) * (2 * self._block(a, k, k, e) / (m * n) - within_x - within_y)


def _best_split(runs: Sequence[Run], start: int, stop: int, energy: _Energy) -> tuple[int, float, float] | None:
    """(split, adjusted p, change) of the split of runs[start:stop] with the largest energy statistic."""
    splits = stop - start - 1
    best = max(range(start + 1, stop), key=lambda split: energy.q(start, split, stop))
    found = _test(runs, start, best, stop, splits)
    return None if found is None else (best, found[1], found[2])


def _passes(p: float, change: float, max_pvalue: float, min_magnitude: float) -> bool:
    return p < max_pvalue and abs(change) >= min_magnitude


def _segment(runs: Sequence[Run], start: int, stop: int, max_pvalue: float, min_magnitude: float,
             energy: _Energy) -> list[int]:
    """Binary segmentation of runs[start:stop] at a relaxed level (10 x max_pvalue, Otava's weak
    change points); the merge pass keeps those that hold at max_pvalue."""
    if stop - start < 2:
        return []
    found = _best_split(runs, start, stop, energy)
    if found is None or not _passes(found[1], found[2], min(1.0, 10 * max_pvalue), min_magnitude):
        return []
    split = found[0]
    return [*_segment(runs, start, split, max_pvalue, min_magnitude, energy), split,
            *_segment(runs, split, stop, max_pvalue, min_magnitude, energy)]


def _machine_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, tuple[Any, Any]]:
    if before is None or after is None:
        return {}
    return {k: (before.get(k), after.get(k)) for k in IDENTITY_FIELDS if before.get(k) != after.get(k)}


def change_points(runs: Sequence[Run], *, max_pvalue: float = MAX_PVALUE,
                  min_magnitude: float = MIN_MAGNITUDE) -> list[ChangePoint]:
    """The change points of ``runs`` (oldest first), in run order. Runs without a positive value
    are left out of the tests; a change point's index counts runs of ``runs``."""
    if not 0 < max_pvalue < 1:
        raise ValueError(f"max_pvalue must be in (0, 1), got {max_pvalue!r}")
    if min_magnitude < 0:
        raise ValueError(f"min_magnitude must be >= 0, got {min_magnitude!r}")
    kept = [k for k, r in enumerate(runs) if any(v > 0 for v in r.values)]
    used = [Run(tuple(v for v in runs[k].values if v > 0), runs[k].commit, runs[k].time, runs[k].machine)
            for k in kept]
    splits = _segment(used, 0, len(used), max_pvalue, min_magnitude, _Energy(used))
    while True:   # merge: re-test each between its neighbours, drop the weakest failing one
        bounds = [0, *splits, len(used)]
        tested = [(_test(used, bounds[i - 1], s, bounds[i + 1], bounds[i + 1] - bounds[i - 1] - 1), s)
                  for i, s in enumerate(splits, start=1)]
        failing = [(t[1] if t else 1.0, s) for t, s in tested
                   if t is None or not _passes(t[1], t[2], max_pvalue, min_magnitude)]
        if not failing:
            break
        splits.remove(max(failing)[1])
    bounds = [0, *splits, len(used)]
    out = []
    for i, s in enumerate(splits, start=1):
        before, after = _logs(used, bounds[i - 1], s), _logs(used, s, bounds[i + 1])
        ci = shift_test(before, after, log_scale=False, alpha=0.025)   # two-sided 95 %
        test = _test(used, bounds[i - 1], s, bounds[i + 1], bounds[i + 1] - bounds[i - 1] - 1)
        assert ci is not None and test is not None   # it passed the merge
        out.append(ChangePoint(
            index=kept[s], before_commit=used[s - 1].commit, after_commit=used[s].commit,
            change=math.expm1(ci.estimate), ci_low=math.expm1(ci.ci_low), ci_high=math.expm1(ci.ci_high),
            p_value=test[1], runs_before=s - bounds[i - 1], runs_after=bounds[i + 1] - s,
            machine_changes=_machine_changes(used[s - 1].machine, used[s].machine)))
    return out

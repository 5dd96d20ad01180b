"""Interval unions, gaps and per-group union lengths agree with a brute-force nanosecond bitmap."""
from __future__ import annotations

import numpy as np

from perfgate.analysis import intervals


def _bitmap(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> np.ndarray:
    covered = np.zeros(hi - lo, dtype=bool)
    for s, e in zip(starts, ends):
        covered[max(s, lo) - lo:max(min(e, hi) - lo, 0)] = True
    return covered


def test_union_merges_overlapping_and_touching_intervals_only() -> None:
    s, e = intervals.union(np.array([10, 0, 5, 30]), np.array([20, 5, 8, 31]))
    assert s.tolist() == [0, 10, 30] and e.tolist() == [8, 20, 31]


def test_gaps_include_the_leading_and_trailing_idle_parts_of_the_window() -> None:
    s, e = intervals.gaps(np.array([10, 40]), np.array([20, 50]), 0, 60)
    assert list(zip(s.tolist(), e.tolist())) == [(0, 10), (20, 40), (50, 60)]


def test_covered_length_matches_a_bitmap_on_random_intervals() -> None:
    rng = np.random.default_rng(1)
    for _ in range(50):
        starts = rng.integers(0, 1000, size=30)
        ends = starts + rng.integers(0, 80, size=30)
        lo, hi = 100, 900
        assert intervals.covered(starts, ends, lo, hi) == int(_bitmap(starts, ends, lo, hi).sum())
        gs, ge = intervals.gaps(starts, ends, lo, hi)
        assert int((ge - gs).sum()) == int((~_bitmap(starts, ends, lo, hi)).sum())


def test_overlap_length_counts_each_interval_inside_the_union_against_a_bitmap() -> None:
    """Overlapping intervals each count their own length inside the union (a copy overlapping
    kernels: analysis.facts); the union is the sorted disjoint one :func:`intervals.union` gives."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        s = rng.integers(0, 1000, size=20)
        e = s + rng.integers(0, 90, size=20)
        us, ue = intervals.union(*(lambda a: (a, a + rng.integers(0, 60, size=15)))(rng.integers(0, 1000, size=15)))
        inside = _bitmap(us, ue, 0, 1200)
        expected = sum(int(inside[a:b].sum()) for a, b in zip(s, e))
        assert intervals.overlap_length(s, e, us, ue) == expected
    assert intervals.overlap_length(np.array([0]), np.array([5]), np.array([], dtype=int), np.array([], dtype=int)) == 0


def test_union_length_by_group_counts_overlap_once_within_each_group() -> None:
    rng = np.random.default_rng(2)
    groups = rng.integers(0, 7, size=200)
    starts = rng.integers(0, 2000, size=200)
    ends = starts + rng.integers(1, 100, size=200)
    codes, lengths = intervals.union_length_by_group(groups, starts, ends)
    for code, length in zip(codes, lengths):
        m = groups == code
        assert length == int(_bitmap(starts[m], ends[m], 0, 2200).sum())
    assert sorted(codes.tolist()) == sorted(set(groups.tolist()))

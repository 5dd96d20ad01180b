"""Per-op work done a block at a time gives what the whole-array computation gives: blocks of a
few rows (so that groups, processes and steps straddle block edges) against brute force and against
one block holding everything."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perfgate.analysis import AnalysisOptions, analyze, intervals, periods, phases, steps
from perfgate.analysis.idle import _top_gaps, busy_intervals
from perfgate.analysis.kernel_sets import _dense_codes, _distinct
from perfgate.trace.api_calls import _add_counts
from perfgate.trace.columns import Columns
from perfgate.trace.export import load_trace
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"


def _bitmap_length(starts: np.ndarray, ends: np.ndarray) -> int:
    covered = np.zeros(int(ends.max()) + 1 if ends.size else 0, dtype=bool)
    for s, e in zip(starts, ends):
        covered[s:e] = True
    return int(covered.sum())


@pytest.mark.parametrize("block", [1, 3, 7, 1 << 20])
def test_union_length_by_group_in_blocks_matches_a_bitmap_and_skips_negative_groups(block: int) -> None:
    rng = np.random.default_rng(5)
    groups = rng.integers(-1, 6, size=300)
    groups[:120] = 2                                # one group much longer than a block
    starts = rng.integers(0, 3000, size=300)
    ends = starts + rng.integers(1, 200, size=300)
    codes, lengths = intervals.union_length_by_group(groups, starts, ends, block=block)
    assert codes.tolist() == sorted(set(groups.tolist()) - {-1})
    for code, length in zip(codes.tolist(), lengths.tolist()):
        m = groups == code
        assert length == _bitmap_length(starts[m], ends[m])


@pytest.mark.parametrize("in_place_from", [0, 1 << 30])   # without a permutation, and with one
def test_window_union_is_the_union_of_the_clipped_intervals(monkeypatch: pytest.MonkeyPatch,
                                                            in_place_from: int) -> None:
    monkeypatch.setattr(intervals, "IN_PLACE_FROM", in_place_from)
    monkeypatch.setattr(intervals, "BLOCK", 7)
    rng = np.random.default_rng(6)
    starts = rng.integers(0, 1000, size=80)
    ends = starts + rng.integers(0, 60, size=80)       # touching, nested and empty ones among them
    us, ue = intervals.window_union(starts, ends, 200, 700)
    ref_s, ref_e = intervals.union(*intervals.clip(starts, ends, 200, 700))
    assert us.tolist() == ref_s.tolist() and ue.tolist() == ref_e.tolist()
    assert int((ue - us).sum()) == intervals.covered(starts, ends, 200, 700)
    assert us.min() >= 200 and ue.max() <= 700 and (us[1:] > ue[:-1]).all()


@pytest.mark.parametrize("n", [1, 3, 50])
def test_top_gaps_hold_the_n_longest_gaps_in_time_order(n: int) -> None:
    rng = np.random.default_rng(7)
    starts = rng.integers(0, 5000, size=60)
    ends = starts + rng.integers(1, 40, size=60)
    us, ue = intervals.window_union(starts, ends, 100, 4900)
    gs, ge = intervals.gaps(starts, ends, 100, 4900)          # every gap, the reference
    cand_s, cand_e = _top_gaps(us, ue, 100, 4900, n)
    assert set(zip(cand_s.tolist(), cand_e.tolist())) <= set(zip(gs.tolist(), ge.tolist()))
    assert (np.diff(cand_s) > 0).all()
    longest = sorted((ge - gs).tolist(), reverse=True)[:n]
    assert sorted((cand_e - cand_s).tolist(), reverse=True)[:n] == longest


def test_open_instance_in_blocks_matches_a_scan_of_every_instance() -> None:
    rng = np.random.default_rng(8)
    start = np.arange(40) * 100
    inst = Columns({"pid": rng.integers(1, 3, size=40), "start": start, "end": start + rng.integers(10, 150, size=40)})
    pid = rng.integers(1, 4, size=500)                          # pid 3 has no instance
    t = rng.integers(0, 4200, size=500)
    got = phases.open_instance(inst, pid, t, block=7)
    assert got.tolist() == phases.open_instance(inst, pid, t, block=1 << 20).tolist()
    for k in range(t.size):   # the process's instance that started last by t, if still open at t
        begun = [i for i in range(len(inst)) if inst["pid"][i] == pid[k] and inst["start"][i] <= t[k]]
        last = max(begun, key=lambda i: inst["start"][i]) if begun else -1
        assert got[k] == (last if last >= 0 and t[k] <= inst["end"][last] else -1)
    assert (got[pid == 3] == -1).all() and (got >= 0).sum() > 100


def test_attribution_and_iteration_periods_do_not_depend_on_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    trace = load_trace(TRACES / "gpu-ddp-2proc" / "trace.sqlite")   # two processes, two GPUs
    whole = analyze(trace, AnalysisOptions(skip_steps=3))
    monkeypatch.setattr(periods, "BLOCK", 5)
    monkeypatch.setattr(phases, "BLOCK", 5)
    fresh = load_trace(TRACES / "gpu-ddp-2proc" / "trace.sqlite")
    sel = steps.select_steps(fresh.nvtx, None, 3, "t")
    launched, _ = fresh.gpu(sel.window)
    inst = phases.phase_instances(fresh.nvtx, sel.measured)
    busy = phases.attribute_gpu_time(inst, launched, block=5)
    assert busy.tolist() == phases.attribute_gpu_time(inst, launched).tolist()
    assert busy.sum() > 0
    blocked = analyze(fresh, AnalysisOptions(skip_steps=3))
    assert blocked.steps.durations_ms == whole.steps.durations_ms
    assert {k: p.gpu_ms for k, p in blocked.phases.items()} == {k: p.gpu_ms for k, p in whole.phases.items()}


def test_busy_intervals_are_one_union_per_device() -> None:
    trace = load_trace(TRACES / "gpu-ddp-2proc" / "trace.sqlite")
    ops = trace.ops
    busy = busy_intervals(ops, int(ops.start.min()), int(ops.end.max()))
    assert sorted(busy) == sorted(set(ops.device_id.tolist())) and len(busy) == 2
    for dev, (us, ue) in busy.items():
        mine = ops.device_id == dev
        assert int((ue - us).sum()) == intervals.covered(ops.start[mine], ops.end[mine], int(ops.start.min()),
                                                         int(ops.end.max()))


def test_dense_codes_and_distinct_equal_numpy_unique() -> None:
    names = np.array([7, -1, 3, 7, 3, 12, -1, 0], dtype=np.int32)
    codes, idx = _dense_codes(names)
    ref_codes, ref_idx = np.unique(names, return_inverse=True)
    assert codes.tolist() == ref_codes.tolist() and idx.tolist() == ref_idx.tolist()
    wide = np.array([5, 1 << 30, 5], dtype=np.int64)             # too wide for a bitmap: np.unique
    assert _dense_codes(wide)[0].tolist() == [5, 1 << 30]
    keys = np.array([9, 2, 9, 0, 2], dtype=np.int64)
    assert _distinct(keys, 10).tolist() == [0, 2, 9] == _distinct(keys, 1 << 28).tolist()


def test_api_call_counts_are_exact_integers_on_both_paths() -> None:
    acc: dict[int, int] = {5: 1}
    names = np.array([5, 9, 5, 5], dtype=np.int64)
    _add_counts(acc, names, None)
    assert acc == {5: 4, 9: 1}
    ns: dict[int, int] = {}
    big = np.array([2**60, 3, 2**60 + 1, 7], dtype=np.int64)     # past float precision: np.add.at
    _add_counts(ns, np.array([1, 2, 1, 2]), big)
    assert ns == {1: 2**61 + 1, 2: 10}
    wide: dict[int, int] = {}
    _add_counts(wide, np.array([0, 1 << 40, 0]), np.array([4, 5, 6]))   # ids far apart: np.unique
    assert wide == {0: 10, 1 << 40: 5}

"""NCCL communication per rank (perfgate/analysis/comm.py) on the committed 2-process DDP capture
(two H200s, NCCL): the NCCL kernels are those nsys's own kernel summary counts, and the communication
time, overlapped share and exposed time per step equal a plain computation in this file straight
from the SQLite export (SQL, then Python loops over every pair of intervals)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.analysis.comm import NCCL_KERNEL
from perfgate.analysis.intervals import overlap_length
from perfgate.analysis.intervals import union
from perfgate.gate.metric_specs import spec_for
from perfgate.records.model import Analysis
from layout import REPO, TESTS

TRACES = TESTS / "fixtures" / "traces"
DDP = TRACES / "gpu-ddp-2proc"
WARMUP = AnalysisOptions().skip_steps


def _rows(sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{DDP / 'trace.sqlite'}?mode=ro", uri=True) as con:
        return con.execute(sql).fetchall()


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _oracle() -> dict[int, dict[str, float]]:
    """Per process: its measured window from its ``step`` ranges (the analysis's default warm-up
    skipped, the last one only closing the window), its NCCL kernels launched in that window (the
    launching runtime call's start), their union, and its intersection with the union of every other
    kernel on the same GPU, summed over all pairs of intervals."""
    steps = _rows("SELECT (n.globalTid >> 24) & 16777215, n.start FROM NVTX_EVENTS n "
                  "LEFT JOIN StringIds s ON s.id = n.textId WHERE coalesce(n.text, s.value) = 'step' "
                  "AND n.eventType = 59 ORDER BY 1, 2")
    kernels = _rows("""
        SELECT (k.globalPid >> 24) & 16777215, k.deviceId, k.start, k."end", s.value, r.start
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName
        LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r
          ON r.correlationId = k.correlationId AND (r.globalTid >> 24) = (k.globalPid >> 24)""")
    out: dict[int, dict[str, float]] = {}
    for pid in sorted({p for p, _ in steps}):
        starts = [t for p, t in steps if p == pid]
        lo, hi, n = starts[WARMUP], starts[-1], len(starts) - WARMUP - 1
        comm = [(s, e, d) for p, d, s, e, name, launch in kernels
                if p == pid and name.startswith("nccl") and lo <= launch <= hi]
        device = {d for _, _, d in comm}
        assert len(device) == 1
        compute = _merged([(s, e) for _, d, s, e, name, _ in kernels if d in device and not name.startswith("nccl")])
        merged = _merged([(s, e) for s, e, _ in comm])
        total = sum(e - s for s, e in merged)
        overlapped = sum(max(0, min(ae, be) - max(a_s, bs)) for a_s, ae in merged for bs, be in compute)
        out[pid] = {"kernels": len(comm) / n, "comm_ms": total / 1e6 / n, "overlapped_ns": overlapped,
                    "total_ns": total, "exposed_ms": (total - overlapped) / 1e6 / n, "steps": n}
    return out


def test_nccl_kernels_are_the_nccl_rows_of_nsys_kernel_summary() -> None:
    csv = pd.read_csv(DDP / "cuda_gpu_kern_sum.csv")
    nsys = csv[csv["Name"].str.startswith("nccl")].set_index("Name")
    assert len(nsys) == 3                       # all-reduce, broadcast, all-gather
    # the same kernels by perfgate's pattern, and no other kernel of the capture matches it
    assert {n for n in csv["Name"] if NCCL_KERNEL.search(n)} == set(nsys.index)
    got = _rows("SELECT s.value, count(*), sum(k.\"end\" - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' GROUP BY 1")
    assert {n: (c, t) for n, c, t in got} == {n: (int(r["Instances"]), int(r["Total Time (ns)"]))
                                              for n, r in nsys.iterrows()}


def test_communication_per_rank_equals_a_plain_computation_over_the_export() -> None:
    a = analyze_trace(DDP / "trace.sqlite")
    want = _oracle()
    comm = a.comm
    assert comm is not None and [r.pid for r in comm.ranks] == sorted(want) == [r.pid for r in a.ranks]
    for r in comm.ranks:
        w = want[r.pid]
        assert r.kernels_per_step == w["kernels"]
        assert r.comm_ms == pytest.approx(w["comm_ms"], rel=1e-12)
        assert r.exposed_ms == pytest.approx(w["exposed_ms"], rel=1e-12)
    steps = sum(w["steps"] for w in want.values())
    total = sum(w["total_ns"] for w in want.values())
    overlapped = sum(w["overlapped_ns"] for w in want.values())
    assert comm.comm_ms == pytest.approx(total / 1e6 / steps, rel=1e-12)
    assert comm.exposed_ms == pytest.approx((total - overlapped) / 1e6 / steps, rel=1e-12)
    assert comm.overlap_fraction == pytest.approx(overlapped / total, rel=1e-12)
    # what the capture shows: 5 all-reduce buckets and 2 buffer broadcasts per step on each rank;
    # rank 1's all-reduces last longer (they wait for rank 0), a bit over half is overlapped
    assert comm.kernels_per_step == 7.0
    assert [round(r.comm_ms, 2) for r in comm.ranks] == [9.09, 15.25]
    assert [round(r.exposed_ms, 2) for r in comm.ranks] == [3.83, 6.53]
    assert round(comm.overlap_fraction, 3) == 0.574
    m = a.metrics()
    assert (m["comm_ms"], m["comm_exposed_ms"], m["comm_kernels_per_step"]) == (
        comm.comm_ms, comm.exposed_ms, comm.kernels_per_step)
    assert m["comm_overlap_fraction"] == comm.overlap_fraction
    assert not any(spec_for(k).gating for k in m if k.startswith("comm_"))
    assert Analysis.from_dict(a.to_dict()).comm == comm


def test_a_baseline_keeps_the_communication_for_the_diagnosis(tmp_path: Path) -> None:
    from perfgate.baselines.store import baseline_from_analyses, load_baseline, write_baseline
    from perfgate.records.model import MachineInfo

    a = analyze_trace(DDP / "trace.sqlite")
    machine = MachineInfo("test-x2", None, 2, None, None, None, None)
    written = write_baseline(tmp_path / "b.json", baseline_from_analyses("ddp", [a], machine, {}))
    assert load_baseline(written).launch_analyses[0].comm == a.comm


@pytest.mark.parametrize("fixture", ["gpu-transformer", "cpu-two-procs", "cpu-train-loop"])
def test_no_nccl_kernel_means_no_communication_metrics(fixture: str) -> None:
    a = analyze_trace(TRACES / fixture / "trace.sqlite")
    assert a.comm is None and "comm" not in a.to_dict()
    assert not any(k.startswith("comm_") for k in a.metrics())


def _brute(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    return sum(max(0, min(ae, be) - max(a_s, bs)) for a_s, ae in a for bs, be in b)


def test_overlap_length_of_two_unions_equals_every_pair_summed() -> None:
    rng = np.random.default_rng(19)
    for _ in range(200):
        sets = []
        for _ in range(2):
            n = int(rng.integers(0, 12))
            s = rng.integers(0, 200, n)
            sets.append(union(s, s + rng.integers(0, 40, n)))
        (a_s, a_e), (b_s, b_e) = sets
        assert overlap_length(a_s, a_e, b_s, b_e) == _brute(list(zip(a_s, a_e)), list(zip(b_s, b_e)))


# ----------------------------------------------------------------------------- the diagnosis's rules


@pytest.fixture(scope="module")
def ddp() -> tuple:
    """The capture's communication and its kernels by phase (TraceFacts), as the diagnosis reads them."""
    from perfgate.pipeline.inputs import analyze_file

    a = analyze_file(DDP / "trace.sqlite")
    return a.comm, a.facts.kernels_by_phase


def _all_reduces(kernels: dict, per_step: float) -> dict:
    """``kernels`` with the backward all-reduce launched ``per_step`` times per step, each as long."""
    out = {p: {n: list(v) for n, v in k.items()} for p, k in kernels.items()}
    name = next(n for n in out["backward"] if "AllReduce" in n)
    count, ms = out["backward"][name]
    out["backward"][name] = [per_step, ms / count * per_step]
    return out


def test_the_capture_launches_its_all_reduces_in_backward_and_broadcasts_in_forward(ddp: tuple) -> None:
    from perfgate.diagnosis.comm import by_collective, without_communication

    comm, kernels = ddp
    got = {k: v[0] for k, v in by_collective(kernels).items()}
    assert got == {("all-reduce", "backward"): 5.0, ("broadcast", "forward"): 2.0}
    assert sum(got.values()) == comm.kernels_per_step
    rest = without_communication(kernels)
    assert not any("nccl" in n for k in rest.values() for n in k)
    assert sum(len(k) for k in rest.values()) == sum(len(k) for k in kernels.values()) - 2


def test_all_reduce_that_stopped_overlapping_backward_is_named_with_its_exposed_time(ddp: tuple) -> None:
    from dataclasses import replace

    from perfgate.diagnosis.comm import comm_reason

    base, kernels = ddp
    # the same NCCL time on each rank, none of it hidden by compute any more
    ranks = tuple(replace(r, exposed_ms=r.comm_ms) for r in base.ranks)
    cur = replace(base, ranks=ranks, exposed_ms=base.comm_ms, overlap_fraction=0.0)
    grown = min(r.comm_ms - b.exposed_ms for b, r in zip(base.ranks, ranks))     # 5.26 on rank 0
    r = comm_reason(base, cur, grown + 1.0, kernels, kernels)
    assert r is not None and r.ms == pytest.approx(grown) and r.where == "backward"
    assert r.text == f"all-reduce no longer overlaps backward: exposed communication +{grown:.1f} ms/step, overlap 57 % -> 0 %"
    # half the overlap left: "less"
    cur = replace(cur, overlap_fraction=0.35)
    assert comm_reason(base, cur, grown, kernels, kernels).text.startswith("all-reduce overlaps less with backward")
    # the job's step did not get slower: no reason is asked for, none in a side without NCCL
    assert comm_reason(base, base, 3.0, kernels, kernels) is None
    assert comm_reason(None, cur, 3.0) is None and comm_reason(base, None, 3.0) is None


def test_more_all_reduces_per_step_name_the_bucket_size(ddp: tuple) -> None:
    from dataclasses import replace

    from perfgate.diagnosis.comm import comm_reason

    base, kernels = ddp
    # a 1 MB bucket: 46 all-reduces instead of 5, each rank 2 ms/step more NCCL time, all of it exposed
    ranks = tuple(replace(r, kernels_per_step=48.0, comm_ms=r.comm_ms + 2.0, exposed_ms=r.exposed_ms + 2.0)
                  for r in base.ranks)
    cur = replace(base, ranks=ranks, kernels_per_step=48.0, comm_ms=base.comm_ms + 2.0,
                  exposed_ms=base.exposed_ms + 2.0, overlap_fraction=0.5)
    r = comm_reason(base, cur, 4.0, kernels, _all_reduces(kernels, 46.0))
    assert r is not None and r.cause == "collectives per step" and r.ms == pytest.approx(2.0)
    assert r.text == ("all-reduce takes longer: exposed communication +2.0 ms/step, overlap 57 % -> 50 %, NCCL time "
                      "12.2 -> 14.2 ms/step; NCCL kernels per step 7 -> 48 (all-reduce 5 -> 46 in backward): smaller "
                      "DDP buckets (bucket_cap_mb), or gradients all-reduced at every micro-step (no_sync dropped)?")
    # the count alone (no exposure change): still named, after what accounts for the step
    cur = replace(base, kernels_per_step=12.0)
    r = comm_reason(base, cur, 4.0)
    assert r is not None and r.ms == 0.0 and r.text.startswith("NCCL kernels per step 7 -> 12: smaller DDP buckets")


def test_all_reduces_per_backward_that_grew_name_the_bucket_size_alone(ddp: tuple) -> None:
    from dataclasses import replace

    from perfgate.diagnosis.comm import comm_reason

    base, kernels = ddp
    cur = replace(base, kernels_per_step=48.0)
    # one backward per step on both sides, 46 all-reduces in it where there were 5: the buckets
    r = comm_reason(base, cur, 4.0, kernels, _all_reduces(kernels, 46.0), {"backward": 1.0}, {"backward": 1.0})
    assert r is not None and r.text == ("NCCL kernels per step 7 -> 48 (all-reduce 5 -> 46 in backward, 46 per "
                                        "backward where it was 5): smaller DDP buckets (bucket_cap_mb)?")
    # four backwards per step and 5 -> 20 all-reduces (4-fold): each micro-step's backward communicates
    cur = replace(base, kernels_per_step=22.0)
    r = comm_reason(base, cur, 4.0, kernels, _all_reduces(kernels, 20.0), {"backward": 4.0}, {"backward": 4.0})
    assert r is not None and r.text == (
        "NCCL kernels per step 7 -> 22 (all-reduce 5 -> 20 in backward, which runs 4 times per step: each backward "
        "now communicates, not only the last): gradients all-reduced at every micro-step (no_sync() dropped from "
        "the accumulation?)")
    # a backward that runs more often than before (a larger accumulation), or phases the records do
    # not count: neither is claimed
    generic = "smaller DDP buckets (bucket_cap_mb), or gradients all-reduced at every micro-step (no_sync dropped)?"
    for runs in (({"backward": 1.0}, {"backward": 4.0}), ({}, {}), ({"backward": 0.0}, {"backward": 0.0})):
        r = comm_reason(base, cur, 4.0, kernels, _all_reduces(kernels, 20.0), *runs)
        assert r is not None and r.text.endswith(generic)


RECORDS = TESTS / "fixtures" / "records" / "ddp-h200-nosync.json"


@pytest.fixture(scope="module")
def h200_runs() -> dict[str, Analysis]:
    """The profile-launch analyses of ddp_ranks.py's four runs on two H200s (NCCL), the baseline
    accumulating 4 micro-batches per step inside no_sync()."""
    import json

    runs = json.loads(RECORDS.read_text())["runs"]
    return {name: Analysis.from_dict(run["analysis"]) for name, run in runs.items()}


def test_no_sync_dropped_on_two_h200s_is_named_and_not_taken_for_a_straggler(h200_runs: dict) -> None:
    """The real run: dropping no_sync() put 28 NCCL kernels in a step instead of 7; rank 0's forward
    grew +19.7 ms/step and rank 1's +6.9 (the ranks wait for each other four times a step now), which
    the straggler test alone would call a slow rank 0. The gate's first reason then was the DDP bucket
    copies' "+483 kernel launches/step in backward ... more layers or calls?"."""
    from perfgate.diagnosis.attribution import explain_regression
    from perfgate.diagnosis.differences import straggler_reason

    base, cur = h200_runs["baseline"], h200_runs["no_sync dropped"]
    # the step grew +46.9 ms/step, of which rank 0's +19.7 is less than half (no straggler's share);
    # at a growth it would be most of, the collectives change is what rules it out
    assert straggler_reason(base.ranks, cur.ranks, 46.9) is None
    assert straggler_reason(base.ranks, cur.ranks, 30.0) is not None
    a = explain_regression(base, cur)
    assert a.first_reason.endswith(
        "NCCL kernels per step 7 -> 28 (all-reduce 5 -> 20 in backward, which runs 4 times per step: each backward "
        "now communicates, not only the last): gradients all-reduced at every micro-step (no_sync() dropped from "
        "the accumulation?)")
    assert a.cause == "collectives per step"
    assert not any(r.mechanism == "straggler" for r in a.reasons)


def test_the_straggler_on_two_h200s_is_named_by_rank_and_phase(h200_runs: dict) -> None:
    from perfgate.diagnosis.attribution import explain_regression

    a = explain_regression(h200_runs["baseline"], h200_runs["straggler"])
    assert a.first_reason == ("rank 1 forward +119.0 ms/step (rank 0 -0.7 ms/step): one slow rank holds every step "
                              "of the job back")
    assert a.cause == "straggler rank"


def test_a_straggler_is_not_taken_for_a_communication_change(ddp: tuple) -> None:
    from dataclasses import replace

    from perfgate.diagnosis.comm import comm_reason

    base, kernels = ddp
    # rank 1 is slow in forward: rank 0's all-reduces wait 20 ms/step for it, rank 1's do not wait
    waiting = replace(base.ranks[0], comm_ms=base.ranks[0].comm_ms + 20, exposed_ms=base.ranks[0].exposed_ms + 20)
    cur = replace(base, ranks=(waiting, base.ranks[1]), comm_ms=base.comm_ms + 10, exposed_ms=base.exposed_ms + 10,
                  overlap_fraction=0.3)
    assert comm_reason(base, cur, 20.0, kernels, kernels) is None


def _ddp_ranks_script():
    import importlib.util

    path = REPO / "scripts" / "gpu" / "ddp_ranks.py"
    spec = importlib.util.spec_from_file_location("ddp_ranks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_multi_gpu_scripts_rank_table_of_the_capture() -> None:
    table = _ddp_ranks_script().rank_table(analyze_trace(DDP / "trace.sqlite"))
    assert table.splitlines()[2:4] == ["| 0 | 760 | 0 | 52.72 | 7.0 | 9.09 | 3.83 | 58 % |",
                                       "| 1 | 761 | 1 | 52.71 | 7.0 | 15.25 | 6.53 | 57 % |"]
    assert "NCCL 7.0 kernels, 12.17 ms, exposed 5.18 ms per step and rank, overlap 57 %" in table


def test_the_multi_gpu_script_refuses_a_machine_with_fewer_than_two_gpus(tmp_path: Path) -> None:
    from perfgate.system.machine import machine_info

    if machine_info(None, None).gpu_count >= 2:
        pytest.skip("a multi-GPU machine: the script would run")
    assert _ddp_ranks_script().main([str(tmp_path / "out")]) == 2


def test_analyze_table_shows_each_rank_and_the_communication() -> None:
    from perfgate.analysis.table import render_table

    lines = render_table(analyze_trace(DDP / "trace.sqlite")).splitlines()
    at = lines.index("ranks (per measured step; skew 1.561 ms):")
    assert lines[at + 1].split() == ["rank", "pid", "steps", "step", "ms", "NCCL", "kernels", "comm", "ms", "exposed", "ms"]
    assert lines[at + 3].split() == ["0", "760", "4", "52.715", "7.0", "9.085", "3.828"]
    assert lines[at + 4].split() == ["1", "761", "4", "52.707", "7.0", "15.253", "6.529"]
    assert lines[at + 5] == ("communication (NCCL kernels, per step and rank): 7.0 kernels, 12.169 ms, "
                             "exposed 5.178 ms, overlapped by compute 57.4%")
    two_cpu = render_table(analyze_trace(TRACES / "cpu-two-procs" / "trace.sqlite"))
    assert "ranks (per measured step" in two_cpu and "NCCL" not in two_cpu and "communication" not in two_cpu


TIMM = TESTS / "fixtures" / "records" / "timm-ddp-h200-randaugment.json"


@pytest.fixture(scope="module")
def timm_randaugment() -> dict:
    """timm's train.py under torchrun on two H200s (the zoo's timm_ddp), and its input pull request:
    RandAugment on every sample, one loader worker per rank. Both ranks' input got slower."""
    import json

    raw = json.loads(TIMM.read_text())
    return {"first_reason_then": raw["first_reason_then"],
            "baseline": [Analysis.from_dict(a) for a in raw["baseline"]],
            "current": [Analysis.from_dict(a) for a in raw["current"]]}


def test_a_wait_that_moves_between_ranks_is_no_straggler(timm_randaugment: dict) -> None:
    """The gate said "rank 0 data_load +22.3 ms/step (rank 1 -16.0 ms/step): one slow rank holds every
    step of the job back". Both ranks had the slower input; which of them waits for its loader (and
    which waits in the collectives instead) was already rank 0 in the baseline's timing launches and
    rank 1 in its profile launch."""
    from perfgate.diagnosis.attribution import explain_regression
    from perfgate.diagnosis.differences import straggler_reason

    runs = timm_randaugment
    assert runs["first_reason_then"].startswith("rank 0 data_load +22.3 ms/step (rank 1 -16.0 ms/step)")
    waits = [[round(r.phase_cpu_ms["data_load"], 1) for r in a.ranks] for a in runs["baseline"]]
    assert waits == [[26.6, 7.6], [31.3, 5.0], [9.8, 19.0]]     # the baseline's own launches swap roles
    base, cur = runs["baseline"][-1], runs["current"][-1]        # the profile launches the gate compares
    assert straggler_reason(base.ranks, cur.ranks, 9.3) is None
    a = explain_regression(base, cur)
    assert round(a.step_mean_delta_ms, 2) == 9.32
    assert a.first_reason == ("data_load +3.1 ms/step (GPU idle while data_load open): the loop waits longer for each "
                              "batch with the same 1 DataLoader worker: a slower dataset or transform?")
    assert a.cause == "input pipeline"
    assert not any(r.mechanism == "straggler" for r in a.reasons)
    assert ("data_load grew on rank 0 (+22.3 ms/step) and shrank on rank 1 (-16.0): the ranks wait for each other, "
            "and the wait moved between them; over all ranks data_load +3.1 ms/step (no slow rank)") in a.notes
    # cuDNN swapped 1.5 kernels a step for others in the step's own code (+0.00 ms GPU time): that is not
    # the +5.3 ms/step of host time there, which the gate once credited to "new kernels"
    added = next(r for r in a.reasons if r.mechanism == "kernels_added")
    assert added.ms < 0.2 and "+0.5/step" in added.text and "+0/step" not in added.text
    assert a.explained_ms < 0.4 * a.step_mean_delta_ms    # the rest is said unexplained, not claimed


def test_the_real_straggler_still_leads_when_the_wait_does_not_move(h200_runs: dict) -> None:
    """ddp_ranks.py's straggler (rank 1 sleeping in forward): the other rank's forward did not shrink,
    and the delay is the step's whole growth."""
    from perfgate.diagnosis.attribution import explain_regression

    a = explain_regression(h200_runs["baseline"], h200_runs["straggler"])
    assert a.cause == "straggler rank"
    assert not any("wait moved" in n for n in a.notes)


# NCCL's calls from its own NVTX ranges: three captures on two H200s made the way timing launches
# capture (--trace=nvtx, no CUDA trace; scripts/gpu/collectives.sh): 4 micro-batches per step inside
# no_sync(), the same with no_sync() dropped, and the first with 1 MB DDP buckets
CALLS = {side: TRACES / f"gpu-ddp-calls-{side}" for side in ("base", "nosync-dropped", "small-buckets")}
PHASES = ("data_load", "h2d", "forward", "backward", "optimizer")


def _calls_oracle(path: Path, skip: int) -> tuple[int, dict[tuple[str, str | None], int]]:
    """Straight from the export: per process, its measured window (its ``step`` ranges, ``skip``
    skipped, the last one only closing the window), the NCCL-domain ranges named ``nccl...`` but
    ``ncclComm*``/``ncclGroup*`` that start in it, each in the phase range of its process that
    contains its start (any thread); returns (measured steps, calls by (call, phase))."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
        ranges = con.execute(
            "SELECT (n.globalTid >> 24) & 16777215, n.start, n.\"end\", coalesce(s.value, n.text), "
            "(SELECT count(*) FROM NVTX_EVENTS d WHERE d.eventType = 75 AND d.domainId = n.domainId "
            "AND coalesce(d.text, '') = 'NCCL') > 0 FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType = 59 ORDER BY 2").fetchall()
    steps_total, calls = 0, {}
    for pid in sorted({p for p, _, _, name, nccl in ranges if name == "step" and not nccl}):
        starts = [s for p, s, _, name, nccl in ranges if p == pid and name == "step" and not nccl]
        lo, hi = starts[skip], starts[-1]
        steps_total += len(starts) - skip - 1
        phases = [(s, e, name) for p, s, e, name, nccl in ranges if p == pid and not nccl and name in PHASES]
        for p, s, _, name, nccl in ranges:
            if p == pid and nccl and name.startswith("nccl") and not name.startswith(("ncclComm", "ncclGroup")) \
                    and lo <= s < hi:
                phase = next((n for ps, pe, n in phases if ps <= s < pe), None)
                key = (name.removeprefix("nccl"), phase)
                calls[key] = calls.get(key, 0) + 1
    return steps_total, calls


@pytest.mark.parametrize("side", list(CALLS))
def test_nccl_calls_per_step_are_nccl_domain_ranges_counted_from_the_export(side: str) -> None:
    a = analyze_trace(CALLS[side] / "trace.sqlite")
    steps, calls = _calls_oracle(CALLS[side] / "trace.sqlite", WARMUP)
    assert a.collectives is not None and a.steps.count == steps
    assert {(c.call, c.phase): c.per_step for c in a.collectives.counts} == pytest.approx(
        {k: n / steps for k, n in calls.items()})
    assert a.metrics()["collectives_per_step"] == pytest.approx(sum(calls.values()) / steps)
    assert a.comm is None        # no CUDA trace: no kernels, the calls all the same


def test_the_calls_per_step_of_the_three_sides() -> None:
    """The numbers the words below rest on: 5 all-reduces in backward and 2 broadcasts in forward per
    step and rank; no_sync() dropped makes every micro-batch's backward all-reduce (and its forward
    broadcast): 4x both; 1 MB buckets 35 all-reduces; the kernels the CUDA-traced 2-process capture
    has per step (gpu-ddp-2proc: 7) are as many as its calls."""
    got = {side: {(c.call, c.phase): c.per_step for c in analyze_trace(path / "trace.sqlite").collectives.counts}
           for side, path in CALLS.items()}
    assert got["base"] == {("AllReduce", "backward"): 5.0, ("Broadcast", "forward"): 2.0}
    assert got["nosync-dropped"] == {("AllReduce", "backward"): 20.0, ("Broadcast", "forward"): 8.0}
    assert got["small-buckets"] == {("AllReduce", "backward"): 35.0, ("Broadcast", "forward"): 2.0}
    traced = analyze_trace(DDP / "trace.sqlite")
    assert traced.collectives.per_step == traced.comm.kernels_per_step == 7.0


@pytest.fixture(scope="module")
def calls() -> dict[str, Analysis]:
    return {side: analyze_trace(path / "trace.sqlite") for side, path in CALLS.items()}


def test_no_sync_dropped_on_two_h200s_is_said_from_the_timing_launches(calls: dict) -> None:
    from perfgate.diagnosis.comm import collectives_text

    assert collectives_text(calls["base"], calls["nosync-dropped"]) == (
        "NCCL calls per step and rank 7 -> 28 (all-reduce 5 -> 20 in backward, which runs 4 times "
        "per step: each backward now communicates, not only the last): gradients all-reduced at every micro-step "
        "(no_sync() dropped from the accumulation?)")
    assert collectives_text(calls["base"], calls["small-buckets"]).endswith(
        "7 -> 37 (all-reduce 5 -> 35 in backward, 9 per backward where it was 1): smaller DDP buckets (bucket_cap_mb)?")
    # the other way: no_sync() put back, larger buckets
    assert collectives_text(calls["nosync-dropped"], calls["base"]).endswith(
        "28 -> 7 (all-reduce 20 -> 5 in backward, which runs 4 times per step: only the last backward communicates "
        "now): gradients all-reduced once per step (no_sync() around the accumulated micro-batches?)")
    assert collectives_text(calls["small-buckets"], calls["base"]).endswith(
        "37 -> 7 (all-reduce 35 -> 5 in backward, 1 per backward where it was 9): larger DDP buckets (bucket_cap_mb)?")
    assert collectives_text(calls["base"], calls["base"]) is None


def test_a_pass_with_more_collectives_says_so(calls: dict) -> None:
    """The step of the no_sync() change grew 4.5 % on two H200s (190.9 -> 199.5 ms): within a 10 %
    tolerance it PASSes, and the summary still says what happened to the communication; with
    ``gate_alone`` naming the metric it fails on it."""
    from perfgate.gate.compare import ComparePolicy, compare_launches
    from perfgate.pipeline.judge import communication_note
    from perfgate.records.model import Tolerance, Verdict

    base, cur = calls["base"], calls["nosync-dropped"]
    assert cur.steps.time_ms / base.steps.time_ms == pytest.approx(1.045, abs=0.005)
    loose = ComparePolicy(tolerances={"step_time*": Tolerance(rel=0.10)})
    passed = compare_launches([base.metrics()], [cur.metrics()], loose)
    assert passed.verdict == Verdict.PASS
    assert passed.row("collectives_per_step").verdict == Verdict.REGRESSED
    assert not passed.row("collectives_per_step").gating
    note = communication_note(passed, [base], [cur])
    assert note is not None and note.startswith("communication: NCCL calls per step and rank 7 -> 28 (all-reduce")
    alone = compare_launches([base.metrics()], [cur.metrics()],
                             ComparePolicy(tolerances=loose.tolerances, gate_alone=("collectives_per_step",)))
    assert alone.verdict == Verdict.REGRESSED and "collectives_per_step" in alone.summary
    # the same calls: nothing said; the metric off: nothing said
    assert communication_note(compare_launches([base.metrics()], [base.metrics()], loose), [base], [base]) is None
    off = ComparePolicy(tolerances={**loose.tolerances, "collectives_per_step": Tolerance(rel=float("inf"))})
    assert communication_note(compare_launches([base.metrics()], [cur.metrics()], off), [base], [cur]) is None


def test_a_baseline_keeps_the_calls(calls: dict, tmp_path: Path) -> None:
    from perfgate.baselines.store import BaselineLaunch

    a = calls["nosync-dropped"]
    launch = BaselineLaunch.from_dict(BaselineLaunch.of(a, a.metrics()).to_dict(), "a launch")
    assert launch.analysis().collectives == a.collectives
    assert Analysis.from_dict(a.to_dict()).collectives == a.collectives


SYNCBN = TESTS / "fixtures" / "records" / "timm-ddp-h200-syncbn"


def test_sync_bn_on_a_public_program_passes_and_still_says_its_new_collective() -> None:
    """timm's train.py, unmodified, on two H200s, with --sync-bn: the step PASSed within the noise of
    its baseline, and the summary names the all-gathers SyncBatchNorm added in forward (not DDP's
    buckets: that collective was not made before)."""
    import json

    from perfgate.baselines.store import load_baseline
    from perfgate.gate.compare import ComparePolicy, compare_launches
    from perfgate.pipeline.judge import communication_note
    from perfgate.records.model import Verdict

    baseline = load_baseline(SYNCBN / "baseline.json")
    result = json.loads((SYNCBN / "result.json").read_text())
    cur = [Analysis.from_dict(a) for a in result["analyses"]]
    base = [a for a in baseline.launch_analyses if a.collectives is not None]
    assert [a.collectives.per_step for a in base] == pytest.approx([13.8] * 3)
    assert result["verdict"] == "PASS"
    outcome = compare_launches([a.metrics() for a in base[:2]], [a.metrics() for a in cur], ComparePolicy())
    assert outcome.row("collectives_per_step").verdict == Verdict.REGRESSED
    said = ("communication: NCCL calls per step and rank 14 -> 54 (all-gather 0 -> 20 in forward: a collective the "
            "step did not make before): values gathered from every rank (SyncBatchNorm's statistics, or parameters "
            "sharded across ranks: FSDP, ZeRO)?")
    assert communication_note(outcome, base, cur) == said
    assert f"warning: {said}" in result["message"]        # what the gate said on the GPU machine


def test_a_collective_the_step_did_not_make_before_leads_the_account(ddp: tuple) -> None:
    """A new collective is an edit of the program's communication: its reason comes first, credited
    with the new kernels' NCCL time, even where exposed communication did not grow (on timm's
    --sync-bn run the account led with a cuDNN kernel swap, and this reason came third at 0 ms)."""
    from dataclasses import replace

    from perfgate.diagnosis.comm import comm_reason, leads

    base, kernels = ddp
    gathers = {**kernels, "forward": {**kernels.get("forward", {}),
                                      "ncclDevKernel_AllGather_RING_LL": [20.0, 5.2]}}
    cur = replace(base, kernels_per_step=base.kernels_per_step + 20)
    r = comm_reason(base, cur, 20.0, kernels, gathers)
    assert r is not None and "comm_new" in r.mechanism and r.ms == pytest.approx(5.2)
    assert "(all-gather 0 -> 20 in forward: a collective the step did not make before)" in r.text
    assert leads(r, 100.0)        # 5.2 of 100 ms/step is under the share that would make it lead
    # more of a collective already made (all-reduces): no comm_new, credited with exposed time only
    more = {**kernels, "backward": {k: [v[0] * 4, v[1]] for k, v in kernels["backward"].items()}}
    r = comm_reason(base, replace(base, kernels_per_step=base.kernels_per_step * 4), 20.0, kernels, more)
    assert r is not None and "comm_new" not in r.mechanism and not leads(r, 100.0)


def test_nccls_own_ranges_are_never_a_phase() -> None:
    """Each forward of the capture broadcasts DDP's buffers inside it, on the main thread: taken as
    the step (``step_pattern = "forward"``), its direct child was the phase ``NCCL:ncclBroadcast``,
    as a DDP program's broadcasts and all-reduces were phases where autostep's periods are the steps
    (timm's train.py on two H200s). NCCL's ranges are its calls: counted, never a phase."""
    a = analyze_trace(CALLS["base"] / "trace.sqlite", AnalysisOptions(step_pattern="forward"))
    assert a.steps.count == 148 and "backward" in a.phases
    assert not [p for p in a.phases if p.startswith("NCCL")]
    assert not [m for m in a.metrics() if m.startswith("phase.NCCL")]
    assert {c.call for c in a.collectives.counts} == {"AllReduce", "Broadcast"}


def test_exposed_communication_is_said_with_the_calls_never_alone(h200_runs: dict, calls: dict) -> None:
    """The profile launches of the no_sync() change on two H200s, given the calls per step the
    NVTX-only captures of the same change counted (their records predate the count): the line says
    the calls and the exposed NCCL time beside them. The unchanged rerun's exposed time moved
    11.6 -> 14.1 ms/step, beyond that metric's tolerance: with the same calls, no line."""
    from dataclasses import replace

    from perfgate.gate.compare import ComparePolicy, compare_launches
    from perfgate.pipeline.judge import communication_note
    from perfgate.records.model import Tolerance, Verdict

    base = replace(h200_runs["baseline"], collectives=calls["base"].collectives)
    cur = replace(h200_runs["no_sync dropped"], collectives=calls["nosync-dropped"].collectives)
    rerun = replace(h200_runs["rerun"], collectives=calls["base"].collectives)
    off = Tolerance(rel=float("inf"))         # energy and memory gate alone: out of the way here
    loose = ComparePolicy(tolerances={"step_time*": Tolerance(rel=0.5), "energy.*": off, "gpu_memory.*": off},
                          gate_secondary=False)
    outcome = compare_launches([base.metrics()], [cur.metrics()], loose)
    assert outcome.verdict == Verdict.PASS, outcome.summary
    note = communication_note(outcome, [base], [cur])
    assert note is not None and note.startswith("communication: NCCL calls per step and rank 7 -> 28 (all-reduce")
    assert note.endswith("; exposed NCCL time per step and rank 11.6 -> 29.5 ms (NCCL time 19.8 -> 54.5 ms, "
                         "overlap 41 % -> 46 %)")
    unchanged = compare_launches([base.metrics()], [rerun.metrics()], loose)
    assert unchanged.row("comm_exposed_ms").verdict == Verdict.REGRESSED
    assert communication_note(unchanged, [base], [rerun]) is None

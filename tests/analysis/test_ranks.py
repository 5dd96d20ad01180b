"""Per-rank metrics of a multi-process job (issue 19): the committed 2-process captures, the
straggler reason, and the ddp workload's communication knobs (bucket size, no_sync, accumulation)
seen in 2-process gloo jobs' traces under the real nsys (a job whose slowed rank is named:
tests/pipeline/test_ddp_gate.py, through the gate and through two traces compared)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from nsys_run import run_supervised
from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.diagnosis.differences import straggler_reason
from perfgate.gate.metric_specs import spec_for
from perfgate.records.model import Analysis
from perfgate.records.ranks import RankStats
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"


@pytest.mark.parametrize("fixture", ["cpu-two-procs", "gpu-ddp-2proc"])
def test_two_process_fixtures_have_one_row_per_rank(fixture: str) -> None:
    a = analyze_trace(TRACES / fixture / "trace.sqlite")
    assert [r.rank for r in a.ranks] == [0, 1] and a.ranks[0].pid < a.ranks[1].pid
    assert sum(r.steps for r in a.ranks) == a.steps.count
    m = a.metrics()
    assert m["rank.0.step_time_ms"] > 0 and m["rank.1.step_time_ms"] > 0 and m["rank_skew_ms"] >= 0
    assert not spec_for("rank.1.step_time_ms").gating and not spec_for("rank_skew_ms").gating
    # phase CPU time per step of the ranks averages to the job's (equal step counts per rank)
    for name, p in a.phases.items():
        per_rank = sum(r.phase_cpu_ms.get(name, 0.0) * r.steps for r in a.ranks)
        assert per_rank / a.steps.count == pytest.approx(p.cpu_per_step_ms)
    # the ranks come back from the JSON form (a baseline launch's detail)
    assert Analysis.from_dict(a.to_dict()).ranks == a.ranks


def test_skew_is_the_median_of_slowest_minus_fastest_per_step() -> None:
    a = analyze_trace(TRACES / "cpu-two-procs" / "trace.sqlite")
    n = min(r.steps for r in a.ranks)
    first = a.steps.durations_ms[:a.ranks[0].steps][:n]
    second = a.steps.durations_ms[a.ranks[0].steps:][:n]
    gaps = sorted(abs(x - y) for x, y in zip(first, second))
    assert a.rank_skew_ms == pytest.approx(gaps[(n - 1) // 2] if n % 2 else (gaps[n // 2 - 1] + gaps[n // 2]) / 2)


def test_single_process_analysis_has_no_rank_fields() -> None:
    a = analyze_trace(TRACES / "cpu-train-loop" / "trace.sqlite")
    assert a.ranks == () and "ranks" not in a.to_dict()
    assert not any(k.startswith("rank") for k in a.metrics())


def _ranks(*phases: dict[str, float]) -> tuple[RankStats, ...]:
    return tuple(RankStats(k, 100 + k, 4, 10.0, p) for k, p in enumerate(phases))


def test_straggler_is_the_rank_whose_own_phase_grew_not_the_one_that_waits() -> None:
    base = _ranks({"forward": 5.0, "backward": 5.0}, {"forward": 5.0, "backward": 5.0})
    # rank 1 sleeps in forward; rank 0 waits as long in backward's all-reduce
    cur = _ranks({"forward": 5.2, "backward": 45.0}, {"forward": 45.0, "backward": 5.1})
    r = straggler_reason(base, cur, 40.0)
    assert r is not None and r.text.startswith("rank 1 forward +40.0 ms/step (rank 0 +0.2 ms/step)")
    assert straggler_reason(base, base, 0.0) is None
    both = _ranks({"forward": 45.0, "backward": 5.0}, {"forward": 45.0, "backward": 5.0})
    assert straggler_reason(base, both, 40.0) is None          # every rank slower: no straggler


NSYS_OPTIONS = ("--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--export=sqlite", "-f", "true")


def _capture_ddp(nsys: str, repo: Path, out: Path, *args: str) -> Path:
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_NVTX"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), env.get("PYTHONPATH")]))
    command = [nsys, "profile", *NSYS_OPTIONS, "-o", str(out), sys.executable, "-m", "torch.distributed.run",
               "--nproc-per-node=2", "--standalone", "-m", "workloads.ddp", "--device", "cpu", "--size", "cpu",
               "--steps", "5", "--warmup-steps", "1", *args]
    done = run_supervised(command, cwd=repo, env=env, text=True, timeout=400)
    assert done.returncode == 0, f"{command}\n{(done.stdout + done.stderr)[-4000:]}"
    out.with_suffix(".log").write_text(done.stdout + done.stderr)
    return out.with_suffix(".sqlite")


# DDP's knobs (workloads/ddp.py): each variant as a 2-process gloo job under the real nsys, its
# all-reduces seen in the trace as the comm hook's ``allreduce`` ranges (--allreduce-ranges)
KNOB_VARIANTS = {"default": (), "bucket 1 MB": ("--bucket-cap-mb", "1"), "no_sync 2": ("--no-sync-steps", "2"),
                 "accumulate 2": ("--accumulate", "2")}


@pytest.fixture(scope="module")
def knob_runs(nsys_path: str, torch_module: object, repo_root: Path,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, str]]:
    tmp = tmp_path_factory.mktemp("ddp-knobs")
    out = {}
    for label, args in KNOB_VARIANTS.items():
        path = _capture_ddp(nsys_path, repo_root, tmp / label.replace(" ", "-"), "--image-size", "32",
                            "--allreduce-ranges", *args)
        out[label] = (path, (path.parent / (path.stem + ".log")).read_text())
    return out


def _per_step(path: Path) -> dict[str, float]:
    """Per measured step of each process: the ``allreduce`` ranges and the forward passes in it."""
    from perfgate.trace.export import load_trace

    trace = load_trace(path)
    a = analyze_trace(path, AnalysisOptions(skip_steps=1))
    nvtx = trace.nvtx.frame()
    inside = np.zeros(len(nvtx), dtype=bool)
    for r in a.ranks:
        mine = (nvtx["pid"] == r.pid).to_numpy()
        steps = nvtx[mine & (nvtx["text"] == "step").to_numpy()].sort_values("start").iloc[1:-1]   # measured
        for s, e in zip(steps["start"], steps["end"]):
            inside |= mine & (nvtx["start"] >= s).to_numpy() & (nvtx["end"] <= e).to_numpy()
    counted = nvtx[inside]["text"].value_counts()
    return {"allreduce": counted.get("allreduce", 0) / a.steps.count,
            "forward": counted.get("forward", 0) / a.steps.count, "ranks": len(a.ranks)}


def test_ddp_knobs_change_the_all_reduces_each_step_makes(knob_runs: dict[str, tuple[Path, str]]) -> None:
    from perfgate.capture.launch import parse_self_report

    got = {label: _per_step(path) for label, (path, _) in knob_runs.items()}
    buckets = got["default"]["allreduce"]
    assert all(g["ranks"] == 2 for g in got.values()), got
    assert buckets == 5 and got["default"]["forward"] == 1, got     # ResNet-50's gradients in 25 MB buckets
    assert got["bucket 1 MB"]["allreduce"] > 4 * buckets, got      # 1 MB buckets: many more all-reduces
    assert (got["no_sync 2"]["forward"], got["no_sync 2"]["allreduce"]) == (2, buckets), got   # one sync per step
    assert (got["accumulate 2"]["forward"], got["accumulate 2"]["allreduce"]) == (2, 2 * buckets), got
    # rank 0's own count of the hook's calls in its last step says the same
    for label, (_, log) in knob_runs.items():
        report = parse_self_report(log)
        assert report is not None, f"{label}: no self-report in\n{log[-3000:]}"
        assert report["ddp"]["allreduce_calls_last_step"] == got[label]["allreduce"], (label, report["ddp"], got)

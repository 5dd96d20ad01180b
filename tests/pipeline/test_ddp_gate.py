"""The gate on a torchrun job declared in pyproject.toml (``[tool.perfgate.workloads.ddp]``,
``launcher = "torchrun"``: 2 gloo processes on a CPU machine), under the real nsys: one report holds
every rank (nsys follows torchrun's children), the baseline records per-rank step times, an unchanged
rerun passes, and a rerun with one slowed rank is REGRESSED with that rank named first, by the gate
and by its two traces compared."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.pipeline.workload_run import run_workload
from perfgate.records.model import Verdict
from perfgate.report.digest import result_message
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import discover_workloads, select_workloads

SMALL = ("--image-size", "32")
# a 2-core shared machine: an unchanged rerun must pass; a straggler adds several steps' worth
TOLERANCE = {"step_time*": "50%+5", "phase.*": "off"}


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory, repo_root: Path, nsys_path: str, torch_module: object) -> dict:
    tmp = tmp_path_factory.mktemp("ddp-gate")
    settings = load_settings(repo_root, env={}, overrides={
        "artifacts_dir": str(tmp / "runs"), "baseline_dir": str(tmp / "baselines"),
        "report_dir": str(tmp / "report"), "size": "cpu", "timeout_s": 300, "launches": 1,
        # the stored baseline's verdict and its rank are what these tests hold (the confirmation
        # against the base is tests/pipeline/test_confirmation.py's)
        "confirm": "never", "tolerance": TOLERANCE})
    spec = select_workloads(discover_workloads(settings, gpu_count=0), ["ddp"])[0]
    spec = replace(spec, args=(*spec.args, *SMALL))
    recorded = run_workload(spec, settings, update_baseline=True)
    assert recorded.verdict != Verdict.ERROR, recorded.error
    rerun = run_workload(spec, settings)
    step_ms = recorded.analyses[0].steps.summary_ms.median
    slow = ("--slow-rank", "1", "--slow-phase", "forward", "--slow-ms", f"{max(5 * step_ms, 200):.0f}")
    slowed = run_workload(replace(spec, args=(*spec.args, *slow)), settings)
    return {"spec": spec, "recorded": recorded, "rerun": rerun, "slowed": slowed}


def test_the_declared_job_runs_under_torchrun_in_one_report(gated: dict) -> None:
    spec, recorded = gated["spec"], gated["recorded"]
    assert (spec.launcher, spec.nproc, spec.module) == ("torchrun", 2, "workloads.ddp")
    commands = sorted(recorded.run_dir.rglob("command.txt"))
    assert commands and all("torch.distributed.run" in c.read_text() and "--nproc-per-node=2" in c.read_text()
                            for c in commands)
    # one export per launch, holding both ranks
    for command in commands:
        assert [p.name for p in command.parent.glob("*.sqlite")] == ["trace.sqlite"]
    a = recorded.analyses[0]
    assert a.processes == 2 and [r.rank for r in a.ranks] == [0, 1]
    assert {"rank.0.step_time_ms", "rank.1.step_time_ms", "rank_skew_ms"} <= set(a.metrics())
    assert a.comm is None                  # gloo: no NCCL kernel, no communication metrics


def test_unchanged_rerun_passes(gated: dict) -> None:
    assert gated["rerun"].verdict in (Verdict.PASS, Verdict.IMPROVED), result_message(gated["rerun"])


def test_a_slowed_rank_is_regressed_and_named(gated: dict) -> None:
    slowed = gated["slowed"]
    assert slowed.verdict == Verdict.REGRESSED, result_message(slowed)
    first = slowed.attribution.first_reason
    assert first.startswith("rank 1 forward +") and "(rank 0 " in first, first


def test_two_of_its_traces_compared_name_the_slowed_rank(gated: dict) -> None:
    """``perfgate compare`` of the recorded launch's trace and the slowed one's: the same verdict and
    rank, from the files alone."""
    from perfgate.analysis import AnalysisOptions
    from perfgate.gate.compare import ComparePolicy
    from perfgate.pipeline.inputs import compare_and_explain

    base, slow = (sorted(gated[k].run_dir.rglob("trace.sqlite"))[0] for k in ("recorded", "slowed"))
    outcome, attribution = compare_and_explain(base, slow, ComparePolicy(), AnalysisOptions(skip_steps=1))
    assert outcome.verdict is Verdict.REGRESSED, outcome.summary
    assert attribution is not None and attribution.first_reason.startswith("rank 1 forward +"), attribution
    assert "(rank 0 " in attribution.first_reason

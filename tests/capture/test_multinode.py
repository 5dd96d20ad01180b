"""A job of two torchrun nodes on this machine (``nnodes = 2`` in its table: ``--nnodes=2
--node-rank=0/1``, a c10d rendezvous on 127.0.0.1, 2 gloo processes each), each node under its own
real nsys: one report per node, merged on their session start times into one job of 4 ranks, and a
unchanged rerun passing, and a rank slowed on node 1 REGRESSED and named ``node 1 rank 3``."""
from __future__ import annotations

import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.pipeline.workload_run import run_workload
from perfgate.records.model import Verdict
from perfgate.report.digest import result_message
from perfgate.settings.config import load_settings
from perfgate.settings.workloads import discover_workloads, select_workloads

# a tiny DDP job: a few ms a step; --slow-rank R --slow-ms M sleeps M ms in rank R's "data" phase
WORKLOAD = '''
import argparse, gc, os, time
import torch, torch.distributed as dist
from torch.cuda import nvtx

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=30)
p.add_argument("--slow-rank", type=int, default=-1)
p.add_argument("--slow-ms", type=float, default=0.0)
a = p.parse_args()
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x = torch.randn(32, 64)
for _ in range(a.steps):
    nvtx.range_push("step")
    nvtx.range_push("data")
    time.sleep(0.002 + (a.slow_ms / 1000 if rank == a.slow_rank else 0.0))
    nvtx.range_pop()
    nvtx.range_push("forward")
    loss = model(x).square().mean()
    nvtx.range_pop()
    loss.backward()
    opt.step()
    opt.zero_grad()
    nvtx.range_pop()
dist.barrier()      # no rank destroys its group while another is in its last collective (gloo aborts it)
# and DDP's references to the group go first: a gloo group destroyed with the interpreter aborted
# 1 rank in about 15 jobs on a loaded 2-core machine ("terminate called without an active exception")
del model, opt, loss
gc.collect()
dist.destroy_process_group()
'''

PYPROJECT = '''
[tool.perfgate]
workloads_dir = "jobs"

[tool.perfgate.workloads.nodes]
launcher = "torchrun"
nproc = 2
nnodes = 2
'''
SLOW_MS = 60          # several times a step (a few ms): a straggler on a loaded 2-core machine
TOLERANCE = {"step_time*": "50%+5", "phase.*": "off"}


def project(root: Path, nnodes: str = "2") -> Path:
    (root / "jobs").mkdir(parents=True, exist_ok=True)
    (root / "jobs" / "nodes.py").write_text(textwrap.dedent(WORKLOAD))
    (root / "pyproject.toml").write_text(PYPROJECT.replace("nnodes = 2", f"nnodes = {nnodes}"))
    return root


@pytest.fixture(scope="module")
def gated(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module: object) -> dict:
    root = project(tmp_path_factory.mktemp("multinode"))
    settings = load_settings(root, env={}, overrides={
        "artifacts_dir": str(root / "runs"), "baseline_dir": str(root / "baselines"),
        "report_dir": str(root / "report"), "timeout_s": 300, "launches": 1, "tolerance": TOLERANCE})
    spec = select_workloads(discover_workloads(settings, gpu_count=0), ["nodes"])[0]
    recorded = run_workload(spec, settings, update_baseline=True)
    assert recorded.verdict != Verdict.ERROR, recorded.error
    rerun = run_workload(spec, settings)
    slowed = run_workload(replace(spec, args=(*spec.args, "--slow-rank", "3", "--slow-ms", str(SLOW_MS))), settings)
    return {"spec": spec, "recorded": recorded, "rerun": rerun, "slowed": slowed}


def test_each_node_is_captured_in_its_own_report(gated: dict) -> None:
    recorded = gated["recorded"]
    commands = sorted(recorded.run_dir.rglob("command.txt"))
    assert commands
    for command in commands:
        text = command.read_text()
        assert text.count("--nnodes=2") == 2 and "--node-rank=0" in text and "--node-rank=1" in text
        assert "--rdzv-backend=c10d" in text and "--rdzv-endpoint=127.0.0.1:" in text
        assert sorted(p.name for p in command.parent.glob("*.sqlite")) == ["trace-node0.sqlite", "trace-node1.sqlite"]
    a = recorded.analyses[0]
    assert a.processes == 4
    assert [(r.node, r.local_rank, r.rank) for r in a.ranks] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    assert {f"rank.{k}.step_time_ms" for k in range(4)} | {"rank_skew_ms"} <= set(a.metrics())
    assert any("aligned on their session start times" in w for w in a.warnings), a.warnings
    # one machine, one clock: DDP's ranks in step on the aligned axis (the sessions start up to
    # ~100 ms apart on a loaded machine, the nodes' steps well under a millisecond apart)
    assert a.extra["node_step_spread_ms"] < 10, a.warnings


def test_unchanged_rerun_passes(gated: dict) -> None:
    rerun = gated["rerun"]
    assert rerun.verdict in (Verdict.PASS, Verdict.IMPROVED), rerun.error or result_message(rerun)


def test_a_slowed_rank_on_node_1_is_regressed_and_named(gated: dict) -> None:
    slowed = gated["slowed"]
    assert slowed.verdict == Verdict.REGRESSED, slowed.error or result_message(slowed)
    first = slowed.attribution.first_reason
    assert first.startswith("node 1 rank 3 data +"), first
    print(f"\nverdict: {slowed.verdict.value}\nfirst reason: {first}")


def test_a_job_past_its_timeout_ends_every_node(tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    """Every process of every node ends with the launch: at the timeout each node's nsys is asked to
    finish (its report of what ran is kept) and the whole tree is ended."""
    import subprocess

    from perfgate.capture.launch import run_capture
    from perfgate.errors import CaptureTimeoutError

    root = project(tmp_path / "job")
    settings = load_settings(root, env={}, overrides={"artifacts_dir": str(root / "runs"), "timeout_s": 25})
    spec = select_workloads(discover_workloads(settings, gpu_count=0), ["nodes"])[0]
    with pytest.raises(CaptureTimeoutError, match="ran past its timeout of 25 s"):
        run_capture(replace(spec, args=("--steps", "1000000")), settings, root / "runs" / "launch-0")
    left = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert not [line for line in left.splitlines() if str(root) in line or "1000000" in line]


def test_a_node_whose_nsys_fails_at_its_start_is_captured_again(tmp_path: Path, nsys_path: str,
                                                                 torch_module: object) -> None:
    """Node 1's nsys fails at its start the way nsys 2022.4 did beside node 0's session ("End of
    file", exit 1, no report; then every nsys run again beside it: "Agent launcher failed."). The
    job fails (node 0 stopped), and the capture takes the whole launch again, which succeeds, and
    says why; the failed attempt's log is kept."""
    from perfgate.capture.launch import run_capture

    flag = tmp_path / "failed-once"
    wrapper = tmp_path / "bin" / "nsys"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\ncase \"$*\" in *--node-rank=1*)\n  if [ ! -e " + str(flag) + " ]; then\n"
                       f"    : > {flag}; echo 'End of file' >&2; exit 1\n  fi;;\nesac\n"
                       f"exec {nsys_path} \"$@\"\n")
    wrapper.chmod(0o755)
    root = project(tmp_path / "job")
    # each rank only says it ran: the retry is torchrun's and nsys's, no process group to end (a gloo
    # rank of the DDP job aborted once in the second attempt: "terminate called without an active exception")
    # one write() a line: print() writes its parts one by one, and two ranks' lines were interleaved
    (root / "jobs" / "nodes.py").write_text("import os\nos.write(1, f\"rank {os.environ['RANK']} ran\\n\".encode())\n")
    settings = load_settings(root, env={}, overrides={"artifacts_dir": str(root / "runs"), "timeout_s": 300,
                                                      "nsys": str(wrapper)})
    spec = select_workloads(discover_workloads(settings, gpu_count=0), ["nodes"])[0]
    said: list[str] = []
    launch = root / "runs" / "launch-0"
    capture = run_capture(spec, settings, launch, progress=said.append)
    # the planted failure first; nsys 2022.4 itself failed a node's start once more in 1 of 10 runs here
    assert capture.retried[0] == "End of file" and len(capture.retried) == len(said)
    assert [p.name for p in capture.node_sqlite] == ["trace-node0.sqlite", "trace-node1.sqlite"]
    assert all(p.is_file() for p in capture.node_sqlite)
    assert "nsys failed (End of file); capturing again in 0 s (attempt 2 of 3)" in said[0]
    assert "End of file" in (launch / "workload.attempt-1.log").read_text()
    assert sorted(line for line in (launch / "workload.log").read_text().splitlines() if line.endswith(" ran")) == [
        f"rank {k} ran" for k in range(4)]

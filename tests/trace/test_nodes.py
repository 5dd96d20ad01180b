"""A job of several nodes, one report each (perfgate/trace/nodes.py, capture/nodes.py): the clock
alignment and the rank assignment as pure functions, the merge of real exports into one job, the
commands of each node, the fan-out that runs them, and bad settings as errors naming them."""
from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from perfgate.analysis import AnalysisOptions, analyze
from perfgate.capture.command import Rendezvous, workload_command
from perfgate.capture.nodes import FANOUT, endpoint, job_command, node_stem, store_command
from perfgate.cli import main
from perfgate.errors import ConfigError, TraceError
from perfgate.baselines.provenance import recorded_command
from perfgate.records.ranks import RankStats, rank_name
from perfgate.settings.pyproject import parse_workload
from perfgate.settings.workloads import WorkloadSpec
from perfgate.trace.columns import Columns
from perfgate.trace.export import load_trace
from perfgate.trace.nodes import (
    clock_offsets, job_reports, merge_traces, node_order, node_processes, reported_ranks,
)
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"


def _marks(rows: list[tuple[int, str]]) -> Columns:
    return Columns({"start": np.arange(len(rows), dtype=np.int64), "text": np.array([t for _, t in rows], dtype=object),
                    "global_tid": np.array([p << 24 for p, _ in rows], dtype=np.int64),
                    "pid": np.array([p for p, _ in rows], dtype=np.int64)})


def test_clocks_are_aligned_on_the_earliest_session_start() -> None:
    assert clock_offsets([1_000_500, 1_000_000, 1_048_000], ["a", "b", "c"]) == [500, 0, 48_000]
    with pytest.raises(TraceError, match="b: no session start time"):
        clock_offsets([1, None], ["a", "b"])


def test_ranks_come_from_the_processes_marks() -> None:
    marks = _marks([(7, "perfgate/rank:3:1:1"), (7, "perfgate/rank:9:9:9"), (8, "perfgate/batch:4"),
                    (9, "perfgate/rank:x:0:1"), (5, "perfgate/rank:2:0:1")])
    assert reported_ranks(marks) == {7: (3, 1, 1), 5: (2, 0, 1)}


def test_nodes_are_ordered_by_their_group_rank_else_as_given() -> None:
    # c10d numbers the nodes in its own order: the report given first may be node 1
    assert node_order([{5: (2, 0, 1), 6: (3, 1, 1)}, {1: (0, 0, 0)}]) == [1, 0]
    assert node_order([{}, {}]) == [0, 1]                                   # no marks: as given
    assert node_order([{5: (0, 0, 0)}, {1: (1, 1, 0)}]) == [0, 1]           # two say node 0: as given


def test_each_process_gets_a_merged_pid_in_rank_order() -> None:
    # local rank 1 has the smaller pid; torchrun's agent (no mark) comes after the ranks
    procs = node_processes(1, np.array([40, 30, 10, 40]), {40: (2, 0, 1), 30: (3, 1, 1)})
    assert [(pid, p.pid, p.rank, p.local_rank) for pid, p in sorted(procs.items())] == [
        (1 << 16 | 1, 40, 2, 0), (1 << 16 | 2, 30, 3, 1), (1 << 16 | 3, 10, None, None)]
    unmarked = node_processes(0, np.array([30, 10]), {})
    assert [p.pid for _, p in sorted(unmarked.items())] == [10, 30]


def test_a_rank_is_named_with_its_node_in_a_job_of_several() -> None:
    assert rank_name(3) == "rank 3" and rank_name(3, 1) == "node 1 rank 3"
    r = RankStats(rank=3, pid=1, steps=1, step_time_ms=1.0, phase_cpu_ms={}, node=1, local_rank=1)
    assert RankStats.__dataclass_fields__["node"].default is None and r.node == 1


def test_two_reports_merge_into_one_job_with_nodes_and_ranks() -> None:
    one = load_trace(TRACES / "cpu-two-procs" / "trace.sqlite")
    assert one.session_start_utc_ns is not None
    later = replace(load_trace(TRACES / "cpu-two-procs" / "trace.sqlite"),
                    session_start_utc_ns=one.session_start_utc_ns + 5_000_000)
    job = merge_traces([later, one])           # no rank marks: the nodes in the order given
    assert len(job.nvtx) == 2 * len(one.nvtx) and len(np.unique(job.nvtx["row_id"])) == len(job.nvtx)
    first = job.nvtx.take(job.nvtx["pid"] < (1 << 16))
    assert first["start"].min() == one.nvtx["start"].min() + 5_000_000          # node 0: shifted 5 ms
    assert ((job.nvtx["global_tid"] >> 24) & 0xFFFFFF == job.nvtx["pid"]).all()  # pid bits rewritten
    assert "node 0 +5.0 ms, node 1 +0.0 ms" in job.notes[0]
    single = analyze(one, AnalysisOptions())
    a = analyze(job, AnalysisOptions())
    assert [(r.node, r.local_rank, r.rank) for r in a.ranks] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    assert [r.pid for r in a.ranks] == [r.pid for r in single.ranks] * 2
    assert [r.step_time_ms for r in a.ranks] == [r.step_time_ms for r in single.ranks] * 2
    assert a.steps.count == 2 * single.steps.count and a.processes == 4
    assert "aligned on their session start times" in a.warnings[0]
    # the same steps on both nodes, one report's start time 5 ms off: the nodes run 5 ms apart
    assert a.extra["node_step_spread_ms"] == pytest.approx(5.0) and "start 5.000 ms apart" in a.warnings[1]
    assert merge_traces([one]) is one


def test_gpu_ops_of_two_nodes_keep_their_ranks_devices_and_nccl_kernels() -> None:
    one = load_trace(TRACES / "gpu-ddp-2proc" / "trace.sqlite")
    single = analyze(one, AnalysisOptions())
    job = merge_traces([one, load_trace(TRACES / "gpu-ddp-2proc" / "trace.sqlite")])
    a = analyze(job, AnalysisOptions())
    assert single.comm is not None and a.comm is not None
    assert [c.rank for c in a.comm.ranks] == [0, 1, 2, 3]
    assert [c.kernels_per_step for c in a.comm.ranks] == [c.kernels_per_step for c in single.comm.ranks] * 2
    assert len(a.devices) == 2 * len(single.devices)
    assert a.comm.comm_ms == pytest.approx(single.comm.comm_ms)
    # the CUDA API calls of the measured window: each node's own, added up (per step: as one node's)
    assert single.gpu is not None and a.gpu is not None and single.gpu.cuda_api_ms_per_step > 0
    assert a.gpu.cuda_api_ms_per_step == pytest.approx(single.gpu.cuda_api_ms_per_step, rel=0.01)
    assert a.gpu.sync_calls_per_step == pytest.approx(single.gpu.sync_calls_per_step, rel=0.01)
    assert a.gpu.kernels_per_step == pytest.approx(single.gpu.kernels_per_step, rel=0.01)


def test_a_folder_holds_a_jobs_reports(tmp_path: Path) -> None:
    for name in ("node_10.sqlite", "node_2.sqlite", "node_0.nsys-rep", "workload.log"):
        (tmp_path / name).write_text("")
    assert [p.name for p in job_reports(tmp_path)] == ["node_2.sqlite", "node_10.sqlite"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TraceError, match="no nsys report"):
        job_reports(tmp_path / "empty")


def test_each_node_runs_torchrun_with_the_shared_c10d_rendezvous() -> None:
    spec = WorkloadSpec(name="job", module="jobs.job", launcher="torchrun", nproc=2, nnodes=2, args=("--x",))
    cmd = workload_command(spec, "python", rendezvous=Rendezvous(1, "127.0.0.1:29500", "run-1"))
    assert cmd == ["python", "-m", "torch.distributed.run", "--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d",
                   "--rdzv-endpoint=127.0.0.1:29500", "--rdzv-id=run-1", "--nproc-per-node=2", "-m", "jobs.job", "--x"]
    assert "--standalone" in workload_command(replace(spec, nnodes=1), "python")
    # the store hosted outside the nodes: each of them a client
    hosted = workload_command(spec, "python", rendezvous=Rendezvous(0, "127.0.0.1:29500", "run-1", hosted=True))
    assert hosted[hosted.index("--rdzv-id=run-1") + 1] == "--rdzv-conf=is_host=0"
    assert store_command("127.0.0.1:29500", "python")[-2:] == ["127.0.0.1", "29500"]
    assert endpoint(spec, lambda: 1234) == "127.0.0.1:1234"
    assert endpoint(replace(spec, rdzv_endpoint="node0.cluster"), lambda: 1234) == "node0.cluster:1234"
    assert endpoint(replace(spec, rdzv_endpoint="node0.cluster:29400"), lambda: 1234) == "node0.cluster:29400"
    assert node_stem("trace", 1) == "trace-node1"
    # a baseline records the job's shape: two nodes of two are not the one-node job
    assert recorded_command("m", [], "torchrun", 2, 2) == "torchrun --nnodes=2 --nproc-per-node=2 -m m"


@pytest.mark.slow   # 11 s: a node left waiting is stopped after the grace period
def test_the_fanout_runs_every_node_and_exits_with_a_failed_ones_status() -> None:
    ok = [sys.executable, "-c", "pass"]
    assert subprocess.run(job_command([ok, ok]), timeout=60).returncode == 0
    assert subprocess.run(job_command([ok, [sys.executable, "-c", "raise SystemExit(3)"]]), timeout=60).returncode == 3
    # a node left waiting for a failed one is stopped (SIGINT) after the grace period
    started = time.monotonic()
    waiting = [sys.executable, "-c", "import signal, sys, time; signal.signal(signal.SIGINT, lambda *a: sys.exit(130)); "
               "time.sleep(120)"]
    proc = subprocess.run(job_command([waiting, [sys.executable, "-c", "raise SystemExit(4)"]]), timeout=100,
                          capture_output=True)
    assert proc.returncode == 4 and time.monotonic() - started < 90
    assert FANOUT.is_file()


def test_the_store_outlives_every_node(tmp_path: Path) -> None:
    """The rendezvous's store starts before the nodes and ends after the last one: a node that still
    talks to it after another node ended (torchrun's agent polls it until its own workers end) finds
    it, and nothing of it is left running."""
    from perfgate.capture.nodes import free_port

    port = free_port()
    pid_file = tmp_path / "store.pid"
    store = [sys.executable, "-c", "import os, socket, sys\n"
             f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
             "s = socket.create_server((sys.argv[1], int(sys.argv[2])))\n"
             "while True:\n    s.accept()[0].close()\n", "127.0.0.1", str(port)]
    first = [sys.executable, "-c", "import socket; socket.create_connection(('127.0.0.1', %d)).close()" % port]
    later = [sys.executable, "-c", "import socket, time; time.sleep(1.5); "
             "socket.create_connection(('127.0.0.1', %d), timeout=5).close()" % port]
    started = time.monotonic()
    assert subprocess.run(job_command([first, later], store=store), timeout=60).returncode == 0
    assert time.monotonic() - started < 30
    pid = int(pid_file.read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


@pytest.mark.parametrize("table, problem", [
    ({"launcher": "torchrun", "nnodes": 0}, "nnodes: expected a positive number, got 0"),
    ({"launcher": "torchrun", "nnodes": "2"}, "nnodes"),
    ({"nnodes": 2}, 'nnodes: 2 nodes need launcher = "torchrun"'),
    ({"launcher": "torchrun", "nnodes": 2, "rdzv_endpoint": "a b"}, "rdzv_endpoint: expected host or host:port"),
])
def test_bad_node_settings_are_errors_naming_them(table: dict, problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_workload("job", table, "[tool.perfgate.workloads.job]")


def test_nnodes_zero_exits_2_naming_the_setting(tmp_path: Path, capsys) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.perfgate.workloads.job]\nmodule = "job"\nlauncher = "torchrun"\n'
                                             "nnodes = 0\n")
    assert main(["list", "--root", str(tmp_path)]) == 2
    assert "[tool.perfgate.workloads.job] nnodes: expected a positive number, got 0" in capsys.readouterr().err


def test_a_process_torchrun_started_marks_its_ranks(tmp_path: Path, torch_module: object) -> None:
    """Autostep's mark at ``import torch`` in a process with torchrun's RANK, LOCAL_RANK and
    GROUP_RANK; none in a process without them (torchrun's agent, a plain run)."""
    import os

    import perfgate
    from perfgate.capture.command import capture_environment

    base = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_") and k not in ("RANK", "LOCAL_RANK")}
    base["PYTHONPATH"] = str(Path(perfgate.__file__).resolve().parents[1])
    seen = []
    for ranks in ({"RANK": "3", "LOCAL_RANK": "1", "GROUP_RANK": "1"}, {}):
        debug = tmp_path / f"debug-{len(seen)}"
        env = {**capture_environment(base), "PERFGATE_AUTOSTEP_DEBUG": str(debug), **ranks}
        proc = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True, text=True,
                              timeout=240, check=False)
        assert proc.returncode == 0, proc.stderr[-2000:]
        seen.append([ln.split(" ", 2)[2] for ln in (debug.read_text().splitlines() if debug.exists() else [])
                     if ln.split(" ", 2)[1] == "mark"])
    assert seen == [["perfgate/rank:3:1:1"], []]


def test_a_folder_of_reports_says_which_workload_it_measured(tmp_path: Path) -> None:
    """``perfgate compare`` refuses two inputs of different workloads; a job's launch folder
    (``<run>/launch-<k>/trace-node<i>.sqlite``) says its run's workload like its first report."""
    import json
    import shutil

    from perfgate.commands.compare_inputs import identity

    launch = tmp_path / "run" / "launch-0"
    launch.mkdir(parents=True)
    shutil.copy(TRACES / "cpu-two-procs" / "trace.sqlite", launch / "trace-node0.sqlite")
    (tmp_path / "run" / "result.json").write_text(json.dumps({"workload": "nodes"}))
    found = identity(launch)
    assert found.path == launch and found.workload == "nodes"
    assert identity(tmp_path).workload is None

"""Issue 19's multi-GPU run: the gate on the ``ddp`` workload (torchrun, one process per GPU, NCCL),
declared in pyproject.toml, through perfgate's pipeline: a baseline, an unchanged rerun, a straggler
(one rank sleeps in forward) and a communication change (much smaller DDP buckets). Writes
``results.md`` (verdicts, first reasons, the per-rank table of every run) and ``results.json``.

    python3 scripts/gpu/ddp_ranks.py OUT_DIR                  # on a machine with 2+ GPUs
    python3 scripts/gpu/ddp_ranks.py OUT_DIR --size cpu       # the same on a CPU (gloo), to check it
    python3 scripts/gpu/ddp_ranks.py OUT_DIR --backend gloo --nproc 2   # 2 ranks sharing one GPU (gloo)
    python3 scripts/gpu/ddp_ranks.py OUT_DIR --comm no_sync   # the change: no_sync() dropped from accumulation
    python3 scripts/gpu/ddp_ranks.py OUT_DIR --comm p2p_off --comm-only   # NCCL_P2P_DISABLE=1, baseline and change alone

On a GPU every run takes the CUDA-traced profile launch (``profile = "always"``; ``--profile auto``:
only when recording and when the timing launches did not PASS, as the gate does by default): its
analysis has the NCCL communication per rank (perfgate/analysis/comm.py) that the table shows. Every
launch, the timing launches' NVTX-only traces included, has NCCL's calls per step (its NVTX ranges):
the ``communication`` column is the result's line on them, said whatever the verdict.

    python3 scripts/gpu/ddp_ranks.py OUT_DIR --comm no_sync --comm-only --profile auto --gate-alone
        # the change gated as by default, then again with gate_alone = ["collectives_per_step"]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from perfgate.records.model import Analysis, Verdict, WorkloadResult  # noqa: E402

COLUMNS = ("rank", "pid", "GPU", "step ms", "NCCL kernels/step", "comm ms/step", "exposed ms/step", "overlap")


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def rank_rows(a: Analysis) -> list[tuple[str, ...]]:
    """One row per rank: its step time and, with NCCL in the trace, its communication per step."""
    comm = {r.rank: r for r in a.comm.ranks} if a.comm is not None else {}
    rows = []
    for r in a.ranks:
        c = comm.get(r.rank)
        overlap = None if c is None or c.comm_ms <= 0 else 1 - c.exposed_ms / c.comm_ms
        rows.append((str(r.rank), str(r.pid), ",".join(c.devices) if c else "-", _f(r.step_time_ms),
                     _f(c.kernels_per_step, 1) if c else "-", _f(c.comm_ms if c else None),
                     _f(c.exposed_ms if c else None), "-" if overlap is None else f"{overlap * 100:.0f} %"))
    return rows


def rank_table(a: Analysis) -> str:
    """The per-rank table of an analysis, as Markdown, with the job's line under it."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row) + " |" for row in rank_rows(a)]
    job = f"job: {a.steps.summary_ms.median:.2f} ms/step (median), rank skew {_f(a.rank_skew_ms)} ms"
    if a.comm is not None:
        job += (f"; NCCL {a.comm.kernels_per_step:.1f} kernels, {a.comm.comm_ms:.2f} ms, exposed "
                f"{a.comm.exposed_ms:.2f} ms per step and rank, overlap {_f((a.comm.overlap_fraction or 0) * 100, 0)} %")
    return "\n".join(lines) + "\n\n" + job + "\n"


def _shown(result: WorkloadResult) -> Analysis | None:
    return result.profile or (result.analyses[0] if result.analyses else None)


def main(argv: list[str] | None = None) -> int:
    from perfgate.settings.config import load_settings
    from perfgate.pipeline.workload_run import run_workload
    from perfgate.settings.workloads import discover_workloads, select_workloads

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=("gpu", "cpu"), default="gpu")
    parser.add_argument("--comm", choices=("buckets", "no_sync", "p2p_off"), default="buckets",
                        help="the communication change: buckets (--bucket-cap-mb, against DDP's default 25 MB), "
                             "no_sync (every run accumulates --micro-steps micro-batches inside no_sync(); the change "
                             "drops no_sync, all-reducing every micro-batch) or p2p_off (the change runs with "
                             "NCCL_P2P_DISABLE=1: all-reduces through host memory instead of NVLink/PCIe P2P)")
    parser.add_argument("--comm-only", action="store_true",
                        help="record the baseline and run the communication change alone (no rerun, no straggler)")
    parser.add_argument("--bucket-cap-mb", default="1", help="the bucket change (DDP's default: 25)")
    parser.add_argument("--micro-steps", default="4", help="micro-batches per step with --comm no_sync (default 4)")
    parser.add_argument("--extra-args", default="", help="more workload arguments for every run (space-separated)")
    parser.add_argument("--record-launches", type=int, default=3,
                        help="baseline launches on GPUs (default 3, where the gate's is 5: four runs must fit "
                             "one 10-minute device call)")
    parser.add_argument("--max-launches", type=int, default=4, help="most launches of each gate run on GPUs (default 4)")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None,
                        help="the workload's --backend (gloo: ranks may share a GPU, no NCCL kernels)")
    parser.add_argument("--nproc", type=int, default=None, help="ranks (default: one per GPU, 2 on a CPU)")
    parser.add_argument("--profile", choices=("always", "auto"), default="always",
                        help="the profile launch on GPUs: always (default), or auto as the gate's default")
    parser.add_argument("--confirm", choices=("auto", "always", "never"), default="auto",
                        help="the gate's confirm setting (never: the stored baseline decides alone, fewer launches)")
    parser.add_argument("--gate-alone", action="store_true",
                        help="run the communication change again with gate_alone = ['collectives_per_step']")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    gpu = args.size == "gpu"
    overrides: dict[str, Any] = {"artifacts_dir": str(out / "runs"), "baseline_dir": str(out / "baselines"),
                                 "report_dir": str(out / "report"), "size": args.size, "confirm": args.confirm}
    # on a CPU a smoke check of the script: one launch each, a loose tolerance (shared cores are noisy)
    overrides.update({"profile": args.profile, "record_launches": args.record_launches,
                      "max_launches": args.max_launches} if gpu else
                     {"launches": 1, "tolerance": {"step_time*": "50%+5", "phase.*": "off"}})
    settings = load_settings(ROOT, env={}, overrides=overrides)
    from perfgate.system.machine import machine_info

    gpus = machine_info(None, settings.machine_class).gpu_count
    if gpu and gpus < 2 and args.backend != "gloo":
        print(f"ddp_ranks: {gpus} GPU(s) visible; the multi-GPU run needs 2 or more (or --backend gloo, "
              "where ranks share a GPU)", file=sys.stderr)
        return 2
    spec = select_workloads(discover_workloads(settings, gpus if gpu else 0), ["ddp"])[0]
    backend = ("--backend", args.backend) if args.backend else ()
    no_sync = ("--no-sync-steps", args.micro_steps) if args.comm == "no_sync" else ()
    base_args = (*spec.args, *backend, *args.extra_args.split())
    spec = replace(spec, args=(*base_args, *no_sync),
                   nproc=args.nproc or max(spec.nproc, 2))
    results: dict[str, WorkloadResult] = {}
    changes: dict[str, str] = {}
    where = (f"ranks on {gpus} GPU{'s' if gpus != 1 else ''} ({args.backend or 'nccl'})" if gpu
             else "CPU processes (gloo)")

    def run(name: str, change: str, run_spec: Any, **kwargs: Any) -> None:
        """One gate run; its verdict printed and results.md/results.json written as it ends, so that a run
        stopped at a time limit keeps the runs it finished."""
        started = time.monotonic()
        results[name] = r = run_workload(run_spec, settings, **kwargs)
        changes[name] = change
        print(f"ddp_ranks: {name}: {r.verdict} after {time.monotonic() - started:.0f} s", flush=True)
        write(out, f"# ddp: {spec.nproc} {where}\n", results, changes)

    run("baseline", "recorded" + (f" ({' '.join(no_sync)})" if no_sync else ""), spec, update_baseline=True)
    if not args.comm_only:
        run("rerun", "unchanged", spec)
    base = _shown(results["baseline"])
    step_ms = base.steps.summary_ms.median if base is not None else 50.0
    # the straggler sleeps in every forward: half a step in all on GPUs; on a CPU five (the other
    # rank's compute speeds up while it sleeps, the cores being shared)
    micro = int(args.micro_steps) if no_sync else 1
    slow_ms = max((0.5 if gpu else 5.0) * step_ms / micro, 10.0)
    slow = ("--slow-rank", str(spec.nproc - 1), "--slow-phase", "forward", "--slow-ms", f"{slow_ms:.0f}")
    if not args.comm_only:
        run("straggler", " ".join(slow), replace(spec, args=(*spec.args, *slow)))
    env: dict[str, str] = {}
    if args.comm == "no_sync":   # the same micro-batches, each all-reduced: no_sync() dropped
        comm_name, comm = "no_sync dropped", ("--accumulate", args.micro_steps)
        comm_spec = replace(spec, args=(*base_args, *comm))
    elif args.comm == "p2p_off":   # the same job, its NCCL told not to use peer-to-peer copies
        env = {"NCCL_P2P_DISABLE": "1"}
        comm_name, comm, comm_spec = "P2P off", tuple(f"{k}={v}" for k, v in env.items()), spec
    else:
        comm_name, comm = "small buckets", ("--bucket-cap-mb", args.bucket_cap_mb)
        comm_spec = replace(spec, args=(*spec.args, *comm))
    with mock.patch.dict(os.environ, env):   # the capture's environment is this process's (perfgate.capture.launch)
        run(comm_name, " ".join(comm), comm_spec)
        if args.gate_alone:
            run(f"{comm_name}, gate_alone", f"{' '.join(comm)}; gate_alone = [\"collectives_per_step\"]",
                replace(comm_spec, gate_alone=("collectives_per_step",)))
    print((out / "results.md").read_text())
    return 0


def write(out: Path, title: str, results: dict[str, WorkloadResult], changes: dict[str, str]) -> None:
    """``out/results.md``: each run's verdict, failing rows, first reason and per-rank table;
    ``out/results.json``: the same with each shown analysis whole."""
    md = [title, "| run | change | verdict | step ms (baseline -> current) | first reason | communication |",
          "|---|---|---|---|---|---|"]
    doc: dict[str, Any] = {}
    for name, r in results.items():
        row = next((c for c in r.comparisons if c.metric == "step_time_ms"), None)
        first = r.attribution.first_reason if r.attribution is not None else ""
        steps = "-" if row is None else f"{_f(row.baseline)} -> {_f(row.current)}"
        failed = [c.metric for c in r.comparisons if c.gating and c.verdict == Verdict.REGRESSED]
        which = f" ({', '.join(failed)})" if failed else ""
        said = next((n.text for n in r.notes if n.text.startswith("communication: ")), "")
        calls = "-" if (a := _shown(r)) is None or a.collectives is None else f"{a.collectives.per_step:.1f}"
        md.append(f"| {name} | {changes[name]} | {r.verdict}{which} | {steps} | {first} | "
                  f"{said or f'(nothing said; {calls} NCCL calls/step)'} |")
        shown = _shown(r)
        doc[name] = {"verdict": str(r.verdict), "first_reason": first, "communication": said, "error": r.error, "message": r.message,
                     "regressed": failed,
                     "attribution": r.attribution.to_dict() if r.attribution is not None else None,
                     "analysis": shown.to_dict() if shown is not None else None}
    for name, r in results.items():
        shown = _shown(r)
        if shown is not None:
            md += ["", f"## {name} ({'profile launch' if r.profile is not None else 'timing launch'})", "",
                   rank_table(shown)]
    (out / "results.md").write_text("\n".join(md) + "\n")
    (out / "results.json").write_text(json.dumps(doc, indent=1, default=str))


if __name__ == "__main__":
    raise SystemExit(main())

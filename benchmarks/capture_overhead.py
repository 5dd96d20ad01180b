"""What the capture costs and whether it changes what it measures: each workload run bare and under
``nsys profile`` with each trace set, one after the other, with perfgate's own capture path
(``perfgate.capture.launch.run_capture``: the gate's command line, environment and autostep).

    python3 benchmarks/capture_overhead.py                       # transformer_lm resnet_cifar hf_trainer lightning_loop
    python3 benchmarks/capture_overhead.py plain_loop --modes bare nvtx cuda,nvtx --repeats 2
    python3 benchmarks/capture_overhead.py --out overhead.json   # also writes overhead.md beside it

Per run: the process's wall time (for nsys modes: profile + SQLite export, as the gate runs it),
the workload's own host-timed median iteration (its ``PERFGATE_SELF_REPORT`` line), and for nsys
modes perfgate's ``step_time_ms`` (median iteration period) of the trace with the time
``perfgate.analysis`` took. ``bare`` is ``python -m workloads.<name>`` with no nsys and no autostep,
as a user runs it. Runs of one workload are interleaved round by round (``--repeats``) so that
drift hits every mode alike. Prints a Markdown table; results are written as they come.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perfgate.capture.command import workload_command  # noqa: E402
from perfgate.capture.launch import parse_self_report, run_capture  # noqa: E402
from perfgate.settings.config import load_settings  # noqa: E402
from perfgate.settings.workloads import discover_workloads, select_workloads  # noqa: E402
from perfgate.system.machine import machine_info  # noqa: E402

DEFAULT_WORKLOADS = ("transformer_lm", "resnet_cifar", "hf_trainer", "lightning_loop")
DEFAULT_MODES = ("bare", "nvtx", "cuda,nvtx", "cuda,nvtx,osrt")


def bare_run(spec, root: Path, log: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PERFGATE_AUTOSTEP"}
    env["PYTHONUNBUFFERED"] = "1"
    started = time.monotonic()
    proc = subprocess.run(workload_command(spec), cwd=root, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.monotonic() - started
    log.write_text(proc.stdout)
    report = parse_self_report(proc.stdout) or {}
    return {"wall_s": wall, "own_ms": report.get("step_ms_median"), "returncode": proc.returncode}


def traced_run(spec, settings, trace: str, launch_dir: Path) -> dict:
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.trace.export import load_trace

    capture = run_capture(spec, dataclasses.replace(settings, trace=trace), launch_dir)
    report = capture.self_report or {}
    started = time.monotonic()
    analysis = analyze(load_trace(capture.sqlite_path), AnalysisOptions.given(spec.step_pattern, spec.skip_steps, spec.batch_size))
    return {"wall_s": capture.wall_s, "own_ms": report.get("step_ms_median"),
            "perfgate_ms": analysis.steps.summary_ms.median, "analysis_s": time.monotonic() - started,
            "steps": analysis.steps.count, "trace_mib": capture.sqlite_path.stat().st_size / 2**20}


def table(rows: list[dict]) -> str:
    out = ["| workload | capture | wall s | own median ms | vs bare | perfgate step_time_ms | vs bare (own) |",
           "|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        by.setdefault((r["workload"], r["mode"]), []).append(r)
    for (name, mode), runs in by.items():
        bare = by.get((name, "bare"), [])
        bare_ms = statistics.median([b["own_ms"] for b in bare if b.get("own_ms")]) if bare else None
        wall = statistics.median([r["wall_s"] for r in runs])
        own = [r["own_ms"] for r in runs if r.get("own_ms")]
        own_ms = statistics.median(own) if own else None
        pg = [r["perfgate_ms"] for r in runs if r.get("perfgate_ms")]
        pg_ms = statistics.median(pg) if pg else None

        def rel(v):
            return f"{(v / bare_ms - 1) * 100:+.1f} %" if v and bare_ms else "-"
        out.append(f"| {name} | {mode} | {wall:.1f} | {own_ms:.2f} | {rel(own_ms)} | "
                   f"{f'{pg_ms:.2f}' if pg_ms else '-'} | {rel(pg_ms)} |" if own_ms else
                   f"| {name} | {mode} | {wall:.1f} | - | - | - | - |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="*", default=list(DEFAULT_WORKLOADS))
    ap.add_argument("--modes", nargs="+", default=list(DEFAULT_MODES))
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--size", default="auto")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--work", type=Path, default=None, help="launch folders (default: a temporary folder)")
    args = ap.parse_args(argv)

    settings = load_settings(ROOT, overrides={"size": args.size})
    gpus = machine_info(None, settings.machine_class).gpu_count
    specs = select_workloads(discover_workloads(settings, gpus), args.workloads)
    work = args.work or Path(tempfile.mkdtemp(prefix="perfgate-overhead-"))
    rows: list[dict] = []
    for spec in specs:
        for k in range(args.repeats):
            for mode in args.modes:
                launch_dir = work / f"{spec.full_name}-{mode.replace(',', '+')}-{k}"
                launch_dir.mkdir(parents=True, exist_ok=True)
                try:
                    row = (bare_run(spec, ROOT, launch_dir / "bare.log") if mode == "bare"
                           else traced_run(spec, settings, mode, launch_dir))
                except Exception as exc:  # noqa: BLE001 - a failed run is a row, not the end
                    row = {"wall_s": float("nan"), "error": f"{type(exc).__name__}: {exc}"[:2000]}
                row.update(workload=spec.full_name, mode=mode, repeat=k)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    md = table([r for r in rows if "error" not in r])
    print(md)
    if args.out:
        args.out.with_suffix(".md").write_text(md + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

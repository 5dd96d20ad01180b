"""Whole-command timings: ``perfgate analyze --format json`` (diagnosis included) beside
``nsys stats`` on the same export, each as its own process, with its peak RSS.

    python3 benchmarks/bench_command.py                          # committed captures + 10^4, 10^6 ops
    python3 benchmarks/bench_command.py --sizes 10000 1000000 10000000
    python3 benchmarks/bench_command.py --exports run.sqlite --nsys /path/to/nsys \\
        --reports nvtx_sum,nvtx_gpu_proj_sum,cuda_gpu_kern_sum  # a capture on the GPU machine
    git archive COMMIT | tar -x -C /tmp/before
    python3 benchmarks/bench_command.py --before /tmp/before   # that commit's command beside this one
    python3 benchmarks/bench_command.py --no-duckdb            # the sqlite3 reader (no duckdb installed)

Generated exports (``--sizes``) are the toy H100 capture's rows replicated with shifted timestamps
(``bench_analyze.build_scaled_export``), kept in ``--work`` between runs; ``--scale-from
gpu-transformer`` replicates that committed capture instead, every table of timed events (its OS
runtime calls, CUDA synchronisation and nsys's own overhead: the rows a real capture has per GPU
operation). ``nsys stats`` prints its
reports to stdout as it does by default (``--csv``: CSV files instead, as ``-f csv -o``); report
names are given in either naming scheme and mapped to the nsys found. ``--before DIR`` times the
command of another checkout (e.g. ``git archive``) in the same run, export by export, beside this
one; ``--no-duckdb`` runs both as if duckdb were not installed. Each checkout's ``perfgate`` is
byte-compiled first (``compileall``), as ``pip install`` does: where ``PYTHONDONTWRITEBYTECODE`` is
set, a command would otherwise compile every module it imports, each time. Each run (``--runs``
below 10^6 GPU ops, ``--runs-large`` from there; the median is printed) takes the commands in
turn. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_analyze import H100, build_scaled_export  # noqa: E402

from perfgate.system.nsys import find_nsys, resolve_report_name  # noqa: E402

CAPTURES = ("toy-h100", "gpu-transformer", "gpu-ddp-2proc", "reverse-ladder-full")
# perfgate's command with duckdb hidden: its sqlite3 reader, as on a machine without duckdb
NO_DUCKDB = ("import runpy, sys; sys.modules['duckdb'] = None; sys.argv = ['perfgate'] + sys.argv[1:]; "
             "runpy.run_module('perfgate', run_name='__main__')")
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")


def gpu_ops(path: Path) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in GPU_TABLES if t in tables)


def timed(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one run of ``cmd`` in ``cwd``, its output discarded (a
    checkout's perfgate runs in that checkout: ``python -m`` puts the working folder first)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.read().decode()[-2000:]}")
    return wall, usage.ru_maxrss / 1024


def best_of(cmd: list[str], runs: int, env: dict[str, str] | None = None,
            cwd: Path | None = None) -> tuple[float, float]:
    results = [timed(cmd, env, cwd) for _ in range(runs)]
    return statistics.median(r[0] for r in results), max(r[1] for r in results)


def nsys_command(nsys: Path, reports: list[str], path: Path, csv: bool, out: Path) -> list[str]:
    names = ",".join(resolve_report_name(nsys, r) for r in reports)
    cmd = [str(nsys), "stats", "-q", "-r", names]
    if csv:
        cmd += ["-f", "csv", "-o", str(Path(tempfile.mkdtemp(dir=out)) / "o")]
    return cmd + [str(path)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exports", nargs="*", type=Path, default=None, help="exports to time (default: committed captures)")
    parser.add_argument("--sizes", nargs="*", type=int, default=[10_000, 1_000_000], help="generated exports of about N GPU ops")
    parser.add_argument("--scale-from", default=None, help="a committed capture (tests/fixtures/traces/<name>) whose "
                        "every timed table the generated exports replicate (default: the toy H100 capture's NVTX, "
                        "CUDA API and GPU tables)")
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "perfgate-bench", help="where generated exports are kept")
    parser.add_argument("--nsys", default=None, help="the nsys to compare with (default: found as perfgate finds it)")
    parser.add_argument("--reports", default="nvtx_sum,cuda_gpu_kern_sum", help="nsys stats reports (either naming scheme)")
    parser.add_argument("--csv", action="store_true", help="nsys stats writes CSV files instead of printing")
    parser.add_argument("--runs", type=int, default=3, help="runs per command below 10^6 GPU ops (median)")
    parser.add_argument("--runs-large", type=int, default=1, help="runs per command from 10^6 GPU ops on (median)")
    parser.add_argument("--before", type=Path, default=None, help="another checkout whose command is timed too")
    parser.add_argument("--no-duckdb", action="store_true", help="read through sqlite3, as without duckdb")
    args = parser.parse_args(argv)

    nsys = find_nsys(args.nsys)
    version = subprocess.run([str(nsys), "--version"], capture_output=True, text=True).stdout.strip()
    reports = args.reports.split(",")
    args.work.mkdir(parents=True, exist_ok=True)
    exports = list(args.exports) if args.exports is not None else \
        [ROOT / "tests" / "fixtures" / "traces" / c / "trace.sqlite" for c in CAPTURES]
    source = H100 if args.scale_from is None else ROOT / "tests" / "fixtures" / "traces" / args.scale_from / "trace.sqlite"
    for n in args.sizes:
        path = args.work.resolve() / f"scaled-{args.scale_from or 'toy'}-{n}.sqlite"
        if not path.is_file():
            build_scaled_export(source, path, n, every_table=args.scale_from is not None)
        exports.append(path)
    checkouts = [ROOT] if args.before is None else [args.before.resolve(), ROOT]
    for checkout in checkouts:   # as pip does on install: no run compiles perfgate's sources again
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "perfgate")], check=True,
                       stdout=subprocess.DEVNULL)
    envs = [{**os.environ, "PYTHONPATH": str(c)} for c in checkouts]
    prefix = [sys.executable, "-c", NO_DUCKDB] if args.no_duckdb else [sys.executable, "-m", "perfgate"]
    help_s, help_mb = best_of([sys.executable, "-m", "perfgate", "--help"], 5, envs[-1], ROOT)
    print(f"nsys: {version} ({nsys}); nsys stats -r {','.join(reports)} {'-f csv -o' if args.csv else '(printed)'}")
    reader = "sqlite3" if args.no_duckdb else "duckdb (sqlite3 for exports under 8 MiB where a checkout says so)"
    print(f"`perfgate --help`: {help_s:.2f} s, {help_mb:.0f} MiB; reader: {reader}\n")
    heads = ["before", "after"] if args.before is not None else ["`perfgate analyze --format json`"]
    print(f"| export | GPU ops | {' | '.join(heads)} | `nsys stats` | ratio |")
    print("|---|---|" + "---|" * len(heads) + "---|---|")
    for path in exports:
        ops = gpu_ops(path)
        runs = args.runs if ops < 1_000_000 else args.runs_large
        commands = [([*prefix, "analyze", str(path.resolve()), "--format", "json"], env, checkout)
                    for env, checkout in zip(envs, checkouts)]
        commands.append((nsys_command(nsys, reports, path, args.csv, args.work), None, None))
        # the commands in turn, run after run: a change of the machine's load hits them alike
        results = [[timed(*c) for c in commands] for _ in range(runs)]
        *ours, theirs = [(statistics.median(r[i][0] for r in results), max(r[i][1] for r in results))
                         for i in range(len(commands))]
        label = path.parent.name if path.name == "trace.sqlite" else path.name
        cells = " | ".join(f"{s:.2f} s, {mb:,.0f} MiB" for s, mb in ours)
        print(f"| {label} | {ops:,} | {cells} | {theirs[0]:.2f} s, {theirs[1]:.0f} MiB "
              f"| {ours[-1][0] / theirs[0]:.2f}x |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

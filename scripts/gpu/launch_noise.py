"""Launch-to-launch noise of a workload run bare (no nsys), variant by variant, launches interleaved.

    python3 scripts/gpu/launch_noise.py resnet_cifar --repeats 3 --variant "" --variant "--workers 14"

Each launch is a fresh ``python -m workloads.<name> ARGS`` process. Per launch it prints the
workload's own host-timed median and mean step and the allocator peaks (its PERFGATE_SELF_REPORT
line); per variant, the coefficient of variation of the launch medians and means. What the gate
sees as "noise" is this spread between launches, not the spread of steps within one.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def launch(name: str, args: list[str]) -> dict:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", f"workloads.{name}", *args], cwd=ROOT, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    report = {}
    for line in done.stdout.splitlines():
        if line.startswith("PERFGATE_SELF_REPORT "):
            report = json.loads(line.split(" ", 1)[1])
    if not report:
        sys.stdout.write(done.stdout[-3000:])
    memory = report.get("gpu_memory") or {}
    return {"wall_s": round(time.monotonic() - started, 1), "rc": done.returncode,
            "median_ms": report.get("step_ms_median"), "mean_ms": report.get("step_ms_mean"),
            "max_allocated_mib": memory.get("max_allocated_bytes", 0) / 2**20 or None,
            "max_reserved_mib": memory.get("max_reserved_bytes", 0) / 2**20 or None}


def cv(values: list[float]) -> str:
    if len(values) < 2:
        return "-"
    return f"{statistics.stdev(values) / statistics.fmean(values) * 100:.2f} %"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workload")
    ap.add_argument("--variant", action="append", default=None, help="workload arguments (repeatable)")
    ap.add_argument("--repeats", type=int, default=3)
    opts = ap.parse_args()
    variants = opts.variant or [""]
    runs: dict[str, list[dict]] = {v: [] for v in variants}
    for k in range(opts.repeats):
        for variant in variants:
            row = launch(opts.workload, shlex.split(variant))
            runs[variant].append(row)
            print(json.dumps({"workload": opts.workload, "variant": variant, "repeat": k, **row}), flush=True)
    print(f"| {opts.workload} variant | launch medians ms | CV of medians | launch means ms | CV of means | peak allocated MiB |")
    print("|---|---|---|---|---|---|")
    for variant, rows in runs.items():
        med = [r["median_ms"] for r in rows if r["median_ms"]]
        mean = [r["mean_ms"] for r in rows if r["mean_ms"]]
        peak = sorted({round(r["max_allocated_mib"]) for r in rows if r["max_allocated_mib"]})
        print(f"| `{variant or '(preset)'}` | {', '.join(f'{v:.2f}' for v in med)} | {cv(med)} | "
              f"{', '.join(f'{v:.2f}' for v in mean)} | {cv(mean)} | {', '.join(map(str, peak)) or '-'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Launch-to-launch noise of ``step_time_ms`` under nsys, with and without cheap ways of steadying
the launched tree (issue 41, item 6): the tree pinned to a fixed CPU set, thread counts fixed
(``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS``: torch's intra-op threads), ``PYTHONHASHSEED``; on a
quiet machine and beside CPU hogs (``while True: pass``).

    python benchmarks/launch_steadiness.py --programs transformer_lm,zoo:time_sequence_prediction \\
        --launches 10 --hogs 0,1 --out /tmp/steadiness

Every launch is taken through the gate's one capture-and-analyze path
(``pipeline.workload_run.launch_capture_and_analysis``, as ``perfgate calibrate`` takes them), the
variants interleaved round by round, in an order that turns each round, so that what a shared
machine's other users do hits every variant alike. The pinning applies to this process while a
launch runs (the supervisor, nsys and the workload inherit it; perfgate only waits meanwhile).
Writes ``<out>/steadiness.json`` and ``.md`` after each round: per program, hogs and variant, the
launches' step times (and each launch's iteration periods, its statistic and step counts), their mean, their CV (sample standard deviation over the mean), and the CPU
cores other processes used beside each launch (its machine state: a shared machine's other users
and the hogs).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from zoo import harness  # noqa: E402

from cpu_hogs import cpu_hogs  # noqa: E402

LAST_CPU = {max(os.sched_getaffinity(0))}
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
#: name -> (environment added, CPU set or None)
VARIANTS: dict[str, tuple[dict[str, str], set[int] | None]] = {
    "plain": ({}, None),
    "pinned": ({}, LAST_CPU),
    "threads1": (ONE_THREAD, None),
    "hashseed": ({"PYTHONHASHSEED": "0"}, None),
    "pinned+threads1": (ONE_THREAD, LAST_CPU),
}


@contextmanager
def launched_with(env: dict[str, str], cpus: set[int] | None) -> Iterator[None]:
    saved_env = {k: os.environ.get(k) for k in env}
    saved_cpus = os.sched_getaffinity(0)
    os.environ.update(env)
    if cpus is not None:
        os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, saved_cpus)
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cpu_list(text: str) -> set[int]:
    """The CPUs of a list such as ``0-7,12``."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def project(name: str, work: Path) -> tuple[Path, str, dict[str, str]]:
    """(project folder, workload name, environment) of ``zoo:<program>`` or a workload of this
    repository."""
    if name.startswith("zoo:"):
        program = harness.load_program(harness.PROGRAMS / name[4:])
        dest = work / "projects" / program.name
        if not dest.exists():
            harness.prepare(program, dest)
        return dest, program.name, dict(program.env)
    return ROOT, name, {}


def cv(values: list[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None


def tables(results: dict[str, Any]) -> str:
    lines = ["| program | hogs | variant | launches | mean step_time_ms | CV | min | max | others' cores (mean) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for key, by_variant in results.items():
        program, hogs = key.rsplit("@", 1)
        for variant, launches in by_variant.items():
            steps = [launch["step_time_ms"] for launch in launches]
            others = [launch["others_cores"] for launch in launches if launch["others_cores"] is not None]
            if not steps:
                continue
            c = cv(steps)
            lines.append(f"| {program} | {hogs} | {variant} | {len(steps)} | {statistics.fmean(steps):.3f} | "
                         f"{'-' if c is None else f'{100 * c:.2f} %'} | {min(steps):.3f} | {max(steps):.3f} | "
                         + (f"{statistics.fmean(others):.2f} |" if others else "- |"))
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", default="transformer_lm")
    parser.add_argument("--launches", type=int, default=10)
    parser.add_argument("--hogs", default="0,1", help="the hog counts to measure beside, comma-separated")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--args", default="", help="added to each launch's command line (e.g. a zoo program's --steps 6)")
    parser.add_argument("--cpus", default=None,
                        help="the pinned variants' CPU set, as taskset writes it (0-7,12); default: the last CPU")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.cpus is not None:
        cpus = cpu_list(args.cpus)
        for name, (extra, pinned) in VARIANTS.items():
            if pinned is not None:
                VARIANTS[name] = (extra, cpus)
    from perfgate.capture.command import TIMING
    from perfgate.pipeline.workload_run import launch_capture_and_analysis
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import discover_workloads, select_workloads
    from perfgate.system.machine import machine_info

    args.out.mkdir(parents=True, exist_ok=True)
    variants = args.variants.split(",")
    results: dict[str, Any] = {}
    gpus = machine_info(None, None).gpu_count
    for name in args.programs.split(","):
        root, workload, env = project(name, args.out)
        settings = load_settings(root, env={})
        spec = select_workloads(discover_workloads(settings, gpus), [workload])[0]
        os.environ.update(env)
        for hogs in map(int, args.hogs.split(",")):
            key = f"{name}@{hogs}"
            results[key] = {v: [] for v in variants}
            with cpu_hogs(hogs):
                for r in range(args.launches):
                    order = variants[r % len(variants):] + variants[:r % len(variants)]
                    for variant in order:
                        extra, cpus = VARIANTS[variant]
                        folder = args.out / "runs" / name.replace(":", "-") / f"hogs{hogs}" / f"{variant}-{r}"
                        started = time.monotonic()
                        with launched_with(extra, cpus):
                            _, analysis = launch_capture_and_analysis(spec, settings, folder, r, TIMING, cwd=root,
                                                                      extra_args=args.args.split())
                        step = float(analysis.metrics()["step_time_ms"])
                        state = analysis.launch.machine_state
                        st = analysis.steps
                        results[key][variant].append({
                            "step_time_ms": step, "others_cores": state and state.others_cores,
                            "statistic": st.statistic, "steps": st.count, "warmup_skipped": st.warmup_skipped,
                            "interludes": st.interludes, "mean_period_ms": st.summary_ms.mean,
                            "median_period_ms": st.summary_ms.median,
                            "periods_ms": [round(x, 3) for x in st.durations_ms]})
                        print(f"{key} {variant} {r}: {step:.3f} ms ({time.monotonic() - started:.0f} s)", flush=True)
                    (args.out / "steadiness.json").write_text(json.dumps(results, indent=1))
                    (args.out / "steadiness.md").write_text(tables(results))
    print(tables(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

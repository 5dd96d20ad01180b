"""What autostep's forward hooks (perfgate/capture/autostep/forward.py) cost a training program:
the zoo's nanoGPT and word_language_model, unmodified, run as the gate's timing launches run them
(``nsys profile --trace=nvtx``, autostep on), ``PERFGATE_AUTOSTEP_FORWARD=0`` and ``1`` in turn
(off, on, on, off, ...), each launch's own per-iteration times (the program prints them) after
the first ``--skip``.

    python benchmarks/forward_hooks.py [--pairs 4] [--gpu] [--out FILE.json]
    python benchmarks/forward_hooks.py --per-call [--calls 20000]

Prints per program the median of each launch's median iteration time, off and on, and their
ratio; ``--gpu`` uses the programs' ``gpu_args`` (the GPU machine), else their ``cpu_args``.
``--per-call``: what one hooked call adds, in one process (autostep installed, a tiny model
trained one step so that its modules are found, then the same call timed on the hooked root and
on an identical module that is not hooked, interleaved in rounds): the cost a training iteration
pays per call of the model's outermost modules, where launch-to-launch noise hides it.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

from perfgate.capture.command import capture_environment  # noqa: E402

PROGRAMS = {"nanogpt": ("--max_iters=60", "--log_interval=1", "--eval_interval=1000", "--eval_iters=2"),
            "word_language_model": ("--epochs", "2", "--log-interval", "5")}


def launch(program: harness.Program, project: Path, extra: tuple[str, ...], forward: str, gpu: bool,
           skip: int) -> float | None:
    cmd = harness.workload_command(program, project, extra, gpu=gpu)
    nsys = [shutil.which("nsys") or "nsys", "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none",
            "--export=none", "-f", "true", "-o", str(project / "bench")]
    env = {**capture_environment({**os.environ, **program.env}), "PERFGATE_AUTOSTEP_FORWARD": forward}
    done = subprocess.run([*nsys, *cmd], cwd=project, env=env, capture_output=True, text=True, timeout=600)
    scale = 1000.0 if program.own_time_unit == "s" else 1.0
    times = [float(t) * scale for t in re.findall(program.own_time_regex or "$^", done.stdout + done.stderr)][skip:]
    return statistics.median(times) if done.returncode == 0 and times else None


def per_call(calls: int) -> None:
    import time

    import torch

    from perfgate.capture.autostep import install as autostep

    os.environ["PERFGATE_AUTOSTEP"] = "1"
    autostep.install()
    try:
        hooked = torch.nn.Sequential(torch.nn.Linear(8, 8))
        torch.nn.functional.mse_loss(hooked(torch.randn(2, 8)), torch.zeros(2, 8)).backward()   # finds it
        bare = torch.nn.Sequential(torch.nn.Linear(8, 8)).requires_grad_(False)   # never found: not trained
        assert len(hooked._forward_pre_hooks) == 1 and not bare._forward_pre_hooks, "the model was not hooked"
        x = torch.randn(2, 8)
        rounds: dict[str, list[float]] = {"bare": [], "hooked": []}
        with torch.no_grad():
            for _ in range(20):
                for name, module in (("bare", bare), ("hooked", hooked)):
                    t0 = time.perf_counter_ns()
                    for _ in range(calls // 20):
                        module(x)
                    rounds[name].append((time.perf_counter_ns() - t0) / (calls // 20) / 1000)
    finally:
        autostep.uninstall()
    bare_us, hooked_us = statistics.median(rounds["bare"]), statistics.median(rounds["hooked"])
    print(f"| call | us per call (median of 20 rounds of {calls // 20}) |\n|---|---|\n| not hooked | {bare_us:.2f} |\n"
          f"| hooked (forward range) | {hooked_us:.2f} |\n| added by the hooks | {hooked_us - bare_us:.2f} |")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--per-call", action="store_true")
    p.add_argument("--calls", type=int, default=20000)
    p.add_argument("--pairs", type=int, default=4)
    p.add_argument("--skip", type=int, default=10)
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    if args.per_call:
        per_call(args.calls)
        return 0
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in PROGRAMS.items():
            program = harness.load_program(harness.PROGRAMS / name)
            project = harness.prepare(program, Path(tmp) / name)
            for k in range(args.pairs):
                for forward in (("0", "1") if k % 2 == 0 else ("1", "0")):
                    ms = launch(program, project, extra, forward, args.gpu, args.skip)
                    rows.append({"program": name, "pair": k, "forward": forward, "own_ms_median": ms})
                    print(json.dumps(rows[-1]), flush=True)
    print("\n| program | launches a side | off: median of launches (ms) | on (ms) | on / off |\n|---|---|---|---|---|")
    for name in PROGRAMS:
        side = {f: [r["own_ms_median"] for r in rows if r["program"] == name and r["forward"] == f
                    and r["own_ms_median"] is not None] for f in ("0", "1")}
        if side["0"] and side["1"]:
            off, on = statistics.median(side["0"]), statistics.median(side["1"])   # type: ignore[type-var]
            print(f"| {name} | {len(side['0'])} | {off:.2f} | {on:.2f} | {on / off:.3f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""On the GPU machine: autostep's forward range (issue 42, perfgate/capture/autostep/forward.py) on the
zoo's unmodified programs, and what it costs.

    source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
        python3 scripts/gpu/forward-phase.py --out $OUT

1. Each program captured once as the gate's profile launch captures it (``--trace=cuda,nvtx``,
   autostep on): ``$OUT/forward-phase.tar`` holds ``<program>/{trace.sqlite.xz,workload.log}``;
   the phases are read here afterwards (``perfgate analyze``).
2. The cost: the programs that print their own iteration time run as the gate's timing launches
   run (``--trace=nvtx``, autostep on) with ``PERFGATE_AUTOSTEP_FORWARD=0`` and ``1`` in turn (off,
   on, on, off, ...), their own times (after the first ``SKIP`` of each run) in ``$OUT/cost.json``.
"""
from __future__ import annotations

import argparse
import json
import lzma
import os
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

from perfgate.capture.command import capture_environment  # noqa: E402

NANOGPT = ("--compile=False", "--max_iters=60", "--eval_interval=1000", "--eval_iters=2", "--log_interval=1")
CAPTURES = {"nanogpt": NANOGPT, "word_language_model": ("--epochs", "2"), "timm_ddp": ("--epochs", "3", "-j", "6"),
            "dcgan": ("--niter", "2"), "lightning_mnist": ("--trainer.max_epochs=1",)}
#: (label, program, args, runs of each side)
COSTS = (("nanogpt", "nanogpt", NANOGPT, 2),
         ("word_language_model", "word_language_model", ("--epochs", "3", "--log-interval", "5"), 2),
         ("nanogpt (torch.compile)", "nanogpt", ("--max_iters=60", "--eval_interval=1000", "--eval_iters=2",
                                                  "--log_interval=1"), 1))
SKIP = 10


CPU = os.environ.get("FORWARD_PHASE_CPU") == "1"     # this script's own check: cpu_args, no CUDA trace


def launch(program: harness.Program, project: Path, extra: tuple[str, ...], out: Path, trace: str,
           forward: str) -> tuple[int, str]:
    out.mkdir(parents=True, exist_ok=True)
    nsys = ["nsys", "profile", f"--trace={'nvtx' if CPU else trace}", "--sample=none", "--cpuctxsw=none", "--export=sqlite", "-f", "true",
            "-o", str(out / "trace")]
    env = {**capture_environment({**os.environ, **program.env}), "PERFGATE_AUTOSTEP_FORWARD": forward}
    cmd = harness.workload_command(program, project, extra, gpu=not CPU)
    done = subprocess.run([*nsys, *cmd], cwd=project, env=env, capture_output=True, text=True, timeout=400)
    log = " ".join(cmd) + "\n\n" + done.stdout + done.stderr
    (out / "workload.log").write_text(log)
    (out / "trace.nsys-rep").unlink(missing_ok=True)
    return done.returncode, log


def own_ms(program: harness.Program, log: str) -> list[float]:
    scale = 1000.0 if program.own_time_unit == "s" else 1.0
    return [float(m) * scale for m in re.findall(program.own_time_regex or "$^", log)]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/forward-phase"))
    p.add_argument("--seconds", type=float, default=480)
    args = p.parse_args()
    started = time.monotonic()
    shutil.rmtree(args.work, ignore_errors=True)
    projects: dict[str, tuple[harness.Program, Path]] = {}

    def project(name: str) -> tuple[harness.Program, Path]:
        if name not in projects:
            program = harness.load_program(harness.PROGRAMS / name)
            projects[name] = (program, harness.prepare(program, args.work / name / "project"))
        return projects[name]

    cost: list[dict[str, object]] = []
    for label, name, extra, runs in COSTS:
        program, folder = project(name)
        for k in range(runs):
            for forward in (("0", "1") if k % 2 == 0 else ("1", "0")):
                if time.monotonic() - started > args.seconds / 2:
                    break
                rc, log = launch(program, folder, extra, args.work / "cost" / f"{name}-{k}-{forward}", "nvtx", forward)
                times = own_ms(program, log)[SKIP:]
                row = {"program": label, "forward": forward, "run": k, "returncode": rc, "iterations": len(times),
                       "own_ms_median": statistics.median(times) if times else None}
                cost.append(row)
                print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "cost.json").write_text(json.dumps(cost, indent=1))
    captures = args.work / "captures"
    for name, extra in CAPTURES.items():
        if time.monotonic() - started > args.seconds:
            print(f"[{name}] skipped: over {args.seconds:.0f} s", flush=True)
            continue
        program, folder = project(name)
        t0 = time.monotonic()
        rc, _ = launch(program, folder, extra, captures / name, "cuda,nvtx", "1")
        db = captures / name / "trace.sqlite"
        if db.is_file():
            with open(db, "rb") as src, lzma.open(captures / name / "trace.sqlite.xz", "wb") as dst:
                shutil.copyfileobj(src, dst)
            db.unlink()
        print(f"[{name}] exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)
    with tarfile.open(args.out / "forward-phase.tar", "w") as tf:
        tf.add(captures, arcname="forward-phase")
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

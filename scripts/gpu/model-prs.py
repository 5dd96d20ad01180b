"""On the GPU machine: the zoo's model pull requests (issue 42), each side captured once the way the
gate's profile launch captures it (``nsys profile --trace=cuda,nvtx --cuda-memory-usage=true``,
autostep on), with nsys's own stats of each capture beside it.

    source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
        python3 scripts/gpu/model-prs.py --out $OUT [--only nanogpt,dcgan] [--seconds 520]

A pull request is the program's declared ``gpu_args``, the sizing below (the same on both sides: a
shorter run) and the pull request's own flags last (a flag given twice takes the later value): a
deeper, a wider, a larger-batch and a longer-sequence (or larger-image) model, changed the way its
user would, through the program's own flags. Writes ``$OUT/model-prs.tar`` holding
``<program>/<side>/{trace.sqlite.xz,nvtx_sum.csv,cuda_gpu_kern_sum.csv,nvtx_gpu_proj_sum.csv,workload.log}``
(cut into ``model-prs.tar.partNN`` of 15 MB when larger) and prints each side's exit status and time.
``--cpu`` runs the programs' ``cpu_args`` under ``--trace=nvtx`` instead (this script's own check).
"""
from __future__ import annotations

import argparse
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

from perfgate.capture.command import capture_environment  # noqa: E402

#: program -> (sizing args on every side, {pull request: its flags})
PULL_REQUESTS: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "nanogpt": (("--compile=False", "--max_iters=40", "--eval_interval=1000", "--eval_iters=2", "--log_interval=10"),
                {"deeper": ("--n_layer=9",), "wider": ("--n_embd=576",), "batch": ("--batch_size=96",),
                 "sequence": ("--block_size=384",)}),
    "word_language_model": (("--epochs", "1"),
                            {"deeper": ("--nlayers", "4"), "wider": ("--nhid", "400"), "batch": ("--batch_size", "20"),
                             "sequence": ("--bptt", "40")}),
    "dcgan": (("--niter", "3"), {"wider": ("--ngf", "128", "--ndf", "128"), "batch": ("--batchSize", "128")}),
    "timm_ddp": (("--epochs", "3", "-j", "6"),
                 {"deeper": ("--model", "resnet34"), "batch": ("-b", "128"), "images": ("--img-size", "96")}),
}
STATS = ("nvtx_sum", "cuda_gpu_kern_sum", "nvtx_gpu_proj_sum")
PART = 15 * 2**20


def capture(program: harness.Program, project: Path, extra: tuple[str, ...], side: Path, cpu: bool) -> int:
    side.mkdir(parents=True, exist_ok=True)
    trace = "nvtx" if cpu else "cuda,nvtx"
    nsys = ["nsys", "profile", f"--trace={trace}", "--sample=none", "--cpuctxsw=none",
            *([] if cpu else ["--cuda-memory-usage=true"]), "--export=sqlite", "-f", "true", "-o", str(side / "trace")]
    env = capture_environment({**os.environ, **program.env})
    with open(side / "workload.log", "w") as log:
        log.write(" ".join(harness.workload_command(program, project, extra, gpu=not cpu)) + "\n\n")
        log.flush()
        rc = subprocess.run([*nsys, *harness.workload_command(program, project, extra, gpu=not cpu)], cwd=project, env=env,
                            stdout=log, stderr=subprocess.STDOUT, timeout=400).returncode
    (side / "trace.nsys-rep").unlink(missing_ok=True)
    db = side / "trace.sqlite"
    if db.is_file():
        for report in STATS:
            subprocess.run(["nsys", "stats", "-r", report, "-f", "csv", "-o", str(side / "stats"), str(db)],
                           capture_output=True, timeout=120)
            made = side / f"stats_{report}.csv"
            if made.is_file():
                made.rename(side / f"{report}.csv")
        with open(db, "rb") as src, lzma.open(side / "trace.sqlite.xz", "wb", preset=6) as dst:
            shutil.copyfileobj(src, dst)
        db.unlink()
    return rc


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/model-prs"))
    p.add_argument("--only", default="", help="comma-separated programs (default: all)")
    p.add_argument("--seconds", type=float, default=520, help="no side starts after this")
    p.add_argument("--cpu", action="store_true")
    args = p.parse_args()
    started = time.monotonic()
    names = [n for n in args.only.split(",") if n] or list(PULL_REQUESTS)
    captures = args.work / "captures"
    shutil.rmtree(args.work, ignore_errors=True)
    for name in names:
        program = harness.load_program(harness.PROGRAMS / name)
        project = harness.prepare(program, args.work / name / "project")
        sizing, prs = PULL_REQUESTS[name]
        for pr, flags in {"base": (), **prs}.items():
            if time.monotonic() - started > args.seconds:
                print(f"[{name}/{pr}] skipped: over {args.seconds:.0f} s", flush=True)
                continue
            t0 = time.monotonic()
            rc = capture(program, project, (*sizing, *flags), captures / name / pr, args.cpu)
            print(f"[{name}/{pr}] exit {rc}, {time.monotonic() - t0:.0f} s: {' '.join(flags) or '(the base)'}",
                  flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    tar = args.out / "model-prs.tar"
    with tarfile.open(tar, "w") as tf:
        tf.add(captures, arcname="model-prs")
    if tar.stat().st_size > PART:
        data = tar.read_bytes()
        for k in range(0, len(data), PART):
            (args.out / f"model-prs.tar.part{k // PART:02d}").write_bytes(data[k:k + PART])
        tar.unlink()
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

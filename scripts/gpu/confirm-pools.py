"""Issue 41 on a shared GPU host: pools of launches of a public program's base and of a pull request
that slows it by a set fraction (10 % by default), interleaved round by round while other jobs use the
same host, for judging offline how often the stored-baseline gate and the confirmation catch the
change and raise false alarms (benchmarks/confirm_pools.py reads what this writes).

    source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
        python3 scripts/gpu/confirm-pools.py --program dcgan --out $OUT/pools --seconds 500 [--neighbour]

Programs of the zoo, unmodified but for the pull request:
- ``word_language_model`` (an LSTM, host-bound on an H200): the pull request busy-waits in
  ``get_batch``, once per step;
- ``dcgan`` (a CNN fed by 4 DataLoader workers, ``--workers`` sets them): the pull request busy-waits in the dataset's
  per-sample transform, in the workers;
- ``timm_ddp`` (timm's train.py, a ResNet-18 fed by one worker decoding and augmenting images,
  torchrun with one rank per visible GPU, ``--epochs 4`` unless ``--epochs`` says otherwise: 16 steps
  an epoch on one GPU): the pull request busy-waits in each sample's load (``ImageDataset.__getitem__``).

The pull request waits with ``time.perf_counter`` in a loop (a ``time.sleep`` costs more than asked:
0.55 ms made +14.7 %), ``--spin-us`` microseconds per step (word_language_model) or per sample
(dcgan, timm_ddp); without it, the wait is reckoned from the recorded launches: a tenth of the step,
once per step, or spread over the samples one worker loads per step (``SAMPLES_PER_WORKER``: right
where the step waits for its data). A calibration launch of the pull request
against the recorded launches once misled: the recording ran before the host's other lanes were
busy, and the realized change was half the target; the waits of the measured pools were set from
the base's step measured on the same busy host. First ``--record`` launches of the base (the stored
baseline); then, with ``--neighbour``, nanoGPT at GPT-2 small's size trains on the same GPU; then
rounds launch the base, the head and the base again (``base2``: the A/A arm), as B H B' in even
rounds and B' H B in odd ones, until ``--seconds`` would be passed, every launch's metrics written to ``<out>/pools.json`` as it ends.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

SPIN_VAR = "PERFGATE_POOLS_SPIN_S"
SPIN = ("import os as _pg_os, time as _pg_time\n"
        f"_PG_SPIN = float(_pg_os.environ.get('{SPIN_VAR}', '0'))\n\n\n"
        "def _pg_spin(x=None):\n"
        "    t = _pg_time.perf_counter()\n"
        "    while _pg_time.perf_counter() - t < _PG_SPIN:\n"
        "        pass\n"
        "    return x\n\n\n")
# the pull request of each program: (file, text it follows, text it becomes); SPIN is put before
# the file's first "import"
PULL_REQUESTS = {
    "word_language_model": ("main.py", "    seq_len = min(args.bptt, len(source) - 1 - i)\n",
                            "    _pg_spin()\n    seq_len = min(args.bptt, len(source) - 1 - i)\n"),
    "dcgan": ("main.py", "                            transform=transforms.ToTensor())",
              "                            transform=transforms.Compose([transforms.ToTensor(), _pg_spin]))"),
    "timm_ddp": ("train.py", "def main():\n",
                 "import timm.data.dataset as _pg_dataset\n_pg_getitem = _pg_dataset.ImageDataset.__getitem__\n"
                 "_pg_dataset.ImageDataset.__getitem__ = lambda self, i: _pg_spin(_pg_getitem(self, i))\n\n\n"
                 "def main():\n"),
}
# samples each DataLoader worker loads per step (the GPU arguments: batches of 64 from 4 workers in
# dcgan, 1 in timm_ddp); word_language_model waits once per step
SAMPLES_PER_WORKER = {"word_language_model": 1, "dcgan": 64 // 4, "timm_ddp": 64}
# the program's own flags for these runs (both sides): fewer epochs, more rounds
ARGS = {"timm_ddp": ("--epochs", "4")}
# each data-bound program's flag for its DataLoader's workers
WORKERS_FLAG = {"timm_ddp": "-j", "dcgan": "--workers"}
NEIGHBOUR_ARGS = ("--device=cuda", "--compile=False", "--dtype=float16", "--dataset=synthetic", "--n_layer=12",
                  "--n_head=12", "--n_embd=768", "--block_size=1024", "--batch_size=32", "--max_iters=100000",
                  "--eval_interval=100000", "--eval_iters=2", "--log_interval=100", "--always_save_checkpoint=False")


def first_guess(program: str, step_ms: float, target: float, workers: int | None = None) -> float:
    """Seconds of waiting for ``target`` of a step of ``step_ms``, once per step or per sample of a
    data-bound step (``workers``: the DataLoader's workers where the run sets them, 64 samples a step)."""
    per_worker = 64 // workers if workers is not None else SAMPLES_PER_WORKER[program]
    return target * step_ms / 1000 / per_worker


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--program", choices=sorted(PULL_REQUESTS), default="word_language_model")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=None, help="default /tmp/confirm-pools-PROGRAM")
    p.add_argument("--seconds", type=float, default=480, help="no round starts that would end past this")
    p.add_argument("--record", type=int, default=3)
    p.add_argument("--slowdown", type=float, default=0.10, help="the pull request's cost, a fraction of the step")
    p.add_argument("--spin-us", type=float, default=None, help="the pull request's wait, per step or per sample")
    p.add_argument("--neighbour", action="store_true", help="nanoGPT (GPT-2 small) trains beside the rounds")
    p.add_argument("--epochs", type=int, default=None,
                   help="timm_ddp's epochs on both sides (default 4): fewer make shorter launches, more rounds")
    p.add_argument("--workers", type=int, default=None,
                   help="the DataLoader's workers on both sides (timm_ddp's -j, default 1; dcgan's --workers, "
                        "default 4): the pull request's wait per sample is reckoned for the samples each "
                        "worker loads a step")
    p.add_argument("--program-args", default="",
                   help="more of the program's own flags on both sides, one string (e.g. timm_ddp's "
                        "'--aa rand-m9-n4-mstd0.5': heavier augmentation in the workers)")
    p.add_argument("--train-images", type=int, default=None,
                   help="timm_ddp's training images (default 1024, 16 steps an epoch): more make longer "
                        "epochs at the same start-up, so more measured steps a launch")
    args = p.parse_args()
    if args.train_images is not None:
        if args.program != "timm_ddp":
            p.error("--train-images is timm_ddp's alone")
        os.environ["ZOO_TIMM_TRAIN_IMAGES"] = str(args.train_images)
    if args.epochs is not None and args.program != "timm_ddp":
        p.error("--epochs is timm_ddp's alone")
    if args.workers is not None and args.program not in WORKERS_FLAG:
        p.error(f"--workers is {' and '.join(sorted(WORKERS_FLAG))}'s alone")
    program_args = ("--epochs", str(args.epochs)) if args.epochs is not None else ARGS.get(args.program, ())
    if args.workers is not None:     # after the declared one: a flag given twice takes the later value
        program_args = (*program_args, WORKERS_FLAG[args.program], str(args.workers))
    program_args = (*program_args, *shlex.split(args.program_args))
    from perfgate.capture.command import TIMING
    from perfgate.pipeline.workload_run import launch_analysis
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import discover_workloads

    began = time.monotonic()
    work = args.work or Path(f"/tmp/confirm-pools-{args.program}")
    args.out.mkdir(parents=True, exist_ok=True)
    program = harness.load_program(harness.PROGRAMS / args.program)
    trees = {side: harness.prepare(program, work / side) for side in ("base", "head")}
    for tree in trees.values():
        harness.apply(harness.Change((), program_args, ()), tree)
    file, old, new = PULL_REQUESTS[args.program]
    source = (trees["head"] / file).read_text()
    at = source.index("\nimport ") + 1
    (trees["head"] / file).write_text(source[:at] + SPIN + source[at:].replace(old, new, 1))
    assert new in (trees["head"] / file).read_text(), f"{args.program}: the pull request's edit did not apply"
    pools: dict[str, list[dict[str, float]]] = {"recorded": [], "base": [], "head": [], "base2": []}
    doc: dict[str, object] = {"program": args.program, "slowdown": args.slowdown, "neighbour": args.neighbour,
                              "workers": args.workers,
                              "args": list(program_args), "train_images": args.train_images, "spin_s": None,
                              "order": [], "wall_s": []}

    def launch(side: str, k: int) -> float:
        tree = trees["head" if side == "head" else "base"]
        settings = load_settings(tree, option_prefix="", overrides={"profile": "off"})
        spec = next(s for s in discover_workloads(settings, settings_gpus()) if s.name == program.name)
        started = time.monotonic()
        analysis = launch_analysis(spec, settings, args.out / "launches" / f"{side}-{k}", k, TIMING, cwd=tree)
        doc["wall_s"].append(round(time.monotonic() - started, 2))
        pools[side].append(analysis.metrics())
        doc["order"].append(f"{side}-{k}")
        (args.out / "pools.json").write_text(json.dumps({**doc, **pools}, indent=1))
        print(f"{side}-{k}: step {analysis.steps.time_ms:.3f} ms ({doc['wall_s'][-1]} s)", flush=True)
        return analysis.steps.time_ms

    os.environ.update(program.env)
    recorded = statistics.fmean(launch("recorded", k) for k in range(args.record))
    spin = (args.spin_us / 1e6 if args.spin_us is not None
            else first_guess(args.program, recorded, args.slowdown, args.workers))
    os.environ[SPIN_VAR] = repr(spin)
    doc["spin_s"] = spin
    print(f"the pull request waits {spin * 1e6:.0f} us", flush=True)
    neighbour = None
    if args.neighbour:
        gpt = harness.load_program(harness.PROGRAMS / "nanogpt")
        folder = harness.prepare(gpt, work / "neighbour")
        neighbour = subprocess.Popen([sys.executable, "train.py", *NEIGHBOUR_ARGS], cwd=folder,
                                     stdout=(args.out / "neighbour.log").open("w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, **gpt.env})
        time.sleep(20)    # its start-up past: it trains
    try:
        k = 0
        while True:
            per_launch = statistics.fmean(doc["wall_s"])
            if time.monotonic() - began + 3 * per_launch > args.seconds:
                break
            for side in (("base", "head", "base2") if k % 2 == 0 else ("base2", "head", "base")):
                launch(side, k)
            k += 1
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()
    return 0


def settings_gpus() -> int:
    from perfgate.system.machine import this_machine

    return this_machine(None, None).gpu_count or 0


if __name__ == "__main__":
    sys.exit(main())

"""Issue 41 on a shared GPU host: pools of launches of a public program's base and of a pull request
that slows it by about 10 %, interleaved round by round while a neighbour trains on the same GPU and
CPUs, for judging offline how often the stored-baseline gate and the confirmation catch the change
and raise false alarms (benchmarks/confirm_pools.py reads what this writes).

    source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
        python3 scripts/gpu/confirm-pools.py --out $OUT/pools --rounds 8 [--sleep-ms 0.55] [--neighbour]

The program is the zoo's word_language_model (an LSTM, launch-bound on an H200), its pull request a
``time.sleep`` in ``get_batch`` (about a tenth of its 5.4 ms step). First ``--record`` launches of
the base with the host quiet (the stored baseline); then, with ``--neighbour``, nanoGPT at GPT-2
small's size trains in a loop on the same GPU; then each round launches the base, the head and the
base again (``base2``: the A/A arm), as B H B' in even rounds and B' H B in odd ones, every launch's
metrics written to ``<out>/pools.json`` as it ends (a call stopped at its time limit keeps what
finished).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

SLEEP_EDIT = ("    seq_len = min(args.bptt, len(source) - 1 - i)\n",
              "    time.sleep({s})\n    seq_len = min(args.bptt, len(source) - 1 - i)\n")
NEIGHBOUR_ARGS = ("--device=cuda", "--compile=False", "--dtype=float16", "--dataset=synthetic", "--n_layer=12",
                  "--n_head=12", "--n_embd=768", "--block_size=1024", "--batch_size=32", "--max_iters=100000",
                  "--eval_interval=100000", "--eval_iters=2", "--log_interval=100", "--always_save_checkpoint=False")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=Path("/tmp/confirm-pools"))
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--record", type=int, default=3)
    p.add_argument("--sleep-ms", type=float, default=0.55)
    p.add_argument("--neighbour", action="store_true", help="nanoGPT (GPT-2 small) trains beside the rounds")
    args = p.parse_args()
    from perfgate.capture.command import TIMING
    from perfgate.pipeline.workload_run import launch_analysis
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import discover_workloads

    args.out.mkdir(parents=True, exist_ok=True)
    program = harness.load_program(harness.PROGRAMS / "word_language_model")
    trees = {side: harness.prepare(program, args.work / side) for side in ("base", "head")}
    harness.apply(harness.Change((harness.Edit("main.py", SLEEP_EDIT[0], SLEEP_EDIT[1].format(s=args.sleep_ms / 1000)),),
                                 (), ()), trees["head"])
    pools: dict[str, list[dict[str, float]]] = {"recorded": [], "base": [], "head": [], "base2": []}
    order: list[str] = []
    walls: list[float] = []

    def launch(side: str, k: int) -> None:
        tree = trees["head" if side == "head" else "base"]
        settings = load_settings(tree, option_prefix="", overrides={"profile": "off"})
        spec = next(s for s in discover_workloads(settings, settings_gpus()) if s.name == program.name)
        started = time.monotonic()
        analysis = launch_analysis(spec, settings, args.out / "launches" / f"{side}-{k}", k, TIMING, cwd=tree)
        walls.append(round(time.monotonic() - started, 2))
        pools[side].append(analysis.metrics())
        order.append(f"{side}-{k}")
        (args.out / "pools.json").write_text(json.dumps({"sleep_ms": args.sleep_ms, "neighbour": args.neighbour,
                                                         "order": order, "wall_s": walls, **pools}, indent=1))
        print(f"{side}-{k}: step {analysis.steps.time_ms:.3f} ms", flush=True)

    for k in range(args.record):
        launch("recorded", k)
    neighbour = None
    if args.neighbour:
        gpt = harness.load_program(harness.PROGRAMS / "nanogpt")
        folder = harness.prepare(gpt, args.work / "neighbour")
        neighbour = subprocess.Popen([sys.executable, "train.py", *NEIGHBOUR_ARGS], cwd=folder,
                                     stdout=(args.out / "neighbour.log").open("w"), stderr=subprocess.STDOUT,
                                     env={**os.environ, **gpt.env})
        time.sleep(20)    # its start-up past: it trains
    try:
        for k in range(args.rounds):
            for side in (("base", "head", "base2") if k % 2 == 0 else ("base2", "head", "base")):
                launch(side, k)
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

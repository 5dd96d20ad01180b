"""On a machine with 2+ GPUs: a communication pull request on a public training program, gated as its
user would with the ``perfgate`` command. The zoo's ``timm_ddp`` (timm's train.py, unmodified, torchrun
and NCCL, as its pyproject.toml declares it) is recorded, then run again with ``--sync-bn``
(SyncBatchNorm: each BN layer's statistics gathered from every rank in forward, reduced in backward).
Both sides train ``--epochs`` epochs (the base's own args otherwise).

    source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
        python3 scripts/gpu/comm-pr.py --out $OUT [--args --sync-bn]

Writes ``$OUT/comm-pr.json`` (each command's verdict, message and NCCL calls per step, after each),
prints the same, and keeps the baseline file (``baseline.json``) and the change's ``result.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402


def summary(run: harness.Run) -> dict[str, object]:
    calls = [(a.get("collectives") or {}).get("per_step") for a in run.analyses]
    return {"verdict": run.verdict, "returncode": run.returncode, "wall_s": round(run.wall_s, 1),
            "step_ms": [a["metrics"].get("step_time_ms") for a in run.analyses], "nccl_calls_per_step": calls,
            "first_reason": run.first_reason, "message": run.result.get("message"), "error": run.result.get("error"),
            "output_tail": run.output[-1500:] if run.verdict == "ERROR" else ""}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    parser.add_argument("--work", type=Path, default=Path("/tmp/comm-pr"))
    parser.add_argument("--program", default="timm_ddp")
    parser.add_argument("--args", nargs="*", default=["--sync-bn"], help="the pull request's extra args")
    parser.add_argument("--epochs", default="3", help="epochs of both sides (the base declares 10)")
    parser.add_argument("--record-launches", default="2")
    parser.add_argument("--max-launches", default="3")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    program = next(p for p in harness.programs() if p.name == args.program)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    gate_args = ("--record-launches", args.record_launches, "--max-launches", args.max_launches, "--timeout", "600",
                 "--confirm", "never")
    sized = harness.Change(args=("--epochs", args.epochs, "--warmup-epochs", "0"))
    doc: dict[str, object] = {"program": program.name, "pull_request": args.args, "epochs": args.epochs}

    def save(name: str, run: harness.Run) -> None:
        doc[name] = summary(run)
        (args.out / "comm-pr.json").write_text(json.dumps(doc, indent=1, default=str))
        print(f"comm-pr: {name}: {json.dumps(doc[name], default=str)[:2500]}", flush=True)

    base = harness.prepare(program, args.work / "base")
    harness.apply(sized, base)
    save("record", harness.perfgate(base, "baseline", "update", *gate_args, env=env))
    for recorded in (base / "baselines").rglob("*.json"):
        harness.shutil.copy(recorded, args.out / "baseline.json")
    changed = harness.prepare(program, args.work / "change")
    harness.apply(harness.Change(args=(*sized.args, *args.args)), changed)
    harness.shutil.copytree(base / "baselines", changed / "baselines", dirs_exist_ok=True)
    run = harness.perfgate(changed, "run", *gate_args, env=env)
    save("change", run)
    (args.out / "result.json").write_text(json.dumps(run.result, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

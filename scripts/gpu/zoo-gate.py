"""On the GPU machine: the zoo's GPU-capable programs (tests/zoo/programs, ``gpu = true``) through the
flow tests/programs/test_zoo.py runs on the CPU, each gated as its user would with the ``perfgate`` command:
``baseline update``, an unchanged ``run``, the input-pipeline and the compute pull requests, in a git
repository as in its CI (each pull request a clone with the change committed), so that a gate run is
confirmed against the commit its baseline was recorded from.

    source .gpu/env.sh && python3 -m pip install -q --no-deps --no-build-isolation -e . && \\
        python3 scripts/gpu/zoo-gate.py --out $OUT [--only a,b] [--skip c]

Writes ``$OUT/zoo.json`` (every run's verdict, step and reason, after each program) and
``$OUT/zoo.md`` (the table of docs/zoo.md), and ``$OUT/zoo-logs.tgz`` (each run's output and
result.json); prints each row as it is made, so that a run stopped at its time limit keeps what
it finished.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

RUNS = ("rerun", "input_slowdown", "compute_slowdown")
KEPT = (".log", ".json", ".md", ".txt")   # what zoo-logs.tgz keeps: outputs and records, not checkpoints or traces


def gate(program: harness.Program, work: Path, env: dict[str, str], live: Path, cpu: bool,
         save: Callable[[dict[str, object]], None] = lambda row: None,
         launches: tuple[int, int] = (3, 6),
         runs: tuple[str, ...] = RUNS, profile: str = "auto") -> dict[str, object]:
    """``live``: the folder where each command's output is written as it runs (kept at a time limit).
    ``launches``: the baseline's launches and the most of each gate run.
    ``runs``: which of the runs after the recording to make (``RUNS``, in that order).
    ``profile``: perfgate's ``--profile`` for every run (``off`` spares a slow CUDA-traced launch).
    ``save``: called with the row as each run ends (a device call's time limit keeps what finished).
    ``zoo.toml``'s ``iterations`` are the CPU size's: held against perfgate's count on the CPU only."""
    env = {**env, **program.env}
    gate_args = ("--record-launches", str(launches[0]), "--max-launches", str(launches[1]), "--timeout", "600",
                 "--profile", profile)
    # the user's repository: the program committed, then its baselines; each pull request a clone of
    # it with the change committed, so that its gate run is confirmed against the base (confirm = "auto")
    project = harness.prepare(program, work / program.name / "project")
    harness.commit(project, "the program")
    recorded = harness.perfgate(project, "baseline", "update", *gate_args, env=env,
                                log=live / f"{program.name}-record.log")
    if recorded.returncode == 0:
        harness.commit(project, "its baselines")
    row: dict[str, object] = {"program": program.name, "shapes": list(program.shapes),
                              "record": {"verdict": recorded.verdict, "returncode": recorded.returncode,
                                         "wall_s": round(recorded.wall_s, 1)}}
    logs = {"record": recorded}
    if recorded.verdict == "PASS" and recorded.analyses:
        check = harness.step_check(program, project, recorded)
        row["step"] = {"perfgate_ms": check.step_ms, "median_ms": check.median_ms, "marker": check.marker,
                       "own_ms": check.own_ms,
                       "own_ratio": check.own_ratio, "iterations_found": check.iterations_found,
                       "iterations": check.iterations if cpu else None,
                       "samples_per_s": recorded.analyses[0]["steps"].get("samples_per_s"),
                       "batch_size": recorded.analyses[0]["steps"].get("batch_size"),
                       "statistic": recorded.analyses[0]["steps"].get("statistic")}
        save(row)
        if "rerun" in runs:
            rerun = harness.perfgate(project, "run", *gate_args, env=env, log=live / f"{program.name}-rerun.log")
            logs["rerun"] = rerun
            row["rerun"] = _summary(rerun)
            save(row)
        for kind in [r for r in RUNS[1:] if r in runs]:
            changed = harness.pull_request(project, getattr(program, kind), work / program.name / kind)
            run = harness.perfgate(changed, "run", *gate_args, env=env, log=live / f"{program.name}-{kind}.log")
            logs[kind] = run
            row[kind] = {**_summary(run), "expected_first": list(getattr(program, kind).first)}
            save(row)
    else:
        row["record"]["output"] = recorded.output[-3000:]   # type: ignore[index]
    for name, run in logs.items():
        (work / program.name / f"{name}.log").write_text(" ".join(run.command) + "\n\n" + run.output)
        if run.result:
            (work / program.name / f"{name}.result.json").write_text(json.dumps(run.result, indent=1, default=str))
    return row


def _summary(run: harness.Run) -> dict[str, object]:
    steps = [a["metrics"].get("step_time_ms") for a in run.analyses]
    return {"verdict": run.verdict, "returncode": run.returncode, "wall_s": round(run.wall_s, 1),
            "launches": len(steps), "first_reason": run.first_reason, "first_phase": run.first_phase,
            "message": (run.result.get("message") or "")[:1500], "error": run.result.get("error")}


def markdown(rows: list[dict]) -> str:
    head = ("| program | loop shape | own iteration | perfgate step | steps from | rerun | input PR (first reason) "
            "| compute PR (first reason) |\n|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        step = r.get("step") or {}
        own = f"{step['own_ms']:.2f} ms" if step.get("own_ms") else (
            f"{step.get('iterations')} iterations" if step.get("iterations") else "-")
        found = step.get("iterations_found")
        ours = f"{step['perfgate_ms']:.2f} ms" if step.get("perfgate_ms") else r["record"]["verdict"]
        if found is not None and step.get("iterations"):
            ours += f" ({found} of {step['iterations']} iterations)"
        cells = [r["program"], "; ".join(r["shapes"]), own, ours, str(step.get("marker", "-"))[:90],
                 (r.get("rerun") or {}).get("verdict", "-")]
        for kind in ("input_slowdown", "compute_slowdown"):
            k = r.get(kind) or {}
            cells.append(f"{k.get('verdict', '-')} ({k.get('first_reason') or '-'})".replace("|", "/")[:160])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, rows: list[dict]) -> None:
    """``out/zoo.json`` and ``out/zoo.md`` of the rows so far."""
    (out / "zoo.json").write_text(json.dumps(rows, indent=1, default=str))
    (out / "zoo.md").write_text(markdown(rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    parser.add_argument("--only", default="", help="comma-separated program names")
    parser.add_argument("--skip", default="", help="comma-separated program names")
    parser.add_argument("--work", type=Path, default=Path("/tmp/zoo"))
    parser.add_argument("--cpu", action="store_true",
                        help="the CPU-capable programs on a machine without a GPU (one torch thread per process, "
                             "as tests/programs/test_zoo.py runs them)")
    parser.add_argument("--record-launches", type=int, default=3,
                        help="baseline launches (default 3)")
    parser.add_argument("--max-launches", type=int, default=6, help="most launches of each gate run (default 6)")
    parser.add_argument("--runs", default=",".join(RUNS),
                        help=f"comma-separated runs to make after the recording (default {','.join(RUNS)})")
    parser.add_argument("--profile", choices=("auto", "always", "off"), default="auto",
                        help="perfgate's --profile for every run (default auto; off spares the CUDA-traced launch, "
                             "minutes for a compiled model)")
    args = parser.parse_args(argv)
    runs = tuple(r for r in args.runs.split(",") if r)
    if unknown := [r for r in runs if r not in RUNS]:
        parser.error(f"--runs: unknown run(s) {', '.join(unknown)}; choose from {', '.join(RUNS)}")
    only = {n for n in args.only.split(",") if n}
    skip = {n for n in args.skip.split(",") if n}
    chosen = [p for p in harness.programs() if (p.cpu if args.cpu else p.gpu)
              and (not only or p.name in only) and p.name not in skip]
    args.out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PERFGATE_")}
    if args.cpu:
        env["OMP_NUM_THREADS"] = "1"
    rows: list[dict] = []
    started = time.monotonic()
    for program in chosen:
        t = time.monotonic()
        print(f"zoo: {program.name} at {t - started:.0f} s", flush=True)

        def save(partial: dict[str, object]) -> None:
            write_tables(args.out, [*rows, partial])
            print(f"zoo: {program.name}: " + ", ".join(f"{k} {v.get('verdict')}" for k, v in partial.items()
                                                      if isinstance(v, dict) and "verdict" in v), flush=True)

        try:
            row = gate(program, args.work, env, args.out / "live", args.cpu, save,
                       (args.record_launches, args.max_launches), runs, args.profile)
        except Exception as exc:  # noqa: BLE001 - one program's failure must not hide the others
            row = {"program": program.name, "shapes": list(program.shapes),
                   "record": {"verdict": "ERROR", "error": f"{type(exc).__name__}: {exc}"}}
        row["wall_s"] = round(time.monotonic() - t, 1)
        rows.append(row)
        print(json.dumps(row, default=str)[:3000], flush=True)
        write_tables(args.out, rows)
        with tarfile.open(args.out / "zoo-logs.tgz", "w:gz") as tar:
            tar.add(args.work, arcname="zoo", filter=lambda ti: ti if ti.isdir() or (
                ti.name.endswith(KEPT) and ti.size < 5_000_000 and "/data/" not in ti.name) else None)
    print(f"zoo: {len(rows)} programs in {time.monotonic() - started:.0f} s", flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

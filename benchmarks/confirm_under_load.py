"""Unchanged reruns on a machine that got busier after the baseline was recorded (issue 41): how
often the stored baseline alone says REGRESSED, and what the confirmation against the base in the
same job says, for this repository's workloads and the zoo's public programs, as a user runs them.

    python benchmarks/confirm_under_load.py --programs transformer_lm,zoo:nanogpt --reruns 5 \\
        --hogs 2 --out /tmp/confirm-load

For each program: a git repository of the user's project (a copy of this repository's workloads,
or a zoo program's folder), its baseline recorded with the machine quiet and committed; once every
program's is, ``--hogs`` busy processes (``while True: pass``) are started, and ``perfgate run`` is
repeated ``--reruns`` times on the unchanged code of each program in turn (``--confirm auto``, the
default). Settings come as a user gives them, e.g. ``PERFGATE_THREADS=1`` in the environment. Each run's result
record gives both verdicts: the stored baseline's (``extra.confirmation.stored_verdict``, what the
gate said before the confirmation existed) and the one that decided. The hogs end with the script.
Writes ``<out>/confirm-under-load.json`` and ``.md`` after each run.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from zoo import harness  # noqa: E402

from cpu_hogs import cpu_hogs  # noqa: E402


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=perfgate", "-c", "user.email=perfgate@example.com", *args],
                   check=True, capture_output=True)


def project(name: str, work: Path, args: tuple[str, ...] = ()) -> tuple[Path, str, dict[str, str]]:
    """The user's project for ``name`` (``zoo:<program>`` or a workload of this repository) as a
    git repository with one commit: its folder, the workload's name and the environment it needs.
    ``args``: added to a zoo program's command lines (its own flags: a user's larger config)."""
    dest = work / name.replace(":", "-")
    if name.startswith("zoo:"):
        program = harness.load_program(harness.PROGRAMS / name[4:])
        harness.prepare(program, dest)
        if args:
            harness.apply(harness.Change((), args, ()), dest)
        (dest / ".gitignore").write_text(".perfgate/\n" + (dest / ".gitignore").read_text()
                                         if (dest / ".gitignore").exists() else ".perfgate/\n")
        workload, env = program.name, program.env
    else:
        # the user's project holds no perfgate of its own: the one under test is the installed one
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".git", ".venv", ".perfgate", "__pycache__",
                                                                  "perfgate", "baselines", "docs", "tests", "examples"))
        workload, env = name, {}
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "the user's code")
    return dest, workload, env


def row(name: str, k: int, run: harness.Run) -> dict[str, object]:
    extra = run.result.get("extra") or {}
    confirmation = extra.get("confirmation") or {}
    step = next((c for c in run.result.get("comparisons") or [] if c.get("metric") == "step_time_ms"), {})
    return {"program": name, "rerun": k, "verdict": run.verdict, "returncode": run.returncode,
            "stored_verdict": confirmation.get("stored_verdict", run.verdict),
            "stored_summary": (confirmation.get("stored_summary") or "")[:300],
            "pairs": confirmation.get("pairs"), "confirmed": confirmation.get("verdict"),
            "skipped": confirmation.get("skipped"),
            "machine": confirmation.get("machine") or next(
                (line.removeprefix("warning: ") for line in str(run.result.get("message") or "").splitlines()
                 if line.startswith("warning: the machine was")), None),
            "step_change": step.get("change"), "interval_ratio": confirmation.get("interval_ratio"),
            "launches": len(list(Path(run.result["run_dir"]).glob("launch-*"))) if run.result.get("run_dir") else None,
            "wall_s": round(run.wall_s, 1)}


def table(rows: list[dict[str, object]]) -> str:
    lines = ["| program | rerun | stored baseline alone | confirmed (pairs) | verdict | step change | timing + pair launches | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        change = f"{r['step_change'] * 100:+.1f} %" if isinstance(r["step_change"], float) else "-"
        confirmed = f"{r['confirmed']} ({r['pairs']})" if r["confirmed"] else (r["skipped"] or "-")
        pairs = 2 * int(r["pairs"]) if isinstance(r["pairs"], int) else 0
        lines.append(f"| {r['program']} | {r['rerun']} | {r['stored_verdict']} | {confirmed} | {r['verdict']} | "
                     f"{change} | {r['launches']} + {pairs} | {r['wall_s']} |")
    stored = sum(r["stored_verdict"] == "REGRESSED" for r in rows)
    final = sum(r["verdict"] == "REGRESSED" for r in rows)
    lines.append(f"\n{len(rows)} unchanged reruns: {stored} REGRESSED against the stored baseline alone, "
                 f"{final} REGRESSED after the confirmation.")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--programs", default="transformer_lm,zoo:nanogpt,zoo:vae")
    p.add_argument("--reruns", type=int, default=4)
    p.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes beside the reruns")
    p.add_argument("--record-launches", type=int, default=3)
    p.add_argument("--max-launches", type=int, default=5, help="the most timing launches, and the most pairs")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--work", type=Path, default=None, help="where the projects are made (default: under --out)")
    p.add_argument("--args", action="append", default=[], metavar="PROGRAM=ARGS",
                   help="flags added to a zoo program's command lines, e.g. 'zoo:nanogpt=--n_layer=12 --compile=False'")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or args.out / "projects"
    gate = ("--max-launches", str(args.max_launches), "--profile", "off", "--timeout", "600")
    rows: list[dict[str, object]] = []
    extra = {k: tuple(v.split()) for k, _, v in (a.partition("=") for a in args.args)}
    projects = []
    for name in args.programs.split(","):     # every baseline recorded first, with the machine quiet
        folder, workload, env = project(name, work, extra.get(name, ()))
        env = {**os.environ, **env}
        recorded = harness.perfgate(folder, "baseline", "update", workload, "--record-launches",
                                    str(args.record_launches), *gate, env=env, log=args.out / f"{folder.name}-record.log")
        print(f"{name}: recorded {recorded.verdict} in {recorded.wall_s:.0f} s", flush=True)
        if recorded.returncode != 0:
            continue
        _git(folder, "add", "-A")
        _git(folder, "commit", "-q", "-m", "baseline")
        projects.append((name, folder, workload, env))
    with cpu_hogs(args.hogs):
        time.sleep(2)
        for k in range(args.reruns):          # then the reruns, the programs in turn
            for name, folder, workload, env in projects:
                try:
                    run = harness.perfgate(folder, "run", workload, *gate, env=env,
                                           log=args.out / f"{folder.name}-rerun-{k}.log")
                except subprocess.TimeoutExpired as exc:     # one run past the harness's limit: the rest go on
                    rows.append({"program": name, "rerun": k, "verdict": f"no verdict in {exc.timeout:.0f} s",
                                 "stored_verdict": "-", "confirmed": None, "skipped": None, "pairs": None,
                                 "step_change": None, "launches": None, "wall_s": exc.timeout, "machine": None})
                    continue
                rows.append(row(name, k, run))
                print(json.dumps(rows[-1]), flush=True)
                (args.out / "confirm-under-load.json").write_text(json.dumps(rows, indent=2))
                (args.out / "confirm-under-load.md").write_text(table(rows))
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Seed 003's optimization ladder for resnet_cifar, and a runner that climbs it.

Each rung adds one optimization to the one below (seed 003, "Performance gains from each
optimization"); ``--ladder-rung N`` on any workload applies rung N's knobs, and explicit knobs
override them. ``python -m workloads.ladder`` runs resnet_cifar at each rung in turn (optionally
under nsys), collects each run's ``PERFGATE_SELF_REPORT`` into a JSON-lines file and prints
samples/s per rung next to the seed's V100 numbers. This module imports no torch.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

SELF_REPORT_PREFIX = "PERFGATE_SELF_REPORT "

RUNG_NAMES: tuple[str, ...] = (
    "baseline",
    "+ DataLoader workers 8",
    "+ pin memory",
    "+ non_blocking copy",
    "+ AMP (fp16 autocast)",
    "+ batch 512",
    "+ torch.compile",
    "+ overlap copy stream",
)

SEED_V100_SAMPLES_PER_S: tuple[float, ...] = (
    542.746, 797.819, 964.485, 1019.498, 1628.83, 2201.627, 2704.36, 3173.449,
)
"""Seed 003's measured samples/s per rung (V100-SXM2-32GB, ResNet-18 on CIFAR-10 at 224)."""

_BASELINE: dict[str, Any] = {
    "workers": 0,
    "pin_memory": False,
    "non_blocking": False,
    "amp": False,
    "batch_size": 32,
    "compile": False,
    "overlap_copy": False,
}
_CHANGES: tuple[dict[str, Any], ...] = (
    {},
    {"workers": 8},
    {"pin_memory": True},
    {"non_blocking": True},
    {"amp": True},
    {"batch_size": 512},
    {"compile": True},
    {"overlap_copy": True},
)
MAX_RUNG = len(_CHANGES) - 1


def rung_knobs(rung: int) -> dict[str, Any]:
    """The knobs of ladder rung ``rung`` (0..7): the baseline plus every change up to it."""
    if not 0 <= rung <= MAX_RUNG:
        raise ValueError(f"--ladder-rung must be between 0 and {MAX_RUNG}, got {rung}")
    knobs = dict(_BASELINE)
    for change in _CHANGES[: rung + 1]:
        knobs.update(change)
    return knobs


def parse_self_report(output: str) -> dict[str, Any] | None:
    """The JSON of the last ``PERFGATE_SELF_REPORT`` line in ``output``, or None.

    Tolerates other processes' output written onto the same line (before or after the JSON),
    as happens when several ranks or nsys share one pipe."""
    decoder = json.JSONDecoder()
    for line in reversed(output.splitlines()):
        at = line.rfind(SELF_REPORT_PREFIX)
        if at < 0:
            continue
        try:
            report, _ = decoder.raw_decode(line, at + len(SELF_REPORT_PREFIX))
        except ValueError:
            continue
        if isinstance(report, dict):
            return report
    return None


def format_table(reports: Sequence[dict[str, Any]]) -> str:
    """A fixed-width table of samples/s per rung next to the seed's V100 numbers."""
    lines = [f"{'rung':>4}  {'change':<24} {'samples/s':>10} {'vs prev':>8} {'V100 seed':>10} {'vs prev':>8}"]
    previous: float | None = None
    for report in reports:
        rung = int(report["ladder_rung"])
        value = float(report["samples_per_s"])
        seed = SEED_V100_SAMPLES_PER_S[rung]
        seed_prev = SEED_V100_SAMPLES_PER_S[rung - 1] if rung > 0 else None
        ours = f"{(value / previous - 1) * 100:+7.1f}%" if previous else f"{'-':>8}"
        theirs = f"{(seed / seed_prev - 1) * 100:+7.1f}%" if seed_prev else f"{'-':>8}"
        lines.append(f"{rung:>4}  {RUNG_NAMES[rung]:<24} {value:>10.1f} {ours} {seed:>10.1f} {theirs}")
        previous = value
    return "\n".join(lines)


def _rung_command(args: argparse.Namespace, rung: int) -> list[str]:
    command = [
        sys.executable, "-m", f"workloads.{args.workload}",
        "--ladder-rung", str(rung), "--size", args.size, "--device", args.device,
        "--steps", str(args.steps), "--warmup-steps", str(args.warmup_steps),
    ] + list(args.extra)
    if args.nsys_dir is None:
        return command
    out = Path(args.nsys_dir) / f"rung{rung}"
    return [
        args.nsys, "profile", f"--trace={args.nsys_trace}", "--sample=none", "--cpuctxsw=none",
        "--export=sqlite", "-f", "true", "-o", str(out),
    ] + command


def run_ladder(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Run each requested rung in its own process; return their self-reports (with the rung)."""
    reports: list[dict[str, Any]] = []
    if args.nsys_dir is not None:
        Path(args.nsys_dir).mkdir(parents=True, exist_ok=True)
    for rung in args.rungs:
        command = _rung_command(args, rung)
        print(f"[ladder] rung {rung}: {shlex.join(command)}", flush=True)
        done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(done.stdout[-2000:])
        report = parse_self_report(done.stdout)
        if done.returncode != 0 or report is None:
            print(f"[ladder] rung {rung} failed (exit {done.returncode})", file=sys.stderr)
            continue
        report["ladder_rung"] = rung
        reports.append(report)
        if args.out is not None:
            with open(args.out, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(report, sort_keys=True) + "\n")
    return reports


def _parse_rungs(text: str) -> list[int]:
    rungs: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        rungs.extend(range(int(low), int(high or low) + 1))
    if not rungs or any(not 0 <= r <= MAX_RUNG for r in rungs):
        raise argparse.ArgumentTypeError(f"rungs must lie in 0..{MAX_RUNG}, got {text!r}")
    return rungs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m workloads.ladder", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", default="resnet_cifar")
    parser.add_argument("--rungs", type=_parse_rungs, default=list(range(MAX_RUNG + 1)), help="e.g. 0-7 or 0,4,7")
    parser.add_argument("--size", default="gpu", choices=("auto", "cpu", "gpu"))
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=8)
    parser.add_argument("--out", help="append each rung's self-report to this JSON-lines file")
    parser.add_argument("--nsys-dir", help="run each rung under nsys, reports written here")
    parser.add_argument("--nsys", default="nsys", help="nsys executable")
    parser.add_argument("--nsys-trace", default="cuda,nvtx,osrt")
    parser.add_argument("extra", nargs=argparse.REMAINDER, help="more workload knobs after --")
    args = parser.parse_args(argv)
    if args.extra and args.extra[0] == "--":
        args.extra = args.extra[1:]
    reports = run_ladder(args)
    print(format_table(reports))
    return 0 if len(reports) == len(args.rungs) else 1


if __name__ == "__main__":
    raise SystemExit(main())

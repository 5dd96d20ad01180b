"""Run history: one JSON line per gated (or recorded) run, per workload and machine class.

Opt in with ``history_dir`` (``[tool.perfgate]`` or ``PERFGATE_HISTORY_DIR``): after each workload
``perfgate run`` / ``pytest --perfgate`` appends to ``<history_dir>/<workload>[/<variant>]/
<machine_class>.jsonl`` a line with the time, commit, verdict and each launch's metrics.
``perfgate history WORKLOAD`` prints the trend of step time with the verdicts (``--chart FILE``:
a PNG, with matplotlib), and ``--refresh-baseline`` writes the baseline from the launches of the
last passing runs, so that a baseline rests on several runs rather than one.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from perfgate.commands.history_entry import STEP_METRIC, Entry
from perfgate.errors import ConfigError, PerfgateError
from perfgate.records.model import WorkloadResult

FORMAT = "perfgate-history"
VERSION = 1
#: verdicts whose launches may make a baseline (a regression or an error never does)
ACCEPTED = ("PASS", "IMPROVED", "NEW", "INCONCLUSIVE")


def history_path(history_dir: Path, workload: str, machine_class: str, variant: str | None = None) -> Path:
    """``<history_dir>/<workload>[/<variant>]/<machine_class>.jsonl`` (names checked like baselines')."""
    from perfgate.baselines.store import baseline_path

    return baseline_path(history_dir, workload, machine_class, variant).with_suffix(".jsonl")


def entry_for(result: WorkloadResult, root: Path, update_baseline: bool) -> dict[str, Any]:
    """The JSON line of ``result``."""
    from dataclasses import asdict

    from perfgate.baselines.provenance import git_provenance

    step = next((c for c in result.comparisons if c.metric == STEP_METRIC), None)
    machine = asdict(result.machine) if result.machine is not None else None
    if machine is not None:
        machine.pop("hostname", None)
    return {
        "format": FORMAT, "version": VERSION,
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": git_provenance(root).get("git_commit"),
        "kind": "baseline" if update_baseline else "gate",
        "workload": result.workload, "variant": result.variant, "verdict": str(result.verdict),
        "baseline_step_time_ms": step.baseline if step is not None else None,
        "launches": [{k: v for k, v in a.metrics().items() if math.isfinite(v)} for a in result.analyses],
        "machine": machine,
    }


def record(result: WorkloadResult, settings: Any, *, update_baseline: bool = False) -> Path | None:
    """Append ``result`` to its history file when ``settings.history_dir`` is set; the file written
    (None when history is off, or the run has no machine, e.g. it failed before starting)."""
    history_dir = getattr(settings, "history_dir", None)
    if history_dir is None or result.machine is None:
        return None
    path = history_path(Path(history_dir), result.workload, result.machine.machine_class, result.variant)
    line = json.dumps(entry_for(result, settings.root, update_baseline), sort_keys=True, allow_nan=False)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except OSError as exc:   # a full disk, a read-only folder: say which file, never a traceback
        raise PerfgateError(f"{path}: history not written: {exc.strerror or exc}") from None
    return path


def read_history(path: Path) -> list[Entry]:
    """Every entry of a history file; PerfgateError naming the file and line for a bad one."""
    from perfgate.baselines.store import checked_metrics

    if not path.is_file():
        raise ConfigError(f"{path}: no history (set history_dir in [tool.perfgate] or PERFGATE_HISTORY_DIR, "
                          "then gated runs append to it)")
    entries = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except ValueError as exc:   # not UTF-8
        raise PerfgateError(f"{path}: not a perfgate history file ({exc})") from None
    for number, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        where = f"{path}:{number}"
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise PerfgateError(f"{where}: not a JSON line ({exc})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("launches"), list):
            raise PerfgateError(f"{where}: not a perfgate history entry")
        launches = tuple(checked_metrics(m, f"{where}: launches[{k}]") for k, m in enumerate(doc["launches"]))
        base = doc.get("baseline_step_time_ms")
        entries.append(Entry(time=str(doc.get("time")), verdict=str(doc.get("verdict")), launches=launches,
                             commit=doc.get("commit") if isinstance(doc.get("commit"), str) else None,
                             kind=str(doc.get("kind", "gate")),
                             baseline_step_time_ms=float(base) if isinstance(base, (int, float)) else None,
                             machine=doc.get("machine") if isinstance(doc.get("machine"), dict) else None))
    return entries


def render_trend(entries: Sequence[Entry]) -> list[str]:
    """One line per run: time, commit, kind, verdict, step time and its change from the previous run."""
    from perfgate.gate.wording import fmt_number

    lines = [f"{'time (UTC)':<25}  {'commit':<10}  {'kind':<8}  {'verdict':<12}  {'step time':>10}  change",
             "-" * 80]
    previous = None
    for e in entries:
        step = e.step_time_ms
        change = "" if step is None or previous is None else f"{(step / previous - 1) * 100:+.1f} %"
        shown = "-" if step is None else f"{fmt_number(step)} ms"
        lines.append(f"{e.time:<25}  {(e.commit or '-')[:10]:<10}  {e.kind:<8}  {e.verdict:<12}  {shown:>10}  {change}")
        previous = step if step is not None else previous
    return lines


def write_chart(entries: Sequence[Entry], path: Path, title: str, marks: Sequence[int] = ()) -> Path:
    """A PNG of step time per run, the failed runs marked, a vertical line before each run of
    ``marks`` (the first run after a change point); PerfgateError without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PerfgateError("--chart needs matplotlib (pip install 'perfgate[charts]')") from None
    points = [(k, e.step_time_ms, e.verdict) for k, e in enumerate(entries) if e.step_time_ms is not None]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", color="tab:blue", label="step time")
    bad = [p for p in points if p[2] in ("REGRESSED", "ERROR")]
    if bad:
        ax.scatter([p[0] for p in bad], [p[1] for p in bad], color="tab:red", zorder=3, label="REGRESSED")
    for k, index in enumerate(marks):
        ax.axvline(index - 0.5, color="tab:orange", linestyle="--", label="change point" if k == 0 else None)
    ax.set_xlabel("run")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title)
    ax.legend(loc="best")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def baseline_from_history(workload: str, variant: str | None, machine_class: str, entries: Sequence[Entry],
                          last: int, source: Path) -> Any:
    """A Baseline from the launches of the last ``last`` accepted runs (PASS, IMPROVED, NEW,
    INCONCLUSIVE, recording runs included); ConfigError when there are none."""
    from perfgate.baselines.store import Baseline, BaselineLaunch

    chosen = [e for e in entries if e.verdict in ACCEPTED and e.launches][-last:]
    if not chosen:
        raise ConfigError(f"{source}: no passing run with measured launches to make a baseline from")
    launches = tuple(BaselineLaunch(metrics=dict(m)) for e in chosen for m in e.launches)
    provenance = {"source": "history", "history_file": str(source), "runs": len(chosen),
                  "commits": [e.commit for e in chosen], "times": [e.time for e in chosen],
                  "date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    return Baseline(workload=workload, variant=variant, machine_class=machine_class, launches=launches,
                    machine=dict(chosen[-1].machine or {}), provenance=provenance)


# --------------------------------------------------------------------------- the command


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("history", help="the step-time trend of a workload's gated runs (history_dir)")
    parser.add_argument("workload", metavar="WORKLOAD", help="workload, or workload[variant]")
    parser.add_argument("--root", type=Path, default=None, help="project folder (default: nearest pyproject.toml)")
    parser.add_argument("--machine-class", default=None, help="whose history (default: this machine's)")
    parser.add_argument("--last", type=int, default=None, metavar="N", help="only the last N runs")
    parser.add_argument("--chart", type=Path, default=None, metavar="PNG", help="also draw the trend (matplotlib)")
    parser.add_argument("--changes", action="store_true",
                        help="find the change points of the step time (E-divisive means, docs/bisect.md)")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="--changes as text or JSON")
    parser.add_argument("--refresh-baseline", action="store_true",
                        help="write the baseline from the launches of the last N passing runs (default N 5)")
    parser.set_defaults(func=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    from perfgate.baselines.store import baseline_path, write_baseline
    from perfgate.settings.options import settings_from_args
    from perfgate.system.machine import machine_info

    settings = settings_from_args(args)
    if settings.history_dir is None:
        raise ConfigError("no history_dir: set history_dir in [tool.perfgate] (or PERFGATE_HISTORY_DIR) "
                          "so that gated runs append to a history")
    if args.last is not None and args.last < 1:
        raise ConfigError(f"option --last: expected a whole number >= 1, got {args.last}")
    name, _, rest = args.workload.partition("[")
    variant = rest.rstrip("]") or None
    machine_class = args.machine_class or machine_info(None, settings.machine_class).machine_class
    path = history_path(settings.history_dir, name, machine_class, variant)
    if not path.is_file():
        others = sorted(p.stem for p in path.parent.glob("*.jsonl"))
        known = f"; histories there: {', '.join(others)} (--machine-class)" if others else ""
        raise ConfigError(f"{path}: no history for {args.workload} on {machine_class}{known}")
    entries = read_history(path)
    shown = entries[-args.last:] if args.last else entries
    from perfgate.report.escape import terminal_text  # the file's strings are printed: inert

    found: list[Any] | None = None
    if args.changes:
        from perfgate.commands.history_changes import changes_document, history_changes, render_changes

        found = history_changes(shown)
    if args.format == "json" and found is not None:
        print(json.dumps(changes_document(args.workload, machine_class, shown, found), indent=2, sort_keys=True))
    else:
        print(f"perfgate: {args.workload} on {machine_class}: {len(shown)} of {len(entries)} run(s) ({path})")
        for line in render_trend(shown) + (render_changes(found, len(shown)) if found is not None else []):
            print(terminal_text(line))
    if args.chart is not None:
        marks = [c.index for c in found or ()]
        print(f"perfgate: chart {write_chart(shown, args.chart, f'{args.workload} on {machine_class}', marks)}",
              file=sys.stderr if args.format == "json" else sys.stdout)
    if args.refresh_baseline:
        baseline = baseline_from_history(name, variant, machine_class, entries, args.last or 5, path)
        target = write_baseline(baseline_path(settings.baseline_dir, name, machine_class, variant), baseline)
        print(f"perfgate: baseline {target} from {baseline.provenance['runs']} run(s), "
              f"{len(baseline.launches)} launch(es)")
    return 0

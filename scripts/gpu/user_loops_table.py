"""One row of the user-loop table (docs/measurements/user-loops.md) from scripts/gpu/user-loops.sh's reports:
loop style | bare iteration (the loop's own) | perfgate step median vs the loop's own per launch |
verdicts (record, rerun, changed) | first reason of the changed run."""
from __future__ import annotations

import json
import sys
from pathlib import Path


def result(work: Path, style: str, tag: str) -> dict:
    doc = json.loads((work / f"{style}-{tag}" / "perfgate-report.json").read_text())
    return doc["results"][0]


def own(log: Path) -> str:
    """The loop's own iteration time: median / mean ms."""
    for line in log.read_text().splitlines():
        if line.startswith("PERFGATE_SELF_REPORT "):
            report = json.loads(line.split(" ", 1)[1])
    return f"{report['step_ms_median']:.1f} / {report['step_ms_mean']:.1f}"


def launches(r: dict) -> str:
    parts = []
    for a in r["analyses"]:
        mine, theirs = a["steps"]["median_ms"], (a.get("self_report") or {}).get("step_ms_median")
        diff = "" if not theirs else f" ({mine / theirs - 1:+.1%} vs own {theirs:.1f})"
        parts.append(f"{mine:.1f}{diff}, mean {a['steps']['mean_ms']:.1f}")
    return "; ".join(parts)


def main(work: Path, style: str, change: str) -> None:
    rec, rerun, changed = (result(work, style, t) for t in ("record", "rerun", "changed"))
    first = (changed.get("extra") or {}).get("attribution", {}).get("first_reason", "-")
    source = rec["analyses"][0]["steps"].get("source")
    print(f"| {style} | {own(work / f'{style}-bare.log')} ms | {launches(rec)} | {source} | "
          f"{rec['verdict']} / {rerun['verdict']} | {change}: gate {launches(changed)} | "
          f"**{changed['verdict']}** | {first} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])

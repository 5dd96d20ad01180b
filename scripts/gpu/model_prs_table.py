"""The table of docs/zoo.md's model pull requests from the captures scripts/gpu/model-prs.py made:
each pull request compared with its program's base as ``perfgate compare`` compares two traces,
its verdict, step change and first reason.

    python scripts/gpu/model_prs_table.py FOLDER      (FOLDER/<program>/<side>/trace.sqlite[.xz];
                                                       tests/fixtures/model-prs holds three programs)
"""
from __future__ import annotations

import lzma
import shutil
import sys
import tempfile
from pathlib import Path

from perfgate.analysis import AnalysisOptions
from perfgate.pipeline.inputs import compare_and_explain


def trace(side: Path, scratch: Path) -> Path:
    if (side / "trace.sqlite").is_file():
        return side / "trace.sqlite"
    out = scratch / side.parent.name / side.name / "trace.sqlite"
    out.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(side / "trace.sqlite.xz") as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return out


def main() -> int:
    root = Path(sys.argv[1])
    print("| program | pull request | verdict | step (median) | first reason |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for program in sorted(p for p in root.iterdir() if (p / "base").is_dir()):
            base = trace(program / "base", Path(tmp))
            for side in sorted(s for s in program.iterdir() if s.is_dir() and s.name != "base"):
                outcome, attribution = compare_and_explain(base, trace(side, Path(tmp)), options=AnalysisOptions())
                step = next((c for c in outcome.comparisons if c.metric == "step_time_ms"), None)
                change = f"{step.baseline:.2f} -> {step.current:.2f} ms" if step is not None else "-"
                first = attribution.first_reason.replace("|", "\\|") if attribution else "-"
                print(f"| {program.name} | {side.name} | {outcome.verdict.value} | {change} | {first} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

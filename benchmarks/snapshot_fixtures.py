"""Save ``perfgate analyze --format json`` of every committed export, to diff before and after a
change of the analysis: ``python3 benchmarks/snapshot_fixtures.py OUT_DIR`` writes one
``<case>.json`` per export (stdout, with stderr and the exit code appended when the command fails),
then ``diff -r BEFORE_DIR AFTER_DIR``.

Exports: ``tests/fixtures/traces/*/trace.sqlite`` and ``shared/fixtures/*.sqlite`` (beside the
repository, where it exists), each with the default options and with ``--warmup-steps 0``."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VARIANTS = {"default": [], "warmup0": ["--warmup-steps", "0"],
            # the emit_nvtx export has no step range: its aten::linear ranges stand in for steps
            "linear": ["--step-pattern", r"aten::linear, op_id = \d+", "--warmup-steps", "2"]}


def exports(root: Path = ROOT) -> dict[str, Path]:
    sys.path.insert(0, str(root / "tests"))
    from fixture_files import unpack   # the committed exports are stored as .sqlite.xz

    unpack(root / "tests" / "fixtures")
    found = {p.parent.name: p for p in sorted((root / "tests" / "fixtures" / "traces").glob("*/trace.sqlite"))}
    for shared in (root / "shared" / "fixtures", root.parent / "shared" / "fixtures"):
        found.update({f"shared-{p.stem}": p for p in sorted(shared.glob("*.sqlite"))})
    return found


def snapshot(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for case, path in exports().items():
        for variant, extra in VARIANTS.items():
            proc = subprocess.run([sys.executable, "-m", "perfgate", "analyze", str(path), "--format", "json", *extra],
                                  capture_output=True, text=True, env=env, cwd=ROOT)
            text = proc.stdout if proc.returncode == 0 else f"{proc.stdout}\nstderr: {proc.stderr}\nrc: {proc.returncode}\n"
            (out / f"{case}.{variant}.json").write_text(text)
            print(f"{case:40s} {variant:8s} rc={proc.returncode}")


if __name__ == "__main__":
    snapshot(Path(sys.argv[1]))

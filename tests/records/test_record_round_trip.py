"""Stage records survive their serialisation, on every committed capture: an Analysis written as
JSON (``Analysis.to_dict``, what result files and ``perfgate analyze --format json`` hold) and read
back (``Analysis.from_dict``, what the diagnosis and ``compare`` read) gives the same
document and the same metrics; a baseline written and loaded gives the same launch metrics."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate.baselines.store import baseline_from_analyses, load_baseline, write_baseline
from perfgate.pipeline.inputs import analyze_file
from perfgate.records.model import Analysis, MachineInfo
from layout import FIXTURES

CAPTURES = sorted(FIXTURES.rglob("*.sqlite"))


def test_there_are_captures_to_check() -> None:
    assert len(CAPTURES) >= 15


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: str(p.relative_to(FIXTURES)))
def test_analysis_round_trips_through_json(path: Path, tmp_path: Path) -> None:
    analysis = analyze_file(path)
    doc = json.loads(json.dumps(analysis.to_dict(), default=str))
    back = Analysis.from_dict(doc)
    assert json.loads(json.dumps(back.to_dict(), default=str)) == doc
    assert back.metrics() == analysis.metrics()
    machine = MachineInfo("test-x1", None, 0, None, None, None, None)
    written = write_baseline(tmp_path / "b.json", baseline_from_analyses("w", [analysis], machine, {}))
    assert load_baseline(written).launch_metrics == [analysis.metrics()]

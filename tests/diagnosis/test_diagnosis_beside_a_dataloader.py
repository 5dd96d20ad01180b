"""A loop without a DataLoader, captured on an H200 beside another program's DataLoader: the zoo's
nanoGPT (its ``get_batch`` makes the batches) gated with ``scripts/gpu/zoo-gate.py --only nanogpt``
while ``scripts/gpu/neighbour_loader.py --workers 2`` ran, and its input-pipeline pull request
(tests/fixtures/traces/gpu-nanogpt-beside-a-dataloader-{base,head}: the baseline's first launch and
the pull request's, nsys 2025.3.1, with ``nsys stats -r nvtx_sum`` of each).

nsys lists every process of the machine in PROCESSES, the neighbour's two ``pt_data_worker``
processes too. Before autostep's marks decided, the account said "the loop waits longer for each
batch with the same 2 DataLoader workers"; the change is the program's own batch function."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.gate.compare import ComparePolicy
from perfgate.pipeline.inputs import compare_and_explain
from perfgate.records.model import Verdict
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
BASE, HEAD = (TRACES / f"gpu-nanogpt-beside-a-dataloader-{side}" / "trace.sqlite" for side in ("base", "head"))


@pytest.mark.parametrize("path", [BASE, HEAD], ids=["base", "head"])
def test_the_neighbours_workers_are_in_the_capture_but_not_the_loops(path: Path) -> None:
    with sqlite3.connect(path) as con:       # the premise: nsys listed the other program's workers
        listed = con.execute("SELECT count(DISTINCT pid) FROM PROCESSES WHERE name = 'pt_data_worker'").fetchone()[0]
    assert listed == 2
    facts = analyze_trace(path, AnalysisOptions(skip_steps=1)).facts
    assert facts is not None and facts.dataloader is False and facts.dataloader_workers is None, facts
    assert facts.input_function is not None and facts.input_function.endswith("get_batch"), facts


def test_the_slower_batches_are_told_as_the_programs_own_not_a_dataloaders() -> None:
    outcome, attribution = compare_and_explain(BASE, HEAD, ComparePolicy(), AnalysisOptions(skip_steps=1))
    assert outcome.verdict is Verdict.REGRESSED, outcome.summary
    assert attribution is not None
    first = attribution.first_reason
    assert first.startswith("data_load +") and "get_batch (no DataLoader on either side)" in first, first
    assert "worker" not in first, first

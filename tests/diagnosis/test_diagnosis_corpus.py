"""The diagnosis corpus (tests/corpus/): pull-request edits of one training script, each captured on
an H100 before and after (scripts/gpu/diagnosis-corpus.sh, nsys 2025.3.1, one launch per side,
the traces xz-compressed under tests/fixtures/corpus/). For every edit that made the script
slower, the gate must say REGRESSED and its first reason must name the mechanism (the case's
truth); the reason must be a difference between the runs, never a condition of both; and the
share of the change the reasons account for must be printed. Edits that did not slow the script
must not be called regressions."""
from __future__ import annotations

import lzma
import re
import shutil
import sys
from pathlib import Path

import pytest

from perfgate.diagnosis.render import render_attribution_text
from layout import TESTS
from perfgate.records.model import Verdict

HERE = TESTS
sys.path.insert(0, str(HERE / "corpus"))
from cases import CASES, MECHANISM_CASES  # noqa: E402

CAPTURES = HERE / "fixtures" / "corpus"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for side in CAPTURES.iterdir():
        (root / side.name).mkdir()
        with lzma.open(side / "trace.sqlite.xz") as src, open(root / side.name / "trace.sqlite", "wb") as dst:
            shutil.copyfileobj(src, dst)
    return root


def _compare(corpus: Path, case):
    from perfgate.analysis import AnalysisOptions
    from perfgate.pipeline.inputs import compare_and_explain

    return compare_and_explain(corpus / case.base_side / "trace.sqlite", corpus / case.head_side / "trace.sqlite",
                               options=AnalysisOptions(skip_steps=5))


def test_every_side_of_the_corpus_was_captured() -> None:
    sides = {c.base_side for c in CASES} | {c.head_side for c in CASES}
    assert sides == {p.name for p in CAPTURES.iterdir()}
    assert len([c for c in CASES if c.regresses]) >= 12
    assert len(MECHANISM_CASES) >= 8 and len([c for c in MECHANISM_CASES if c.first]) >= 7


@pytest.mark.parametrize("case", [c for c in CASES if c.regresses], ids=lambda c: c.name)
def test_a_slowing_edit_is_regressed_and_its_first_reason_names_the_mechanism(corpus: Path, case) -> None:
    outcome, attribution = _compare(corpus, case)
    assert outcome.verdict == Verdict.REGRESSED, outcome.summary
    assert attribution is not None
    first = attribution.first_reason
    assert re.search(case.truth, first, re.IGNORECASE), f"{case.name} ({case.mechanism}): {first}"
    # the first reason is the largest difference, never a rule that fired on both sides
    top = attribution.reasons[0]
    assert top.text == first
    if top.mechanism.startswith("rule:"):
        assert top.mechanism[5:] in {f.rule for f in attribution.new_findings}
    # and the share of the change the reasons account for is printed
    assert 0 < attribution.explained_ms <= attribution.step_mean_delta_ms + 1e-9
    assert f"explained: {attribution.explained_ms:.2f} of {attribution.step_mean_delta_ms:+.2f} ms/step" \
        in render_attribution_text(attribution)
    # the JSON carries the same reasons, in the same words, as the text every report prints
    doc = attribution.to_dict()
    assert doc["first_reason"] == first and doc["reasons"][0]["text"] == first
    assert f"1. {min(top.ms, attribution.step_mean_delta_ms):.2f} ms/step: {first}" in render_attribution_text(attribution)


@pytest.mark.parametrize("case", [c for c in CASES if c.regresses is False], ids=lambda c: c.name)
def test_an_edit_that_did_not_slow_the_script_is_not_a_regression(corpus: Path, case) -> None:
    outcome, _ = _compare(corpus, case)
    assert outcome.verdict != Verdict.REGRESSED, outcome.summary


def test_data_loading_reasons_name_workers_only_when_their_number_changed(corpus: Path) -> None:
    # nsys records the DataLoader's pt_data_worker processes: 4 on both sides of the slower transform
    slower = next(c for c in CASES if c.name == "slow_transform")
    _, attribution = _compare(corpus, slower)
    assert "same 4 DataLoader workers" in attribution.first_reason and "num_workers=0" not in render_attribution_text(attribution)
    assert attribution.cause == "input pipeline"
    fewer = next(c for c in CASES if c.name == "workers_off")
    _, attribution = _compare(corpus, fewer)
    assert "DataLoader workers went from 4 to 0" in attribution.first_reason and attribution.cause == "workers"


@pytest.mark.parametrize("case", MECHANISM_CASES, ids=lambda c: c.name)
def test_a_mechanism_edit_is_told_as_the_replacement_it_made(corpus: Path, case) -> None:
    """Issue 29: the first reason names the mechanism in words (attention path, precision, compile,
    CUDA graphs, the optimizer's implementation, cuDNN's kernels, a library kernel written by hand),
    with the kernels that disappeared beside those that appeared. Where the run came out faster
    than its base for another reason (``first=False``), the mechanism is named among the
    differences that went the other way."""
    outcome, attribution = _compare(corpus, case)
    assert attribution is not None, outcome.message
    said = attribution.first_reason if case.first else next(
        (n for n in attribution.notes if n.startswith("the other way") and re.search(case.truth, n, re.IGNORECASE)), "")
    assert re.search(case.truth, said, re.IGNORECASE), f"{case.name}: {render_attribution_text(attribution)}"
    assert re.search(r"\(gone: .+; new: .+\)", said), said

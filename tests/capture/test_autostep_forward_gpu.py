"""Autostep's forward range (perfgate/capture/autostep/forward.py) on the GPU: the zoo's nanoGPT and
DCGAN, unmodified and without NVTX of their own, captured on an H200 as the gate's profile launch
captures them (scripts/gpu/forward-phase.py, nsys 2025.3.1; tests/fixtures/forward-phase/, beside
``nsys stats -r nvtxsum`` of each file, run by this machine's nsys 2022.4)."""
from __future__ import annotations

import csv
import lzma
import shutil
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions
from perfgate.pipeline.inputs import analyze_file
from layout import TESTS

CAPTURES = TESTS / "fixtures" / "forward-phase"


def _instances(program: str) -> dict[str, int]:
    with open(CAPTURES / program / "nvtxsum.csv", newline="") as fh:
        return {row["Range"]: int(row["Instances"]) for row in csv.DictReader(fh)}


@pytest.fixture(scope="module")
def analyses(tmp_path_factory: pytest.TempPathFactory):
    out = {}
    for program in ("nanogpt", "dcgan"):
        db = tmp_path_factory.mktemp(program) / "trace.sqlite"
        with lzma.open(CAPTURES / program / "trace.sqlite.xz") as src, open(db, "wb") as dst:
            shutil.copyfileobj(src, dst)
        out[program] = analyze_file(db, AnalysisOptions())
    return out


def test_every_training_forward_but_the_first_is_a_range_in_nsys_own_count() -> None:
    # nanoGPT: one forward and one backward an iteration, 61 iterations; the first forward runs
    # before the model is found (at the first backward pass); the evaluation's calls are none
    counts = _instances("nanogpt")
    assert counts["perfgate/backward"] == 61 and counts["perfgate/forward"] == 60


def test_the_forward_phase_is_the_models_calls_with_their_gpu_time(analyses) -> None:
    nano = analyses["nanogpt"]
    forward, backward = nano.phases["forward"], nano.phases["backward"]
    assert forward.count == backward.count == nano.steps.count
    assert forward.gpu_per_step_ms is not None and forward.gpu_per_step_ms > 0.5
    # the backward pass runs about twice the forward's GPU work (two GEMMs per forward GEMM)
    assert 1.5 < backward.gpu_per_step_ms / forward.gpu_per_step_ms < 3.0
    # a GAN: the discriminator on real and fake images, the generator, the discriminator again for
    # the generator's loss: four forward calls and three backward passes an iteration, two roots
    gan = analyses["dcgan"]
    assert round(gan.phases["forward"].count / gan.steps.count) == 4
    assert round(gan.phases["backward"].count / gan.steps.count) == 3

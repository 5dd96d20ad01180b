"""A change of the model told in the model's words (perfgate.diagnosis.model_change).

The zoo's model pull requests, captured on an H200 (scripts/gpu/model-prs.py, nsys 2025.3.1, one
launch per side, unmodified public programs changed through their own flags; the traces
xz-compressed under tests/fixtures/model-prs/ beside nsys's stats of each): each is REGRESSED and its
first reason names the model change, with counts that are the traces' own. Then each predicate of
the account held against a case that satisfies it and one that does not."""
from __future__ import annotations

import lzma
import re
import shutil
from pathlib import Path

import pytest

from perfgate.diagnosis.mechanisms import replacements
from perfgate.diagnosis.model_change import Work, model_change, work
from perfgate.records.model import Verdict
from layout import TESTS

CAPTURES = TESTS / "fixtures" / "model-prs"

#: (program, pull request) -> the first reason's mechanism and words (searched)
TRUTH = {
    ("nanogpt", "deeper"): ("model:deeper", r"^more layers: .*GEMMs 100 -> 148, attention kernels 24 -> 36, "
                                            r"normalization kernels 39 -> 57 launches/step.*: a deeper model$"),
    ("nanogpt", "wider"): ("model:wider", r"^wider layers: .*\(more parameters to update\), with the same inputs"),
    ("nanogpt", "batch"): ("model:inputs", r"^larger inputs: 256 KiB -> 384 KiB copied to the GPU per step.*"
                                           r"\(the same parameters\): a larger batch, longer sequences"),
    ("nanogpt", "sequence"): ("model:inputs", r"^larger inputs: 256 KiB -> 384 KiB"),
    ("timm_ddp", "deeper"): ("model:deeper", r"^more layers: .*convolutions 235 -> 426, normalization kernels "
                                             r"40 -> 72 launches/step.*a deeper model$"),
    ("timm_ddp", "batch"): ("model:batch", r"^a larger batch: 64 -> 128 samples per step"),
    ("timm_ddp", "images"): ("model:inputs", r"^larger inputs: .*\(the same batch of 64: larger samples\).*"
                                             r"larger images or longer sequences\?$"),
    ("dcgan", "wider"): ("model:wider", r"^wider layers: .*x2\.\d+ as long"),
    # per step 64 -> 128 samples and +10 %; per sample faster. Its epoch's end (a checkpoint, sample
    # images) falls on 15 measured steps instead of 39: the same synchronizations, fewer steps
    # an LSTM fed from GPU tensors, its parameters updated by hand: the parameters are read from the
    # launch sizes of gradient clipping's foreach norms, the predictions from the log-softmax's
    ("word_language_model", "deeper"): ("model:deeper", r"^more layers: .*GEMMs 104 -> 204, recurrent-layer kernels "
                                                        r"82 -> 164 launches/step.*25\.6k -> 42\.0k threads/step "
                                                        r"\(more parameters to update\): a deeper model$"),
    ("word_language_model", "sequence"): ("model:sequence", r"^a longer sequence: .*recurrent-layer kernels 82 -> 162 "
                                                            r"launches/step.*cover 12\.9k -> 25\.7k threads/step "
                                                            r"\(x2\.00: more predictions per step\).*\(the same "
                                                            r"parameters\): longer sequences through a recurrent layer\?$"),
    ("dcgan", "batch"): ("model:batch", r"^a larger batch: 64 -> 128 samples per step; the step 22\.3 -> 24\.5 ms, "
                                        r"per sample 0\.348 -> 0\.191 ms \(x0\.55\).*synchronizations in .*backward: "
                                        r"521 -> 377 in the launch's measured steps, over 39 -> 15 steps"),
}
#: nothing in any of these reasons may name a mechanism the pull request did not touch
NEVER = re.compile(r"cudnn\.benchmark|TF32|float64|autotun|recompil|precision|cuDNN ran other", re.IGNORECASE)


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("model-prs")
    for side in CAPTURES.glob("*/*"):
        (root / side.parent.name / side.name).mkdir(parents=True)
        with lzma.open(side / "trace.sqlite.xz") as src, \
                open(root / side.parent.name / side.name / "trace.sqlite", "wb") as dst:
            shutil.copyfileobj(src, dst)
    return root


def _compare(traces: Path, program: str, pr: str):
    from perfgate.analysis import AnalysisOptions
    from perfgate.pipeline.inputs import compare_and_explain

    return compare_and_explain(traces / program / "base" / "trace.sqlite", traces / program / pr / "trace.sqlite",
                               options=AnalysisOptions())


def test_every_pull_request_was_captured_beside_nsys_stats() -> None:
    sides = {(p.parent.name, p.name) for p in CAPTURES.glob("*/*")}
    assert {k for k in TRUTH} | {(p, "base") for p, _ in TRUTH} <= sides
    for side in CAPTURES.glob("*/*"):
        assert (side / "cuda_gpu_kern_sum.csv").stat().st_size > 0 and (side / "nvtx_sum.csv").is_file()


@pytest.mark.parametrize("program,pr", list(TRUTH), ids=lambda v: str(v))
def test_a_model_pull_request_is_told_as_the_model_change(traces: Path, program: str, pr: str) -> None:
    outcome, attribution = _compare(traces, program, pr)
    assert outcome.verdict == Verdict.REGRESSED, outcome.summary
    assert attribution is not None
    mechanism, words = TRUTH[(program, pr)]
    top = attribution.reasons[0]
    assert top.mechanism == mechanism, top.text
    assert re.search(words, top.text), top.text
    assert attribution.first_reason == top.text     # memory (it grew too) keeps its own line
    assert not any(NEVER.search(r.text) for r in attribution.reasons), [r.text for r in attribution.reasons]
    # one account: the shares partition the change
    assert attribution.explained_ms <= attribution.step_mean_delta_ms + 1e-9


#: pull requests that made the step faster (cuBLAS chose other kernels for the new shapes): the model
#: change first, then the kernels that made it faster; before, only the kernels (and once "TF32 turned off")
FASTER = {("word_language_model", "wider"): ("model:wider", r"^wider layers: .*25\.6k -> 52\.2k threads/step \(more "
                                                            r"parameters to update\), with the same predictions .*; the "
                                                            r"step is faster with the kernels chosen for it: .*gemmSN_TN")}


@pytest.mark.parametrize("program,pr", list(FASTER), ids=lambda v: str(v))
def test_a_model_pull_request_that_made_the_step_faster_names_the_change_first(traces: Path, program: str,
                                                                                 pr: str) -> None:
    outcome, attribution = _compare(traces, program, pr)
    assert outcome.verdict == Verdict.IMPROVED, outcome.summary
    assert attribution is not None
    mechanism, words = FASTER[(program, pr)]
    assert attribution.reasons[0].mechanism == mechanism and re.search(words, attribution.reasons[0].text), \
        attribution.reasons[0].text
    # the kernels' own names say tf32: only a claim about precision is barred
    claims = re.compile(r"TF32 turned|precision|cudnn\.benchmark|float64|autotun|recompil", re.IGNORECASE)
    assert not any(claims.search(r.text) for r in attribution.reasons), [r.text for r in attribution.reasons]


def test_the_counts_a_reason_states_are_the_traces_launches(traces: Path) -> None:
    from perfgate.analysis import AnalysisOptions
    from perfgate.pipeline.inputs import analyze_file

    base, cur = (analyze_file(traces / "timm_ddp" / s / "trace.sqlite", AnalysisOptions()) for s in ("base", "deeper"))
    wb, wc = work(base, base.facts), work(cur, cur.facts)
    assert wb is not None and wc is not None
    change = model_change(wb, wc)
    assert change is not None and change.kind == "deeper"
    # resnet18 -> resnet34: 8 -> 16 basic blocks, 20 -> 36 batch norms in the model (forward, and
    # backward's two kernels per norm): the normalization launches per step grew 40 -> 72
    assert round(wb.layers["normalization"][0]) == 40 and round(wc.layers["normalization"][0]) == 72
    assert f"normalization kernels {wb.layers['normalization'][0]:.0f} -> {wc.layers['normalization'][0]:.0f}" in change.text
    # the parameters, read from the threads the optimizer's kernels launch: as they grew in the export's
    # own kernel table (grid x block of the kernels launched in the optimizer's ranges, per range)
    grew = _optimizer_threads(traces / "timm_ddp" / "deeper") / _optimizer_threads(traces / "timm_ddp" / "base")
    assert wc.params_threads / wb.params_threads == pytest.approx(grew, rel=0.005)     # 19/10 launches: 1.9
    assert f"{wb.params_threads / 1e3:.1f}k -> {wc.params_threads / 1e6:.2f}M threads/step" in change.text


def _optimizer_threads(side: Path) -> float:
    """The threads the kernels launched inside one ``perfgate/optimizer`` range launch, on average,
    from the export's tables (grid x block of each kernel whose launch call is inside the range)."""
    import sqlite3

    con = sqlite3.connect(side / "trace.sqlite")
    try:
        ranges, total = con.execute(
            "WITH o AS (SELECT n.start, n.\"end\", n.globalTid FROM NVTX_EVENTS n LEFT JOIN StringIds s "
            "ON s.id = n.textId WHERE coalesce(n.text, s.value) = 'perfgate/optimizer') "
            "SELECT (SELECT count(*) FROM o), sum(CAST(k.gridX AS REAL) * k.gridY * k.gridZ * k.blockX * k.blockY "
            "* k.blockZ) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN CUPTI_ACTIVITY_KIND_RUNTIME r "
            "ON r.correlationId = k.correlationId AND r.globalTid >> 24 = k.globalPid >> 24 "
            "JOIN o ON r.start BETWEEN o.start AND o.\"end\" AND r.globalTid = o.globalTid").fetchone()
    finally:
        con.close()
    return total / ranges


# ----------------------------------------------------------------------------- the predicates


def _work(layers: dict[str, tuple[float, float]], params: float = 0.2, inputs: float | None = 1e6,
          batch: int | None = None) -> Work:
    return Work(layers, params, inputs, batch)


BASE = _work({"matmul": (100, 2.0), "normalization": (40, 1.0)})


def test_deeper_needs_more_launches_and_more_parameters() -> None:
    deeper = _work({"matmul": (150, 3.0), "normalization": (60, 1.5)}, params=0.3)
    assert model_change(BASE, deeper).kind == "deeper"
    # the same launches more often with the same parameters: recomputation or another path, no model change
    recomputed = _work({"matmul": (150, 3.0), "normalization": (60, 1.5)}, params=0.2)
    assert model_change(BASE, recomputed) is None
    # an optimizer too small to read: deeper, or layers called more often
    tiny = model_change(_work(BASE.layers, params=0.01), _work({"matmul": (200, 4.0), "normalization": (80, 2.0)},
                                                                  params=0.01))
    assert tiny.kind == "deeper" and "or layers called more often" in tiny.text
    assert tiny.text.startswith("the same kernels run more often")      # not "more layers": it may be more calls


def _sized(layers: dict[str, tuple[float, float]], params: float | None, loss: tuple[float, float] | None,
           params_ms: float = 0.01) -> Work:
    """A run whose parameters are read from launch sizes (an optimizer too small to time) and whose
    loss has a size: no bytes copied to the GPU, no known batch (an LSTM fed from GPU tensors)."""
    return Work(layers, params_ms, None, None, None, params, loss)


RNN = {"matmul": (104, 0.66), "recurrent": (82, 0.14)}
LONGER = {"matmul": (189, 1.24), "recurrent": (162, 0.26)}


def test_parameters_are_read_from_launch_sizes_before_time() -> None:
    # the optimizer's time too small to read (0.01 ms/step), its launches' threads 25.6k -> 42.0k: more parameters
    deeper = model_change(_sized(RNN, 25_600, (4, 12_860)), _sized(LONGER, 41_984, (4, 12_860)))
    assert deeper.kind == "deeper" and deeper.text.startswith("more layers: ")
    assert "25.6k -> 42.0k threads/step (more parameters to update): a deeper model" in deeper.text
    # sizes beat time: the threads the same, the time doubled (noise, another clock): not more parameters
    timed = model_change(_sized(RNN, 25_600, None, params_ms=0.2), _sized(LONGER, 25_600, None, params_ms=0.4))
    assert timed is None


def test_a_longer_sequence_needs_more_launches_the_same_parameters_and_more_predictions() -> None:
    sequence = model_change(_sized(RNN, 25_600, (4, 12_860)), _sized(LONGER, 25_600, (4, 25_590)))
    assert sequence.kind == "sequence", sequence
    assert ("the loss's 4 launches/step cover 12.9k -> 25.6k threads/step (x1.99: more predictions per step)"
            in sequence.text)
    assert sequence.text.endswith("(the same parameters): longer sequences through a recurrent layer?")
    # the parameters cannot be read: still the sequence, from the loss alone
    assert model_change(_sized(RNN, None, (4, 12_860)), _sized(LONGER, None, (4, 25_590))).kind == "sequence"
    # the same predictions and parameters, more launches: recomputation or another path, no model change
    assert model_change(_sized(RNN, 25_600, (4, 12_860)), _sized(LONGER, 25_600, (4, 12_860))) is None
    # the same predictions, parameters unknown: deeper or more calls, and no sequence is suggested
    hedged = model_change(_sized(RNN, None, (4, 12_860)), _sized(LONGER, None, (4, 12_860)))
    assert hedged.kind == "deeper" and "the same predictions" in hedged.text and "sequence" not in hedged.text


def test_a_loss_says_nothing_where_its_launches_changed_or_it_is_one_block() -> None:
    # one block of 128 threads per launch (a reduction to one number): its size is not the predictions'
    assert model_change(_sized(RNN, None, (2, 256)), _sized(LONGER, None, (2, 512))).text.endswith(
        "(a longer sequence through a recurrent layer)?")
    # other loss launches per step (4 -> 6): its threads do not compare
    assert "predictions" not in model_change(_sized(RNN, None, (4, 12_860)), _sized(LONGER, None, (6, 25_590))).text


def test_more_predictions_at_the_same_launches_and_parameters_are_larger_inputs() -> None:
    same = {"matmul": (109, 0.67), "recurrent": (82, 0.14)}      # a launch-bound step: the GPU time did not grow
    inputs = model_change(_sized(RNN, 25_600, (4, 12_860)), _sized(same, 25_600, (4, 24_760)))
    assert inputs.kind == "inputs", inputs
    assert inputs.text.startswith("larger inputs: the loss's 4 launches/step cover 12.9k -> 24.8k threads/step (x1.93")
    assert inputs.text.endswith("(the same parameters): a larger batch or longer sequences?")
    # the parameters grew too: not larger inputs (a wider model, where the kernels take longer)
    assert model_change(_sized(RNN, 25_600, (4, 12_860)), _sized(same, 52_220, (4, 24_760))) is None
    # the parameters unknown: nothing says the inputs grew rather than the model
    assert model_change(_sized(RNN, None, (4, 12_860)), _sized(same, None, (4, 24_760))) is None


def test_threads_by_family_multiplies_launches_by_each_labels_size() -> None:
    from perfgate.analysis.kernel_families import PER_PARAMETER, threads_by_family

    table = {"backward": {"loss": {"softmax_warp_backward": [1.0, 0.003], "nll_loss_backward": [1.0, 0.003]}},
             "optimizer": {PER_PARAMETER.id: {"vectorized_elementwise_kernel": [8.0, 0.01]},
                           "matmul.fp32": {"gemmSN_TN_kernel": [2.0, 0.01]}}}
    sizes = {("loss", "softmax_warp_backward"): 6397.0, ("loss", "nll_loss_backward"): 32.0,
             ("elementwise", "vectorized_elementwise_kernel"): 1024.0}
    out = threads_by_family(table, sizes)
    assert out == {"backward": {"loss": 6429.0}, "optimizer": {PER_PARAMETER.id: 8192.0}}   # no size: no GEMMs


def test_wider_needs_the_same_launches_longer_kernels_more_parameters_and_the_same_inputs() -> None:
    wider = _work({"matmul": (98, 4.0), "normalization": (40, 1.4)}, params=0.45)
    assert model_change(BASE, wider).kind == "wider"
    assert model_change(BASE, _work(wider.layers, params=0.2)) is None           # same parameters: no model change
    assert model_change(BASE, _work({"matmul": (100, 2.1), "normalization": (40, 1.0)}, params=0.45)) is None
    # launches neither the same nor grown together: no model change told
    assert model_change(BASE, _work({"matmul": (112, 4.0), "normalization": (40, 1.4)}, params=0.45)) is None


def test_a_larger_batch_and_larger_inputs() -> None:
    longer = {"matmul": (100, 3.0), "normalization": (40, 1.5)}
    batch = model_change(_work(BASE.layers, batch=64), _work(longer, batch=128))
    assert batch.kind == "batch" and batch.text.startswith("a larger batch: 64 -> 128 samples per step")
    inputs = model_change(_work(BASE.layers, batch=64), _work(longer, inputs=2e6, batch=64))
    assert inputs.kind == "inputs" and "the same batch of 64" in inputs.text
    # the same inputs, the same parameters, longer kernels: other kernels (an algorithm), not the model
    assert model_change(BASE, _work(longer)) is None


def test_a_larger_batch_is_told_whatever_its_kernels_and_per_sample() -> None:
    """A batch that grew is the change even where the layers' launches moved with it (cuDNN's other
    algorithms, an epoch's end on fewer steps), and the step is told per sample too; a batch that
    grew less than GREW is not."""
    more = Work({"matmul": (130, 5.0), "normalization": (40, 1.1)}, 0.2, 1e6, 128, 24.5)
    batch = model_change(Work(BASE.layers, 0.2, 1e6, 64, 22.3), more)
    assert batch.kind == "batch", batch
    assert "the step 22.3 -> 24.5 ms, per sample 0.348 -> 0.191 ms (x0.55)" in batch.text
    assert "140 -> 170 kernel launches/step" in batch.text
    assert model_change(Work(BASE.layers, 0.2, 1e6, 120, 22.3), more) is None     # 120 -> 128: no


def test_synchronizations_of_an_epochs_end_over_fewer_steps_are_the_batchs() -> None:
    from perfgate.diagnosis.model_change import ModelChange, spread_syncs
    from perfgate.records.diagnosis import Reason

    change = ModelChange("batch", "a larger batch: 64 -> 128 samples per step", "larger batch")
    told = Reason("model:batch", "forward", 2.0, change.text, change.cause)
    syncs = Reason("syncs", "backward", 5.0, "new host-GPU synchronizations in backward: +7/step")
    # 4.2/step over 39 steps = 165 in all; 11/step over 15 steps = 165: the same ones, fewer steps
    spread = spread_syncs([syncs, told], change, {"backward": 4.2}, {"backward": 11.0}, 39, 15)
    assert [r.mechanism for r in spread] == ["model:batch"] and spread[0].ms == 7.0
    assert "backward: 164 -> 165 in the launch's measured steps, over 39 -> 15 steps" in spread[0].text
    # 20/step over 15 steps = 300 in all: more synchronizations than the base made, a reason of their own
    kept = spread_syncs([syncs, told], change, {"backward": 4.2}, {"backward": 20.0}, 39, 15)
    assert [r.mechanism for r in kept] == ["syncs", "model:batch"]
    # another model change: nothing is spread
    wider = ModelChange("wider", "wider layers", "wider model")
    assert spread_syncs([syncs, told], wider, {"backward": 4.2}, {"backward": 11.0}, 39, 15) == [syncs, told]


def test_no_precision_change_is_told_from_kernels_that_state_no_precision() -> None:
    tf32 = {"matmul.tf32": {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n": [36.0, 0.2]}}
    untyped = {"matmul.fp32": {"gemmSN_TN_kernel": [40.0, 0.25]}}
    sgemm = {"matmul.fp32": {"cutlass_80_simt_sgemm_256x128_8x4_nn_align1": [36.0, 0.9]}}
    assert [r.kind for r in replacements(tf32, untyped)] == []
    assert [r.kind for r in replacements(tf32, sgemm)] == ["precision"]

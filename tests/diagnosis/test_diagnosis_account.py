"""One account of a change (perfgate.diagnosis.account): the first reason is the largest share of the
change, whichever phase it is; a run that got faster is explained as faster; every phase slowing
together is the machine; the explained line, the reasons, the kernel table and the rule changes
never contradict each other, on real captures paired the way they come (the corpus, the ladder,
CPU captures of nsys 2022.4) and paired against each other (contradictory-looking inputs)."""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions
from perfgate.diagnosis.attribution import explain_regression
from perfgate.diagnosis.render import render_attribution_text
from perfgate.records.staleness import Staleness
from perfgate.pipeline.inputs import analyze_file, compare_and_explain
from layout import FIXTURES

TRACES, CORPUS, BASELINES = FIXTURES / "traces", FIXTURES / "corpus", FIXTURES.parent.parent / "baselines"
CPU = {name: TRACES / f"cpu-loader-{name}" / "trace.sqlite" for name in ("base", "wider", "slow-data")}


def _explain(base: Path, cur: Path, skip: int = 5):
    return compare_and_explain(base, cur, options=AnalysisOptions(skip_steps=skip))[1]


def test_a_wider_model_on_the_cpu_is_blamed_on_its_compute_not_on_data_loading() -> None:
    a = _explain(CPU["base"], CPU["wider"])
    assert re.match(r"compute \+\d+\.\d ms/step of CPU time \((optimizer|backward|forward) ", a.first_reason), a.first_reason
    assert {"forward", "backward", "optimizer"} <= set(re.findall(r"(forward|backward|optimizer) \+", a.first_reason))
    assert a.cause == "model size"
    # with data_load a little slower too (the issue's +0.1 ms and 2 % of the change), still the compute
    base = analyze_file(CPU["base"], AnalysisOptions(skip_steps=5))
    wider = analyze_file(CPU["wider"], AnalysisOptions(skip_steps=5))
    data = base.phases["data_load"]
    slower_data = replace(wider, phases={**wider.phases, "data_load": replace(
        data, cpu_per_step_ms=data.cpu_per_step_ms + 0.1)})
    assert explain_regression(base, slower_data).first_reason.startswith("compute ")


def test_a_slower_dataset_on_the_cpu_is_blamed_on_data_loading_whatever_the_compute_shows() -> None:
    a = _explain(CPU["base"], CPU["slow-data"])
    assert a.first_reason.startswith("data_load +"), a.first_reason
    assert "data" in a.first_reason and a.reasons[0].mechanism in ("data_loading", "rule:dataloader_blocking")
    # the loader's two workers are in the trace: never "runs in the training process"
    text = render_attribution_text(a)
    assert "training process" not in text and "num_workers=0" not in text


def test_every_phase_slowing_together_is_the_machine() -> None:
    base = analyze_file(CPU["wider"], AnalysisOptions(skip_steps=5))
    twice = {n: replace(p, cpu_per_step_ms=2 * p.cpu_per_step_ms, cpu_mean_ms=2 * p.cpu_mean_ms)
             for n, p in base.phases.items()}
    summary = base.steps.summary_ms
    loaded = replace(base, phases=twice, steps=replace(base.steps, summary_ms=replace(
        summary, mean=2 * summary.mean, median=2 * summary.median)))
    a = explain_regression(base, loaded)
    assert a.first_reason.startswith("every phase got slower by about the same factor (x2.00"), a.first_reason
    assert a.cause == "machine" and "fewer workers" not in render_attribution_text(a)
    # and faster together: the machine again, in the other direction
    assert explain_regression(loaded, base).first_reason.startswith("every phase got faster")


def test_compute_phases_growing_together_in_changed_code_are_the_models_work() -> None:
    """A model made four times as deep on the CPU grows forward, backward and the optimizer by
    about one factor (the zoo's nanoGPT: x3.26, x3.52, x2.73): where the code changed that is the
    model's work, not the machine; with the code unknown, still the machine."""
    loaded = analyze_file(CPU["wider"], AnalysisOptions(skip_steps=5))
    compute = {n: p for n, p in loaded.phases.items() if re.search(r"forward|backward|optim", n)}
    assert len(compute) >= 3
    base = replace(loaded, phases=compute)       # a loop of compute phases alone, as nanoGPT's
    grown = {n: replace(p, cpu_per_step_ms=3 * p.cpu_per_step_ms, cpu_mean_ms=3 * p.cpu_mean_ms)
             for n, p in compute.items()}
    summary = base.steps.summary_ms
    added = sum(p.cpu_per_step_ms for p in compute.values()) * 2
    deeper = replace(base, phases=grown, steps=replace(base.steps, summary_ms=replace(
        summary, mean=summary.mean + added, median=summary.median + added)))
    edited = explain_regression(base, deeper, provenance=Staleness(edits=("model.py changed",)))
    assert edited.first_reason.startswith("compute +"), edited.first_reason
    assert "the model does more work per step" in edited.first_reason and edited.cause != "machine"
    assert explain_regression(base, deeper).first_reason.startswith("every phase got slower")


def _pairs() -> list[tuple[str, Path, Path]]:
    corpus = [(f"corpus:{p.name}", CORPUS / "base" / "trace.sqlite", p / "trace.sqlite")
              for p in sorted(CORPUS.iterdir()) if p.name not in ("base", "base2", "base3")][:6]
    crossed = [("crossed:transformer-vs-resnet", TRACES / "gpu-transformer" / "trace.sqlite",
                TRACES / "reverse-ladder-full" / "trace.sqlite"),
               ("crossed:resnet-vs-transformer", TRACES / "reverse-ladder-full" / "trace.sqlite",
                TRACES / "gpu-transformer" / "trace.sqlite"),
               ("crossed:baselines", BASELINES / "transformer_lm" / "nvidia-h100-80gb-hbm3-x1.json",
                BASELINES / "resnet_cifar" / "nvidia-h100-80gb-hbm3-x1.json"),
               ("crossed:cpu-vs-gpu", CPU["base"], TRACES / "gpu-transformer" / "trace.sqlite")]
    ladder = [(f"ladder:{n}", TRACES / "reverse-ladder-full" / "trace.sqlite", TRACES / n / "trace.sqlite")
              for n in ("reverse-ladder-no-amp", "reverse-ladder-no-nonblocking", "reverse-ladder-no-pin")]
    cpu = [("cpu:wider-back", CPU["wider"], CPU["base"]), ("cpu:slow-data-back", CPU["slow-data"], CPU["base"])]
    return [(n, b, c) for n, b, c in [*corpus, *crossed, *ladder, *cpu] if b.is_file() and c.is_file()]


KERNEL_LINE = re.compile(r"^kernel .*: ([-+]\d+\.\d\d) ms/step", re.MULTILINE)


@pytest.mark.parametrize("name, base, cur", _pairs(), ids=[p[0] for p in _pairs()])
def test_the_report_tells_one_story(name: str, base: Path, cur: Path) -> None:
    outcome, a = compare_and_explain(base, cur, options=AnalysisOptions(skip_steps=5))
    if a is None:
        return
    text = render_attribution_text(a)
    delta = a.step_mean_delta_ms
    # never "nothing accounts" beside a listed difference
    assert "nothing in the traces accounts" not in text
    if not a.reasons:
        assert not KERNEL_LINE.search(text) and "fires:" not in text, text
    # the first reason is the largest share of the change, in its direction
    if a.reasons:
        assert a.first_reason == a.reasons[0].text or a.notes and a.notes[0].startswith("also regressed")
        shares = [min(r.ms, abs(delta)) * (1 if r.where is not None else 0.5) for r in a.reasons]
        assert shares == sorted(shares, reverse=True), text
        assert all(r.ms > 0 for r in a.reasons)
    assert 0 <= a.explained_ms <= abs(delta) + 1e-9
    # a faster run's phase reasons name phases that got faster, a slower run's phases that got slower
    for r in a.reasons:
        if r.mechanism in ("phase_time", "compute", "data_loading"):
            shown = re.search(r" ([-+])\d", r.text)
            assert shown is not None and shown.group(1) == ("+" if delta > 0 else "-"), r.text
    # a precision story agrees with the precision rule's change
    new = {f.rule for f in a.new_findings}
    resolved = {f.rule for f in a.resolved_findings}
    if any("to fp32" in r.text and "GEMMs went from" in r.text for r in a.reasons):
        assert "no_mixed_precision" not in resolved, text
    if any("GEMMs went from fp32" in r.text for r in a.reasons):
        assert "no_mixed_precision" not in new, text


def test_a_stale_baseline_is_said_first_and_what_the_software_may_explain_is_named() -> None:
    base, cur = CORPUS / "base" / "trace.sqlite", CORPUS / "amp_off" / "trace.sqlite"
    options = AnalysisOptions(skip_steps=5)
    stale = Staleness(code=("workloads/train.py changed",), environment=("torch 2.11.0 -> 2.12.0",))
    a = explain_regression(analyze_file(base, options), analyze_file(cur, options), provenance=stale)
    text = render_attribution_text(a)
    assert text.splitlines()[0] == ("baseline: the baseline was recorded from other code: workloads/train.py "
                                    "changed; torch 2.11.0 -> 2.12.0")
    assert a.reasons[0].mechanism == "replaced:precision" and 1 in a.software_explains
    assert "it may account for reason" in text


def test_a_slower_loader_without_workers_is_not_told_as_the_same_0_workers() -> None:
    """The zoo's mnist and vae (num_workers=0 on the CPU) read "with the same 0 DataLoader workers"."""
    from perfgate.diagnosis.account import _with_workers
    from perfgate.records.facts import TraceFacts
    from perfgate.records.diagnosis import Reason

    reason = Reason("data_loading", "data_load", 24.7, "data_load +24.7 ms/step")
    none = _with_workers(reason, TraceFacts(steps=10, dataloader_workers=0), TraceFacts(steps=10, dataloader_workers=0),
                         slower=True)
    assert none.text == ("data_load +24.7 ms/step: the loop waits longer for each batch with no loader worker "
                         "processes on either side (batches made in the training process): a slower dataset or "
                         "transform?")
    four = _with_workers(reason, TraceFacts(steps=10, dataloader_workers=4), TraceFacts(steps=10, dataloader_workers=4),
                         slower=True)
    assert four.text.endswith("with the same 4 DataLoader workers: a slower dataset or transform?")


def test_a_reason_whose_figure_holds_a_colon_keeps_its_parenthesis_whole() -> None:
    """A CPU loop that fetched its batch between steps read "(outside the step range: the loop waits
    longer ... (batches made in the training process): a slower dataset or transform?": the figure
    was cut at the colon inside its parenthesis, which never closed."""
    from perfgate.diagnosis.account import _with_workers
    from perfgate.records.facts import TraceFacts
    from perfgate.records.diagnosis import Reason

    figure = "between steps +5.0 ms/step (outside the step range: the loop's wait for its next batch)"
    reason = Reason("data_loading", "between_steps", 5.0, f"{figure}: the loop waits longer for its batches")
    told = _with_workers(reason, TraceFacts(steps=10, dataloader_workers=0), TraceFacts(steps=10, dataloader_workers=0),
                         slower=True).text
    assert told.startswith(figure + ": the loop waits longer for each batch with no loader worker processes")
    assert told.count("(") == told.count(")")



def test_a_loop_that_makes_its_own_batches_is_not_told_of_a_dataloader() -> None:
    """Issue 42: a CPU loop with no DataLoader read "(batches made in the training process): a slower
    dataset or transform?" and "the loop waits for each batch (the trace records no DataLoader worker
    process)"; where autostep saw no DataLoader on either side, the words are the loop's own batches."""
    from perfgate.diagnosis.account import _with_workers
    from perfgate.records.facts import TraceFacts
    from perfgate.records.diagnosis import Reason

    reason = Reason("data_loading", "between_steps", 5.0, "between steps +5.0 ms/step: the loop waits longer")
    own = TraceFacts(steps=10, dataloader=False)
    told = _with_workers(reason, own, own, slower=True)
    assert told.text == ("between steps +5.0 ms/step: the program makes its own batches (no DataLoader on either "
                         "side) and takes longer to make them: a slower batch preparation?")
    assert "DataLoader worker" not in told.text and told.cause == "input pipeline"
    # one side with a DataLoader: the worker words stand (a loader with 0 workers is a DataLoader)
    loader = TraceFacts(steps=10, dataloader=True, dataloader_workers=0)
    assert "no loader worker processes" in _with_workers(reason, loader, loader, slower=True).text


def test_the_programs_own_batch_function_is_named_and_no_dataloader() -> None:
    """Issue 42: autostep wraps a loop's get_batch() in data_load ranges and marks it
    (``perfgate/input``): those ranges are no DataLoader's, and the words name the function."""
    import numpy as np

    from perfgate.analysis.loop import input_function, loader_in_use
    from perfgate.diagnosis.account import _with_workers
    from perfgate.diagnosis.evidence import batches_from
    from perfgate.records.diagnosis import Reason
    from perfgate.records.facts import TraceFacts
    from perfgate.trace.columns import Columns

    def texts(*t: str) -> Columns:
        return Columns({"text": np.array(t, dtype=object)})

    marks, nvtx = texts("perfgate/optimizer_step:1", "perfgate/input:__main__.get_batch"), \
        texts("perfgate/data_load", "perfgate/backward")
    assert loader_in_use(marks, nvtx) is False and input_function(marks) == "__main__.get_batch"
    assert loader_in_use(texts("perfgate/loader:0", "perfgate/input:__main__.get_batch"), nvtx) is True
    assert loader_in_use(texts("perfgate/optimizer_step:1"), nvtx) is True       # the ranges alone: a DataLoader's
    reason = Reason("data_loading", "data_load", 10.0, "data_load +10.0 ms/step: the loop waits longer")
    own = TraceFacts(steps=10, dataloader=False, input_function="__main__.get_batch")
    told = _with_workers(reason, own, own, slower=True)
    assert told.text == ("data_load +10.0 ms/step: batches made by the program's get_batch (no DataLoader on either "
                         "side) take longer to make: a slower batch preparation?")
    assert told.cause == "input pipeline"
    assert _with_workers(reason, own, own, slower=False).text.endswith(
        ", with batches made by the program's get_batch (no DataLoader)")
    assert batches_from(own) == "the loop waits for the batches the program's get_batch makes (no DataLoader)"
    # a DataLoader beside it (the function iterates one): its words stand
    assert "get_batch" not in batches_from(replace(own, dataloader=True, dataloader_workers=2))

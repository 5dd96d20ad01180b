"""perfgate.diagnosis.machine: a slower step of unchanged code in which every part grew alike is the
machine that ran it, never a mechanism of the code (issue 41: an unchanged transformer_lm rerun beside
another job was REGRESSED +16.4 % with 'the model does more work per step')."""
from __future__ import annotations

import pytest

from perfgate.diagnosis.machine import MACHINE, UNIFORM, slower_machine_reason, threads_hint
from perfgate.records.diagnosis import PhaseDelta

BUSY = "the machine was busier than when the baseline was recorded: other processes used 1.93 of 2 CPUs"


def _phases(factors: dict[str, float], base: dict[str, float]) -> list[PhaseDelta]:
    return [PhaseDelta(name, base[name], base[name] * factors[name]) for name in base]


BASE = {"data_load": 1.0, "forward": 2.0, "backward": 2.5, "optimizer": 0.8, "tiny": 0.05}


def test_every_part_grown_alike_is_the_machine() -> None:
    """The CPU case of the issue: 6.42 -> 7.48 ms, forward, backward and optimizer all about +16 %."""
    phases = _phases({"data_load": 1.15, "forward": 1.17, "backward": 1.16, "optimizer": 1.19, "tiny": 3.0}, BASE)
    reason = slower_machine_reason(phases, 6.42, 7.48, BUSY)
    assert reason is not None and reason.mechanism == MACHINE and reason.ms == pytest.approx(1.06)
    assert reason.text.startswith("the machine, not the code: the code did not change and the step took x1.17")
    assert "backward x1.16" in reason.text and "tiny" not in reason.text     # a 0.05 ms phase is not weighed
    assert reason.text.endswith(BUSY)


def test_one_part_that_grew_far_more_is_that_part() -> None:
    phases = _phases({"data_load": 2.5, "forward": 1.0, "backward": 1.02, "optimizer": 1.0, "tiny": 1.0}, BASE)
    assert slower_machine_reason(phases, 6.42, 8.0, BUSY) is None


def test_a_faster_step_is_no_slower_machine() -> None:
    phases = _phases({k: 0.9 for k in BASE}, BASE)
    assert slower_machine_reason(phases, 6.42, 5.8) is None


def test_the_bound_is_the_uniform_factor() -> None:
    """Step x1.2; a phase at x1.2 * UNIFORM (just within) and one just beyond."""
    base = {"forward": 3.0, "backward": 3.0}
    within = _phases({"forward": 1.2, "backward": 1.2 * UNIFORM * 0.99}, base)
    beyond = _phases({"forward": 1.2, "backward": 1.2 * UNIFORM * 1.01}, base)
    assert slower_machine_reason(within, 6.0, 7.2) is not None
    assert slower_machine_reason(beyond, 6.0, 7.2) is None


def test_a_program_without_phases_is_judged_by_its_step() -> None:
    reason = slower_machine_reason([], 5.0, 7.5)
    assert reason is not None and "x1.50" in reason.text and "(" not in reason.text


def test_a_busier_cpu_machine_with_torchs_default_threads_gets_the_threads_setting_named() -> None:
    """Beside one busy process on 2 cores, torch's 2 threads made the zoo's word_language_model 54 times
    slower and vae 15 times (docs/measurements/cpu-threads.md): the note names the setting, only where it applies."""
    hint = threads_hint(True, "default", 0)
    assert hint is not None and "threads = 1" in hint and "PERFGATE_THREADS=1" in hint
    assert threads_hint(True, "1", 0) is None            # already set (the setting or OMP_NUM_THREADS)
    assert threads_hint(False, "default", 0) is None     # a quieter machine
    assert threads_hint(None, "default", 0) is None      # busier in one way, quieter in another
    assert threads_hint(True, "default", 8) is None      # a GPU's work does not wait on those threads

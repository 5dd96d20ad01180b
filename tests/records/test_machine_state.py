"""What the machine did beside a launch (records/machine_state.py): the record written and read
back, kept in the analysis and baseline launch records; and the comparison of the baseline's
machine with the current one (gate/machine_states.py): states that are alike, and states that
differ, in the user's words."""
from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from perfgate.baselines.store import BaselineLaunch
from perfgate.gate.machine_states import MEMORY_PRESSURE, STEAL_SHARE, machine_difference
from perfgate.records.launch import Launch
from perfgate.records.launch_checks import GpuClocks
from perfgate.records.machine_state import MachineDifference, MachineState
from perfgate.records.model import Analysis
from report_results import make_result


def state(others_cores: float = 0.02, *, cpus: int = 2, wall_s: float = 10.0, runnable: float = 1.2,
          steal_share: float = 0.005, memory: float | None = 0.0, gpu_others: int | None = None) -> MachineState:
    """A launch's state whose others took ``others_cores`` (its launch kept one CPU busy)."""
    launch_cpu_s = wall_s
    return MachineState(cpus=cpus, wall_s=wall_s, samples=50, load_1min_start=1.0, load_1min_end=1.1,
                        load_1min_mean=1.05, runnable_mean=runnable, runnable_max=int(runnable) + 1,
                        busy_cpu_s=round(launch_cpu_s + others_cores * wall_s, 3), launch_cpu_s=launch_cpu_s,
                        steal_cpu_s=round(steal_share * wall_s * cpus, 3), cpu_pressure=0.1, memory_pressure=memory,
                        mem_available_min_mib=20000.0, mem_total_mib=24000.0, gpu_other_processes=gpu_others)


def launches(*states: MachineState, throttled: tuple[bool, ...] = ()) -> list[Launch]:
    clocks: list[GpuClocks | None] = [GpuClocks(samples=5, sm_mhz_min=1410, sm_mhz_median=1980.0, sm_mhz_max=1980,
                                                temperature_c_max=80, reasons=(), throttled=t) for t in throttled]
    clocks += [None] * (len(states) - len(clocks))
    return [Launch(number=k, kind="timing", machine_state=s, gpu_clocks=c)
            for k, (s, c) in enumerate(zip(states, clocks))]


# --------------------------------------------------------------------------- the record


def test_a_state_says_what_others_took_and_reads_back_from_its_json() -> None:
    s = state(1.93, runnable=4.1, steal_share=0.031)
    d = json.loads(json.dumps(s.to_dict()))
    assert (d["others_cpu_s"], d["others_cores"], d["steal_share"]) == (19.3, 1.93, 0.031)
    assert d["busy_cpu_s"] - d["launch_cpu_s"] == pytest.approx(d["others_cpu_s"])
    assert MachineState.from_dict(d) == s


@pytest.mark.parametrize("change", [
    {"cpus": 2.0}, {"samples": True}, {"wall_s": "10"}, {"busy_cpu_s": None}, {"others_cores": 0.5},
    {"newer": 1}, {"gpu_other_processes": 1.5},
], ids=str)
def test_a_state_of_other_kinds_or_keys_is_not_read(change: dict[str, Any]) -> None:
    """A value of another kind, a figure that does not follow from the others, a key of a newer
    perfgate: None (the analysis record keeps it in ``extra``, as read)."""
    assert MachineState.from_dict({**state().to_dict(), **change}) is None


def test_a_missing_key_or_no_mapping_is_not_read() -> None:
    d = state().to_dict()
    del d["memory_pressure"]
    assert MachineState.from_dict(d) is None and MachineState.from_dict([1]) is None
    assert MachineState.from_dict({**state().to_dict(), "memory_pressure": None}) == state(memory=None)


def test_the_launch_writes_its_state_in_the_analysis_record_and_a_baseline_keeps_it() -> None:
    analysis = make_result("w", "PASS").analyses[0]
    clocks = launches(state(), throttled=(False,))[0].gpu_clocks
    launch = Launch(number=1, kind="timing", machine_state=state(0.7), gpu_clocks=clocks)
    d = json.loads(json.dumps(replace(analysis, launch=launch).to_dict()))
    assert d["machine_state"]["others_cores"] == 0.7
    back = Analysis.from_dict(d)
    assert back.launch.machine_state == state(0.7) and "machine_state" not in back.extra

    kept = BaselineLaunch.of(back, back.metrics()).to_dict()
    assert kept["machine_state"] == d["machine_state"] and kept["gpu_clocks"] == clocks.to_dict()
    again = BaselineLaunch.from_dict(json.loads(json.dumps(kept)), "launches[0]").analysis()
    assert again.launch.machine_state == state(0.7) and again.launch.gpu_clocks == clocks
    assert not {"machine_state", "gpu_clocks"} & set(BaselineLaunch.of(analysis, analysis.metrics()).to_dict())

    odd = {**d, "machine_state": {**d["machine_state"], "others_cores": 9.0}}
    read = Analysis.from_dict(odd)
    assert read.launch.machine_state is None and read.extra["machine_state"]["others_cores"] == 9.0
    assert read.to_dict()["machine_state"] == odd["machine_state"]        # written again as read


def test_a_difference_reads_back_only_as_written() -> None:
    found = MachineDifference(("other processes used 1.00 of 2 CPUs", "runnable tasks 3.0 (1.0)"), True)
    d = json.loads(json.dumps(found.to_dict()))
    assert d["text"] == ("the machine was busier than when the baseline was recorded: "
                         "other processes used 1.00 of 2 CPUs; runnable tasks 3.0 (1.0)")
    assert MachineDifference.from_dict(d) == found
    assert MachineDifference.from_dict({**d, "text": "edited"}) is None
    assert MachineDifference.from_dict({**d, "busier": "yes"}) is None
    assert MachineDifference.from_dict({**d, "clauses": [], "text": "the machine was busier than when "
                                        "the baseline was recorded: "}) is None


# --------------------------------------------------------------------------- the comparison


def test_a_busier_machine_is_said_with_its_figures() -> None:
    baseline = launches(state(0.0, runnable=1.1), state(0.04, runnable=1.3))
    current = launches(state(1.9, runnable=4.0), state(1.96, runnable=4.2))
    found = machine_difference(baseline, current)
    assert found is not None and found.busier is True
    assert found.text() == ("the machine was busier than when the baseline was recorded: other processes used "
                            "1.93 of 2 CPUs during these launches (0.02 at the recording); runnable tasks 4.1 (1.2)")
    back = machine_difference(current, baseline)
    assert back is not None and back.busier is False
    assert back.text().startswith("the machine was quieter than when the baseline was recorded: "
                                  "other processes used 0.02 of 2 CPUs during these launches (1.93 at the recording)")


@pytest.mark.parametrize(("was", "now", "cpus", "different"), [
    (0.02, 0.05, 2, False),       # quiet and quiet
    (0.10, 0.30, 2, False),       # apart by 0.20 cores, less than OTHERS_CORES (0.25)
    (0.04, 0.30, 2, True),        # apart by 0.26 cores and 7 times
    (1.70, 2.00, 2, False),       # apart by 0.30 cores, but by x1.18 only: both busy
    (1.00, 1.60, 2, True),        # 0.60 cores, x1.6
    (0.20, 1.20, 32, False),      # a core on 32 is less than 5 % of them
    (0.20, 2.00, 32, True),
], ids=str)
def test_others_cores_are_different_only_apart_by_an_amount_and_a_factor(was: float, now: float, cpus: int,
                                                                          different: bool) -> None:
    found = machine_difference(launches(state(was, cpus=cpus)), launches(state(now, cpus=cpus)))
    assert (found is not None) is different
    if different:
        assert found is not None and found.clauses[0].startswith(f"other processes used {now:.2f} of {cpus} CPUs")


def test_steal_memory_pressure_and_others_on_the_gpus() -> None:
    quiet = launches(state(steal_share=0.004, memory=0.0, gpu_others=0))
    stolen = launches(state(steal_share=0.05, memory=0.0, gpu_others=0))
    found = machine_difference(quiet, stolen)
    assert found is not None and found.clauses == (
        "the hypervisor gave 5.0% of the CPUs' time to other machines (steal) during these launches "
        "(0.4% at the recording)",)
    assert machine_difference(quiet, launches(state(steal_share=0.004 + STEAL_SHARE * 0.9))) is None

    swapping = launches(state(memory=0.12, gpu_others=0))
    found = machine_difference(quiet, swapping)
    assert found is not None and found.clauses == (
        "tasks stalled on memory 12.0% of the time during these launches (0.0% at the recording)",)
    assert machine_difference(quiet, launches(state(memory=MEMORY_PRESSURE * 0.9, gpu_others=0))) is None
    assert machine_difference(launches(state(memory=None)), swapping) is None     # not measured at the recording

    shared = launches(state(gpu_others=2))
    found = machine_difference(quiet, shared)
    assert found is not None and found.busier is True and found.clauses == (
        "other processes on the GPUs: 2 during these launches (none at the recording)",)
    assert machine_difference(launches(state(gpu_others=None)), shared) is None  # no NVML at the recording


def test_a_gpu_that_throttled_on_one_side_only_is_a_difference() -> None:
    cool = launches(state(), state(), state(), throttled=(False, False, False))
    hot = launches(state(), state(), state(), throttled=(False, True, False))
    found = machine_difference(cool, hot)
    assert found is not None and found.busier is True
    assert found.clauses == ("the GPU throttled in 1 of 3 of these launches (0 of 3 at the recording)",)
    assert machine_difference(hot, hot) is None
    assert machine_difference(launches(state(), state(), state()), hot) is None   # no clocks at the recording


def test_differences_both_ways_are_said_as_another_state() -> None:
    baseline = launches(state(0.02, steal_share=0.08))
    current = launches(state(1.5, steal_share=0.001))
    found = machine_difference(baseline, current)
    assert found is not None and found.busier is None and len(found.clauses) == 3
    assert found.text().startswith("the machine was not in the state it was in when the baseline was recorded: "
                                   "other processes used 1.50 of 2 CPUs")


def test_nothing_is_said_without_states_on_both_sides() -> None:
    busy = launches(state(1.9))
    assert machine_difference([Launch(number=1), Launch(number=2)], busy) is None     # an older baseline
    assert machine_difference(busy, []) is None
    assert machine_difference(launches(state(0.0)), busy) is not None

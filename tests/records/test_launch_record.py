"""The gate's facts of one launch are typed (``Analysis.launch``, records/launch.py); an analysis
record writes them as the top-level keys it always had and reads them back."""
from __future__ import annotations

from dataclasses import replace

from perfgate.records.diagnosis import Diagnosis, Finding
from perfgate.records.resources import GpuMemory, LaunchEnergy, MemoryPeak
from perfgate.records.launch import Launch
from perfgate.records.launch_checks import GpuClocks, StabilityReport
from perfgate.records.machine_state import MachineState
from perfgate.records.model import Analysis
from perfgate.report.digest import result_message
from report_results import make_result

STABLE = StabilityReport(stable=True, steps=20, drift_fraction=0.01, changepoint_index=None, level_shift_fraction=0.0,
                         noise_fraction=0.02, reasons=())
CLOCKS = GpuClocks(samples=12, sm_mhz_min=1980, sm_mhz_median=1980.0, sm_mhz_max=1980, temperature_c_max=61,
                   reasons=("software power cap",), throttled=False)
DIAGNOSIS = Diagnosis(bottleneck="input bound", confidence=0.8, evidence=("data_load 70 % of the step",),
                      findings=(Finding(rule="few_workers", severity="warning", message="m", evidence=("e",),
                                        suggestion="s", cause="DataLoader workers", phases=("data_load",), impact_ms=3.5),),
                      gpu_active=True, scores={"input bound": 0.7}, facts={"syncs_per_step": 2.0})
LAUNCH = Launch(number=2, kind="timing", self_report={"batch_size": 4}, stability=STABLE,
                gpu_clocks=CLOCKS, gpu_memory=GpuMemory((MemoryPeak("gpu_memory.peak_allocated_mib", 1.0, "torch allocator"),)),
                energy=LaunchEnergy(unavailable="no NVML"), resource_metrics={"gpu_memory.peak_allocated_mib": 1.0},
                diagnosis=DIAGNOSIS, diagnosis_error="ValueError: x",
                machine_state=MachineState(cpus=2, wall_s=10.0, samples=50, load_1min_start=1.0, load_1min_end=1.2,
                                           load_1min_mean=1.1, runnable_mean=1.5, runnable_max=3, busy_cpu_s=12.5,
                                           launch_cpu_s=10.0, steal_cpu_s=0.1, cpu_pressure=0.05, memory_pressure=None,
                                           mem_available_min_mib=900.0, mem_total_mib=1024.0, gpu_other_processes=None))
KEYS = {"launch", "capture", "self_report", "stability", "gpu_clocks", "gpu_memory", "energy",
        "resource_metrics", "diagnosis", "diagnosis_error", "machine_state"}


def test_the_launch_is_the_records_top_level_keys_and_reads_back() -> None:
    analysis = replace(make_result("w", "PASS").analyses[0], launch=LAUNCH)
    d = analysis.to_dict()
    assert KEYS <= set(d) and (d["launch"], d["capture"]) == (2, "timing")
    assert list(LAUNCH.to_dict()) == ["launch", "capture", "self_report", "stability", "gpu_clocks", "gpu_memory",
                                      "energy", "resource_metrics", "diagnosis", "diagnosis_error", "machine_state"]
    assert d["metrics"]["gpu_memory.peak_allocated_mib"] == 1.0          # the resources are gate metrics
    back = Analysis.from_dict(d)
    assert back.launch == LAUNCH and not set(back.extra) & KEYS


def test_an_analysis_of_a_file_alone_writes_none_and_odd_values_stay_as_read() -> None:
    analysis = make_result("w", "PASS").analyses[0]
    assert not KEYS & set(analysis.to_dict())
    odd_values = {"capture": 3, "energy": None, "gpu_memory": {"gpu_memory.peak_allocated_mib": {"mib": 1.0}}, "newer": [1], "machine_state": {"cpus": 2},
                  "stability": {"stable": True, "reasons": []}, "diagnosis": {"findings": []}, "gpu_clocks": {**CLOCKS.to_dict(), "throttled": 0}}
    back = Analysis.from_dict({**analysis.to_dict(), **odd_values})
    assert back.launch == Launch() and back.extra == odd_values
    assert {k: back.to_dict()[k] for k in odd_values} == odd_values


def test_the_launchs_notes_end_the_records_warnings_and_read_back() -> None:
    analysis = make_result("w", "PASS").analyses[0]
    analysis = replace(analysis, warnings=("launch-like words inside", "skipping 1 warm-up step"),
                       launch=Launch(number=0, notes=("launch 0: measured steps are not stable (drift)",)))
    d = analysis.to_dict()
    assert d["warnings"] == ["launch-like words inside", "skipping 1 warm-up step",
                             "launch 0: measured steps are not stable (drift)"]
    back = Analysis.from_dict(d)
    assert back.warnings == analysis.warnings and back.launch.notes == analysis.launch.notes


def test_the_results_message_notes_each_launchs_notes(tmp_path) -> None:
    from perfgate.gate.sequential_looks import LaunchBudget, run_looks
    from perfgate.pipeline.workload_run import compare_policy, judge
    from perfgate.records.notes import NOTE, SUMMARY
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import WorkloadSpec

    settings, spec = load_settings(tmp_path, env={}), WorkloadSpec(name="w", module="m")
    result = make_result("w", "PASS")
    unstable = "launch 0: measured steps are not stable (drift)"
    result = replace(result, analyses=[replace(result.analyses[0], warnings=("an analysis warning",),
                                               launch=Launch(number=0, kind="timing", notes=(unstable,)))])
    run = run_looks([], lambda k: result.analyses[k].metrics(), compare_policy(settings, spec), LaunchBudget(1, 1))
    result = judge(result, spec, settings, None, tmp_path / "w" / "cpu.json", run)
    assert [n.severity for n in result.notes] == [SUMMARY, NOTE]
    assert result.notes[1].text.startswith(unstable + " (record one with ")    # the hint ends the last line
    assert result_message(result).splitlines()[1].startswith(f"note: {unstable} (record one with ")


def test_the_checks_read_back_from_their_json_and_other_values_do_not() -> None:
    import json

    for record in (STABLE, CLOCKS, replace(STABLE, stable=False, changepoint_index=10, reasons=("drift 12 %",))):
        assert type(record).from_dict(json.loads(json.dumps(record.to_dict()))) == record
    d = STABLE.to_dict()
    for odd in ({**d, "steps": 20.0}, {**d, "stable": 1}, {**d, "reasons": [3]}, {**d, "newer": 1},
                {k: v for k, v in d.items() if k != "steps"}, {**d, "changepoint_index": None, "steps": None}):
        assert StabilityReport.from_dict(odd) is None, odd
    assert GpuClocks.from_dict({**CLOCKS.to_dict(), "sm_mhz_min": True}) is None
    assert GpuClocks.from_dict({**CLOCKS.to_dict(), "sm_mhz_median": 1980}) == replace(CLOCKS, sm_mhz_median=1980)


def test_a_diagnosis_reads_back_from_its_json_and_another_ones_does_not() -> None:
    import json

    d = json.loads(json.dumps(DIAGNOSIS.to_dict()))
    assert Diagnosis.from_dict(d) == DIAGNOSIS
    finding = d["findings"][0]
    for odd in ({**d, "confidence": "high"}, {**d, "gpu_active": 1}, {**d, "newer": 1},
                {**d, "findings": [{**finding, "newer": 1}]}, {k: v for k, v in d.items() if k != "facts"}):
        assert Diagnosis.from_dict(odd) is None, odd


def test_the_energy_reads_back_from_its_json_and_another_shape_does_not() -> None:
    import json

    from perfgate.records.resources import EnergyReport

    report = EnergyReport(source="energy counter", window_s=2.5, gpus=(0, 1), energy_j=1500.0, iterations=50,
                          samples_per_iteration=256, power_mean_w=600.0, power_peak_w=710.5, sm_mhz_mean=1980.0,
                          readings=25)
    energy = LaunchEnergy(report=report, clock_offset_ms=1.8)
    d = json.loads(json.dumps(energy.to_dict()))
    assert d["j_per_step"] == 30.0 and d["metrics"]["energy.per_sample_j"] == 1500.0 / (50 * 256)
    assert LaunchEnergy.from_dict(d) == energy
    assert LaunchEnergy.from_dict({"unavailable": "no NVML"}) == LaunchEnergy(unavailable="no NVML")
    for odd in ({**d, "j_per_step": 31.0}, {**d, "gpus": [0.5]}, {**d, "newer": 1}, {**d, "iterations": True},
                {k: v for k, v in d.items() if k != "metrics"}, {"unavailable": 3}, {"unavailable": "x", "source": "y"}):
        assert LaunchEnergy.from_dict(odd) is None, odd

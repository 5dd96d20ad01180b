"""Memory and energy in every report: the terminal table, the Markdown job summary (with each
launch's row and the launch-to-launch spread), perfgate-report.json (read back too) and the chart
of memory and energy per launch. The results are the committed H100 transformer capture analysed
as the pipeline does, with NVML samples recorded at a known power and allocator peaks in the
self-report (this machine has no GPU)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from perfgate.analysis.resources import attach_resources
from perfgate.capture.gpu_monitor import Sample
from perfgate.gate.compare import compare_launches
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.records.notes import SUMMARY, Note
from perfgate.report.charts import render_charts
from perfgate.report.json_report import render_report_json
from perfgate.report.json_report import results_from_report
from perfgate.report.markdown import render_markdown
from perfgate.report.resources import energy_summary, memory_summary
from perfgate.report.terminal import render_summary

GIB = 2**30


@pytest.fixture(scope="module")
def analysis(fixtures_dir):
    from perfgate.analysis import AnalysisOptions, analyze
    from perfgate.trace.export import load_trace

    trace = load_trace(fixtures_dir / "traces" / "gpu-transformer" / "trace.sqlite")
    return analyze(trace, AnalysisOptions(skip_steps=0, batch_size=32)), trace.session_start_utc_ns


def launch(base, start_ns: int, watts: float, allocated_gib: float):
    lo = start_ns + base.steps.window_start_ns
    samples = [Sample(t_s=k * 0.1, gpu=0, sm_mhz=1980, temperature_c=50, reasons=0, wall_ns=lo - 10**9 + k * 10**8,
                      power_mw=int(watts * 1e3), energy_mj=int(watts * 100 * k), util_pct=99) for k in range(60)]
    report = {"gpu_memory": {"max_allocated_bytes": int(allocated_gib * GIB), "max_reserved_bytes": int(6 * GIB)}}
    return attach_resources(replace(base, launch=replace(base.launch, self_report=report)), samples, start_ns)


@pytest.fixture(scope="module")
def results(analysis):
    base, start = analysis
    baseline = [launch(base, start, w, 4.0) for w in (400.0, 402.0, 398.0)]
    current = [launch(base, start, w, 4.8) for w in (401.0, 399.0, 400.0)]
    outcome = compare_launches([a.metrics() for a in baseline], [a.metrics() for a in current])
    regressed = WorkloadResult(workload="transformer_lm", verdict=outcome.verdict, comparisons=outcome.comparisons,
                               analyses=current, notes=(Note(SUMMARY, outcome.summary),))
    cpu = WorkloadResult(workload="cpu_only", verdict=Verdict.NEW, analyses=[base])
    return regressed, cpu


def test_the_results_regress_on_memory_alone(results) -> None:
    regressed, _ = results
    assert regressed.verdict is Verdict.REGRESSED
    assert [c.metric for c in regressed.comparisons if c.gating and c.verdict is Verdict.REGRESSED] == [
        "gpu_memory.peak_allocated_mib"]
    memory, energy = memory_summary(regressed), energy_summary(regressed)
    assert memory["metric"] == "gpu_memory.peak_allocated_mib" and memory["short"] == "allocated"
    assert (memory["baseline"], memory["current"]) == pytest.approx((4096.0, 4915.2))
    assert energy["source"] == "energy counter" and energy["spread"]["min"] < energy["spread"]["max"]


def test_terminal_summary_shows_memory_and_energy_columns(results) -> None:
    lines = render_summary(list(results))
    assert lines[1].split()[-4:] == ["peak", "GPU", "memory", "energy/sample"]
    row = next(line for line in lines if line.startswith("transformer_lm"))
    assert "4,096 -> 4,915 MiB (+20.0 %) allocated" in row
    assert " J (" in row
    cpu = next(line for line in lines if line.startswith("cpu_only"))
    assert cpu.split()[-2:] == ["-", "-"]                              # no GPU: nothing shown, not zero


def test_markdown_names_the_source_and_lists_each_launch(results) -> None:
    regressed, cpu = results
    text = render_markdown([regressed, cpu])
    assert "| peak GPU memory | energy/sample |" in text
    assert ("peak GPU memory 4,096 -&gt; 4,915 MiB (+20.0 %) allocated (torch allocator (max_memory_allocated)); "
            "energy per sample 1.45 -&gt; 1.45 J (+0.0 %), launches 1.450 to 1.458 J (CV 0.25 %) (energy counter)") in text
    rows = [line for line in text.splitlines() if line.startswith(("| 1 |", "| 2 |", "| 3 |"))]
    assert rows == ["| 1 | allocated 4,915, reserved 6,144 | 1.458 | 46.64 | 401 / 401 | 1,980 | energy counter |",
                    "| 2 | allocated 4,915, reserved 6,144 | 1.450 | 46.41 | 399 / 399 | 1,980 | energy counter |",
                    "| 3 | allocated 4,915, reserved 6,144 | 1.454 | 46.53 | 400 / 400 | 1,980 | energy counter |"]
    cpu_section = text.split("### ")[-1]
    assert cpu_section.startswith(":new: `cpu_only`") and "energy" not in cpu_section and "MiB" not in cpu_section


def test_json_report_carries_resources_and_reads_back(results) -> None:
    doc = json.loads(json.dumps(render_report_json(list(results)), default=str))
    res = doc["results"][0]["resources"]
    assert res["gpu_memory"]["source"] == "torch allocator (max_memory_allocated)"
    assert res["gpu_memory"]["change"] == pytest.approx(0.2)
    assert len(res["launches"]) == 3 and res["launches"][0]["energy"]["source"] == "energy counter"
    assert res["energy"]["current"] == pytest.approx(400.0 * res["launches"][0]["energy"]["window_s"]
                                                     / (res["launches"][0]["energy"]["iterations"] * 32), rel=0.01)
    assert doc["results"][1]["resources"]["gpu_memory"] is None and doc["results"][1]["resources"]["energy"] is None
    back = results_from_report(doc)
    assert energy_summary(back[0])["launches"] == pytest.approx(energy_summary(results[0])["launches"])
    assert "4,096 -> 4,915 MiB" in render_summary(back)[3]


def test_chart_of_memory_and_energy_per_launch(results, tmp_path) -> None:
    pytest.importorskip("matplotlib")
    charts = render_charts(list(results), tmp_path)
    assert "transformer_lm:resources" in charts and "cpu_only:resources" not in charts
    png = charts["transformer_lm:resources"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert "transformer_lm:steps" in charts

"""A few measured steps as a Chrome trace (perfgate.analysis.step_trace, ``perfgate analyze
--chrome-trace``), from committed real captures: the events the trace event format requires, the
steps the analysis measured, and the GPU's kernels per step that the analysis counts."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from perfgate.analysis import AnalysisOptions, analyze
from perfgate.analysis.step_trace import GPU_PID_BASE, chrome_trace, step_window
from perfgate.trace.export import load_trace
from layout import TESTS

FIXTURES = TESTS / "fixtures" / "traces"

# The Trace Event Format's fields for the phases written (Google's "Trace Event Format" document):
# complete events (X) need name, ts, dur, pid, tid; instant events (i) a scope s; metadata (M)
# process_name/thread_name with args.name. Times in microseconds.
SCHEMA = {
    "type": "object", "required": ["traceEvents"],
    "properties": {"displayTimeUnit": {"enum": ["ms", "ns"]}, "traceEvents": {"type": "array", "items": {
        "type": "object", "required": ["name", "ph", "pid", "tid"],
        "properties": {"name": {"type": "string"}, "cat": {"type": "string"}, "pid": {"type": "integer"},
                       "tid": {"type": "integer"}, "ts": {"type": "number", "minimum": 0},
                       "dur": {"type": "number", "minimum": 0}, "args": {"type": "object"}},
        "oneOf": [
            {"properties": {"ph": {"const": "X"}}, "required": ["ts", "dur"]},
            {"properties": {"ph": {"const": "i"}, "s": {"enum": ["g", "p", "t"]}}, "required": ["ts", "s"]},
            {"properties": {"ph": {"const": "M"}, "name": {"enum": ["process_name", "thread_name"]},
                            "args": {"type": "object", "required": ["name"],
                                     "properties": {"name": {"type": "string"}}}},
             "required": ["args"]},
        ]}}},
}


def _trace(name: str):
    return load_trace(FIXTURES / name / "trace.sqlite")


@pytest.mark.parametrize("name", ["gpu-resnet-pageable", "cpu-train-loop", "gpu-ddp-2proc"])
def test_the_trace_has_the_formats_fields_and_the_median_steps(name: str) -> None:
    trace = _trace(name)
    options = AnalysisOptions()
    window = step_window(trace, options.step_pattern, options.skip_steps)
    doc = chrome_trace(trace, window, label=name)
    jsonschema.validate(doc, SCHEMA)
    events = doc["traceEvents"]
    steps = [e for e in events if e.get("cat") == "step"]
    assert len(steps) == len(window.starts) == 3 and steps[0]["ts"] == 0.0
    # the window's step ranges are the steps: as many as the markers, each starting at its marker
    analysis = analyze(trace, options)
    step_ranges = [e for e in events if e.get("cat") == "nvtx" and e["name"] == analysis.steps.range_name
                   and e["pid"] == window.pid]
    assert [e["ts"] for e in step_ranges][:3] == [s["ts"] for s in steps]
    # the middle step is the median one: its period within the measured steps' range
    periods = sorted(analysis.steps.durations_ms)
    middle = (steps[2]["ts"] - steps[1]["ts"]) / 1000.0
    assert periods[0] <= middle <= periods[-1]
    assert all(e["ts"] + e.get("dur", 0) <= (window.end_ns - window.start_ns) / 1000 + 0.001 for e in events
               if e["ph"] != "M")


def test_the_gpu_work_is_the_kernels_per_step_the_analysis_counts() -> None:
    """The ResNet capture on an H100 (pageable copies): 385 kernels a step in the analysis's facts;
    the three steps of the Chrome trace hold 3 x that on one GPU's streams, and its host-to-device
    copies."""
    trace = _trace("gpu-resnet-pageable")
    options = AnalysisOptions()
    doc = chrome_trace(trace, step_window(trace, options.step_pattern, options.skip_steps))
    events = doc["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    facts = analyze(trace, options).facts
    assert facts is not None and len(kernels) == round(3 * facts.kernels_per_step)
    assert {e["pid"] for e in kernels} == {GPU_PID_BASE}
    copies = [e for e in events if e.get("cat") == "memcpy"]
    assert copies and all(e["name"].startswith("memcpy ") for e in copies)
    assert any(e["name"] == "memcpy HtoD" and e["args"]["bytes"] > 0 for e in copies)
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert "GPU 0" in names and any(n.startswith("stream ") for n in names)


def test_perfgate_analyze_writes_it_and_refuses_two_traces(tmp_path: Path) -> None:
    trace = FIXTURES / "cpu-train-loop" / "trace.sqlite"
    out = tmp_path / "steps.json"
    run = subprocess.run([sys.executable, "-m", "perfgate", "analyze", str(trace), "--chrome-trace", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert f"chrome trace: {out}" in run.stdout
    jsonschema.validate(json.loads(out.read_text()), SCHEMA)
    two = subprocess.run([sys.executable, "-m", "perfgate", "analyze", str(trace), str(trace),
                          "--chrome-trace", str(out)], capture_output=True, text=True, timeout=300)
    assert two.returncode == 2 and "--chrome-trace: one TRACE at a time" in two.stderr
    missing = subprocess.run([sys.executable, "-m", "perfgate", "analyze", str(trace), "--chrome-trace",
                              str(tmp_path / "no" / "x.json")], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "does not exist" in missing.stderr

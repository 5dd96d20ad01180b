"""A few measured steps of a trace in the Chrome trace event format, which Perfetto
(ui.perfetto.dev), chrome://tracing and HTA's viewers open without Nsight Systems.

:func:`step_window` picks the steps: ``count`` consecutive measured steps of one process, centred on
the one whose iteration period is the median of that process's (the step the gate's number
describes, with a neighbour each side). :func:`chrome_trace` writes what happened in that window:

- every NVTX range on the host that overlaps it, a complete event (``"ph": "X"``) on its process
  and thread, category ``nvtx``;
- every GPU kernel, copy and memset that overlaps it, on a process of its own per GPU
  (``"GPU <device>"``) and a thread per stream (``"stream <id>"``), category ``kernel``,
  ``memcpy`` or ``memset``; a kernel's name is its name in the export;
- metadata events naming the processes and threads, and the window's steps as instant events
  (``"ph": "i"``) at each step's start.

Times are microseconds from the window's start (the format's unit), so the file reads the same
whatever the session's clock. Pure but for reading the trace: the dict is returned, not written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from perfgate.analysis.steps import select_steps
from perfgate.errors import TraceError
from perfgate.trace.export import Trace
from perfgate.trace.gpu_ops import KIND_CODES

GPU_PID_BASE = 1 << 30          # GPU "processes" sit above any host pid
COPY_KINDS = {1: "HtoD", 2: "DtoH", 8: "DtoD", 10: "PtoP"}   # CUPTI_ACTIVITY_MEMCPY_KIND
_KIND_NAMES = {code: name for name, code in KIND_CODES.items()}


@dataclass(frozen=True)
class StepWindow:
    """``count`` consecutive measured steps of process ``pid``: from the first one's start to the
    last one's period end (ns, the trace's clock); ``starts`` each step's start."""

    pid: int
    start_ns: int
    end_ns: int
    starts: tuple[int, ...]
    median_step: int            # the position of the median step among the measured steps


def step_window(trace: Trace, step_pattern: str | None, skip_steps: int, count: int = 3) -> StepWindow:
    """The measured steps around the median one of the process with the most measured steps."""
    sel = select_steps(trace.nvtx, step_pattern, skip_steps, str(trace.path), trace.marks)
    measured = sel.measured
    if not len(measured["pid"]):
        raise TraceError(f"{trace.path}: no measured steps to show ({skip_steps} skipped as warm-up per process)")
    pids, counts = np.unique(measured["pid"], return_counts=True)
    pid = int(pids[np.argmax(counts)])
    mine = np.flatnonzero(measured["pid"] == pid)
    starts, ends = measured["start"][mine], measured["period_end"][mine]
    periods = ends - starts
    median = int(np.argsort(periods, kind="stable")[(periods.size - 1) // 2])
    first = max(0, min(median - (count - 1) // 2, periods.size - count))
    last = min(periods.size, first + count)
    return StepWindow(pid=pid, start_ns=int(starts[first]), end_ns=int(ends[last - 1]),
                      starts=tuple(int(s) for s in starts[first:last]), median_step=median)


def chrome_trace(trace: Trace, window: StepWindow, label: str = "") -> dict[str, Any]:
    """The window's host ranges and GPU work as a Chrome trace (``{"traceEvents": [...]}``)."""
    lo, hi = window.start_ns, window.end_ns

    def us(ns: Any) -> float:
        return round((float(ns) - lo) / 1000.0, 3)

    events: list[dict[str, Any]] = []
    threads: set[tuple[int, int]] = set()
    nvtx = trace.nvtx
    keep = np.flatnonzero((nvtx["start"] < hi) & (nvtx["end"] > lo))
    for i in keep[np.argsort(nvtx["start"][keep], kind="stable")]:
        pid, tid = int(nvtx["pid"][i]), int(nvtx["global_tid"][i]) & 0xFFFFFF
        start, end = max(int(nvtx["start"][i]), lo), min(int(nvtx["end"][i]), hi)
        events.append({"name": str(nvtx["name"][i]), "cat": "nvtx", "ph": "X", "ts": us(start),
                       "dur": round((end - start) / 1000.0, 3), "pid": pid, "tid": tid})
        threads.add((pid, tid))
    gpus: set[tuple[int, int]] = set()
    ops = trace.ops
    if len(ops):
        rows = np.flatnonzero((ops.start < hi) & (ops.end > lo))
        for i in rows[np.argsort(ops.start[rows], kind="stable")]:
            kind = _KIND_NAMES.get(int(ops.kind[i]), "gpu")
            if kind == "memcpy":
                name = f"memcpy {COPY_KINDS.get(int(ops.copy_kind[i]), int(ops.copy_kind[i]))}"
            elif kind == "memset":
                name = "memset"
            else:
                name = trace.string(int(ops.name_id[i])) if int(ops.name_id[i]) >= 0 else kind
            device, stream = int(ops.device_id[i]), int(ops.stream_id[i])
            start, end = max(int(ops.start[i]), lo), min(int(ops.end[i]), hi)
            events.append({"name": name, "cat": kind, "ph": "X", "ts": us(start),
                           "dur": round((end - start) / 1000.0, 3), "pid": GPU_PID_BASE + device, "tid": stream,
                           "args": {"bytes": int(ops.bytes[i])} if kind != "kernel" else {}})
            gpus.add((device, stream))
    for k, start in enumerate(window.starts):
        events.append({"name": f"step {k + 1} of {len(window.starts)}", "cat": "step", "ph": "i", "s": "p",
                       "ts": us(start), "pid": window.pid, "tid": 0})
    meta: list[dict[str, Any]] = []
    for pid in sorted({p for p, _ in threads} | {window.pid}):
        meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": f"process {pid}"}})
    for pid, tid in sorted(threads):
        meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": f"thread {tid}"}})
    for device in sorted({d for d, _ in gpus}):
        meta.append({"name": "process_name", "ph": "M", "pid": GPU_PID_BASE + device, "tid": 0,
                     "args": {"name": f"GPU {device}"}})
    for device, stream in sorted(gpus):
        meta.append({"name": "thread_name", "ph": "M", "pid": GPU_PID_BASE + device, "tid": stream,
                     "args": {"name": f"stream {stream}"}})
    return {"traceEvents": meta + events, "displayTimeUnit": "ms",
            "otherData": {"source": str(trace.path), "label": label, "steps": len(window.starts),
                          "window_ns": [lo, hi], "median_step": window.median_step}}


def steps_trace(trace: Trace, step_pattern: str | None, skip_steps: int, label: str = "") -> dict[str, Any]:
    """The Chrome trace of the 3 measured steps around the median one."""
    return chrome_trace(trace, step_window(trace, step_pattern, skip_steps), label)

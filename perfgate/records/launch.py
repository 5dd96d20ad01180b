"""What the gate knows of one launch besides its trace (``Analysis.launch``): which launch it was,
its capture kind, the workload's self-report, the measurement checks, the resources and the
diagnosis.

Records layer (stdlib only). An analysis record writes each of them as the top-level key it always
had (``launch``, ``capture``, ``self_report``, ``stability``, ``gpu_clocks``, ``gpu_memory``,
``energy``, ``resource_metrics``, ``diagnosis``, ``diagnosis_error``), and ``machine_state`` (a
typed record's ``to_dict``), only when there is one; ``Launch.split`` reads them back, a value of
another kind (or a record its ``from_dict`` does not take) staying in ``Analysis.extra`` as read.
The launch's notes (``launch <k>: ...``) end the record's ``warnings``; ``split_warnings`` takes
them back from there, at the edge that reads the record.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from perfgate.records.diagnosis import Diagnosis
from perfgate.records.resources import GpuMemory, LaunchEnergy
from perfgate.records.launch_checks import GpuClocks, StabilityReport
from perfgate.records.machine_state import MachineState

#: Each field's key in an analysis record, and the kind of its value there.
_KEYS = {"number": ("launch", int), "kind": ("capture", str), "self_report": ("self_report", dict),
         "resource_metrics": ("resource_metrics", dict), "diagnosis_error": ("diagnosis_error", str)}
#: The fields that are typed records: their key, and their record (its ``to_dict`` writes it, its
#: ``from_dict`` reads it back).
_RECORDS: dict[str, tuple[str, Any]] = {
    "stability": ("stability", StabilityReport), "gpu_clocks": ("gpu_clocks", GpuClocks),
    "gpu_memory": ("gpu_memory", GpuMemory), "energy": ("energy", LaunchEnergy),
    "diagnosis": ("diagnosis", Diagnosis), "machine_state": ("machine_state", MachineState)}


#: A launch's folder holds its three steps around the median one as a Chrome trace under this name
#: (perfgate.analysis.step_trace, written by perfgate.pipeline.workload_run).
STEPS_TRACE_FILE = "steps.trace.json"


@dataclass(frozen=True)
class Launch:
    """One launch's facts besides its trace; None: not known (an analysis of a file alone)."""

    number: int | None = None                  # the timing launch's number (the profile launch's 0)
    kind: str | None = None                    # perfgate.capture.command.TIMING or PROFILE
    self_report: dict[str, Any] | None = None  # the workload's PERFGATE_SELF_REPORT line, parsed
    stability: StabilityReport | None = None   # whether its measured steps look stationary (gate.statistics)
    gpu_clocks: GpuClocks | None = None        # NVML's clocks and throttling (capture.gpu_monitor)
    gpu_memory: GpuMemory | None = None        # each memory source's peak (analysis.resources)
    energy: LaunchEnergy | None = None         # energy over the measured window, or why not (analysis.resources)
    resource_metrics: dict[str, float] | None = None  # what Analysis.metrics() adds: memory, energy, power
    diagnosis: Diagnosis | None = None         # the diagnosis of the launch (diagnosis.one_run)
    diagnosis_error: str | None = None         # why the diagnosis failed
    machine_state: MachineState | None = None  # what the machine did beside the launch (capture.machine_meter)
    # what the result's message notes of the launch: a file withheld, a capture taken again,
    # unstable steps, a throttled GPU (``launch <k>: ...``); written at the end of ``warnings``
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The analysis record's keys of this launch (those it knows), in the order of its fields."""
        d: dict[str, Any] = {}
        for f in fields(self):
            if (value := getattr(self, f.name)) is None or f.name == "notes":
                continue
            key = _KEYS[f.name][0] if f.name in _KEYS else _RECORDS[f.name][0]
            d[key] = value.to_dict() if f.name in _RECORDS else value
        return d

    @classmethod
    def split(cls, record: Mapping[str, Any]) -> tuple[Launch, dict[str, Any]]:
        """The Launch of a record's keys, and the keys it does not take (as read)."""
        rest, values = dict(record), {}
        for name, (key, kind) in _KEYS.items():
            value = rest.get(key)
            if isinstance(value, kind) and not isinstance(value, bool):
                values[name] = rest.pop(key)
        for name, (key, typed) in _RECORDS.items():
            if (read := typed.from_dict(rest.get(key))) is not None:
                values[name] = read
                del rest[key]
        return cls(**values), rest


def split_warnings(warnings: Sequence[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """An analysis record's ``warnings`` as the analysis's own and the launch's notes: the run of
    ``launch <k>: ...`` warnings that ends them (the only place their words are read)."""
    k = len(warnings)
    while k > 0 and warnings[k - 1].startswith(LAUNCH_NOTE):
        k -= 1
    return tuple(warnings[:k]), tuple(warnings[k:])


#: How each of a launch's notes begins.
LAUNCH_NOTE = "launch "

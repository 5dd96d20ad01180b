"""TraceFacts: what the diagnosis's rules need that the rest of an Analysis does not keep, read
from the raw events of a trace in the analysis pass (``Analysis.facts``, per measured step unless
named otherwise; perfgate.analysis.facts computes them). Written inside the diagnosis record
(``"diagnosis": {"facts": ...}``), so that a baseline that keeps the diagnosis keeps them too, and
read back from there by ``Analysis.from_dict``."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Where work launched inside a measured iteration but in none of its phases is said to happen.
STEP_CODE = "the step's own code (outside its phases)"
OUTSIDE_PHASES = "(no phase)"     # idle while only the step range (or nothing) was open
H2D_PHASE = "h2d"                 # the phase of host-to-device copies (``h2d_syncs_per_step``)


@dataclass(frozen=True)
class TraceFacts:
    steps: int                                         # measured steps the facts are divided by
    gpu_ops: int = 0                                   # kernels + copies + memsets in the window
    kernels_per_step: float = 0.0
    kernel_ms_by_class: dict[str, float] = field(default_factory=dict)    # per step
    kernel_count_by_class: dict[str, float] = field(default_factory=dict)  # per step
    median_kernel_us: float | None = None
    h2d_copies_per_step: float = 0.0
    h2d_copy_ms_per_step: float = 0.0
    h2d_on_compute_stream_fraction: float | None = None  # H2D copy time on a stream that runs kernels
    h2d_overlap_fraction: float | None = None            # H2D copy time overlapping kernels (same GPU)
    sync_calls_per_step: float = 0.0
    sync_ms_per_step: float = 0.0
    h2d_syncs_per_step: float = 0.0                    # sync calls made inside the h2d phase
    sync_memcpy_per_step: float = 0.0                  # cudaMemcpy (no Async) calls
    idle_ms_per_step: float | None = None
    idle_by_phase_ms: dict[str, float] = field(default_factory=dict)  # innermost phase open on the CPU
    kernel_set_changes: int = 0                        # steps whose kernel-name set differs from the usual one
    cpu_only_steps: int = 0                            # measured steps with no GPU op at all (GPU runs)
    # where work is launched: phase (STEP_CODE for the step's own code outside its phases) ->
    # kernel name -> [launches, ms] per step; sync calls per step by phase
    kernels_by_phase: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    # the same by kernel family (perfgate.analysis.kernel_families): place -> family -> name -> [launches, ms]
    kernels_by_family: dict[str, dict[str, dict[str, list[float]]]] = field(default_factory=dict)
    # the threads those kernels launched per step (grid x block, each name's mean launch size in the
    # window times its launches): place -> family -> threads
    threads_by_family: dict[str, dict[str, float]] = field(default_factory=dict)
    syncs_by_phase: dict[str, float] = field(default_factory=dict)
    d2h_copies_per_step: float = 0.0
    fp64_kernels_per_step: float = 0.0                 # kernels whose full name has a double type
    dataloader_workers: int | None = None              # pt_data_worker processes (None: not recorded)
    # a DataLoader iterator was in use (autostep's loader marks); False: autostep's hooks ran and saw
    # none (the program makes its own batches); None: not known (no autostep marks)
    dataloader: bool | None = None
    # ``<module>.<qualname>`` of the program's own batch function (autostep's ``perfgate/input`` mark)
    input_function: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TraceFacts:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def stored_facts(record: Mapping[str, Any]) -> TraceFacts | None:
    """The TraceFacts an analysis record keeps in its diagnosis (``"diagnosis": {"facts": ...}``);
    None for a record without them."""
    diagnosis = record.get("diagnosis")
    raw = diagnosis.get("facts") if isinstance(diagnosis, Mapping) else None
    if isinstance(raw, Mapping) and "steps" in raw:
        return TraceFacts.from_dict(raw)
    return None

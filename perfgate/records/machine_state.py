"""What the machine did beside one launch (``Launch.machine_state``), and how the machine's state
differed between a baseline's launches and the current ones (``MachineDifference``).

perfgate.capture.machine_meter measures a ``MachineState`` around each launch (Linux /proc, NVML's
processes where there is a GPU); perfgate.gate.machine_states compares them. A launch that ran
beside other work measured the machine as much as the code: the gate says so in the user's words.

Records layer (stdlib only). An analysis record writes a launch's state as ``"machine_state"``
(``to_dict``: its fields by name, and what follows from them: ``others_cpu_s``, ``others_cores``,
``steal_share``); ``from_dict`` reads it back. ``MachineDifference`` is written the same way, with
its ``text``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from perfgate.records.fields import read_fields

#: The digits a state's values keep (a thousandth of a second, of a core, of a share).
DIGITS = 3
#: What a state's record adds to its fields: what follows from them (``MachineState``'s properties).
DERIVED = ("others_cpu_s", "others_cores", "steal_share")


@dataclass(frozen=True)
class MachineState:
    """The machine during one launch: its CPUs, what they did and who for, the tasks waiting to run,
    the pressure on CPU and memory, other processes on its GPUs. None: not measured (no
    /proc/pressure on this kernel; no NVML, no GPU)."""

    cpus: int                          # the machine's CPUs (those /proc/stat counts)
    wall_s: float                      # the launch's wall time, measured
    samples: int                       # how many times the sampler read /proc during it
    load_1min_start: float             # /proc/loadavg's 1-minute load average at the launch's start
    load_1min_end: float               # ... at its end
    load_1min_mean: float              # ... the mean of the samples
    runnable_mean: float               # runnable tasks (procs_running, the launch's own included), mean of the samples
    runnable_max: int                  # ... the most seen
    busy_cpu_s: float                  # CPU-seconds the machine's CPUs worked over the launch (/proc/stat)
    launch_cpu_s: float                # CPU-seconds of the launch's process tree and of perfgate itself (getrusage)
    steal_cpu_s: float                 # CPU-seconds the hypervisor gave to other machines (/proc/stat steal)
    cpu_pressure: float | None         # share of the launch's time some task waited for a CPU (PSI "some")
    memory_pressure: float | None      # share of the launch's time some task stalled on memory (PSI "some")
    mem_available_min_mib: float | None   # the least MemAvailable the samples saw
    mem_total_mib: float | None        # MemTotal
    gpu_other_processes: int | None    # the most processes of others seen at once on the launch's GPUs (NVML)

    @property
    def others_cpu_s(self) -> float:
        """CPU-seconds that processes other than the launch's (and perfgate's) took over the launch."""
        return round(max(0.0, self.busy_cpu_s - self.launch_cpu_s), DIGITS)

    @property
    def others_cores(self) -> float:
        """How many of the machine's CPUs other processes kept busy, on average over the launch."""
        return round(self.others_cpu_s / self.wall_s, DIGITS) if self.wall_s > 0 else 0.0

    @property
    def steal_share(self) -> float:
        """The share of the CPUs' time the hypervisor gave to other machines."""
        capacity = self.wall_s * self.cpus
        return round(self.steal_cpu_s / capacity, DIGITS) if capacity > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), **{name: getattr(self, name) for name in DERIVED}}

    @classmethod
    def from_dict(cls, d: Any) -> MachineState | None:
        """The MachineState of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        return read_fields(cls, d, DERIVED)


@dataclass(frozen=True)
class MachineDifference:
    """How the machine's state during the current launches differed from the baseline's, each
    difference one clause in the user's words (``clauses``). ``busier``: True where the current
    launches saw the more loaded machine on every count, False where the baseline's did, None
    where it went both ways."""

    clauses: tuple[str, ...]
    busier: bool | None

    def text(self) -> str:
        """One sentence: how the machine differed, then each difference."""
        head = {True: "the machine was busier than when the baseline was recorded",
                False: "the machine was quieter than when the baseline was recorded",
                None: "the machine was not in the state it was in when the baseline was recorded"}[self.busier]
        return f"{head}: {'; '.join(self.clauses)}"

    def to_dict(self) -> dict[str, Any]:
        return {"clauses": list(self.clauses), "busier": self.busier, "text": self.text()}

    @classmethod
    def from_dict(cls, d: Any) -> MachineDifference | None:
        """The MachineDifference of ``d`` when ``to_dict`` of it gives ``d`` back, else None."""
        if not isinstance(d, Mapping) or set(d) != {"clauses", "busier", "text"}:
            return None
        clauses, busier = d["clauses"], d["busier"]
        if not (isinstance(clauses, list) and clauses and all(isinstance(c, str) for c in clauses)
                and (busier is None or isinstance(busier, bool))):
            return None
        found = cls(tuple(clauses), busier)
        return found if found.to_dict() == dict(d) else None

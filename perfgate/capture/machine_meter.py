"""What the machine did beside a launch, read from Linux's /proc while it runs: a ``MachineState``.

A launch that shared its machine with other work measured the machine as much as the code. The
meter reads, at the launch's start and end, the CPUs' busy and steal time (/proc/stat), the
pressure stall totals (/proc/pressure/cpu and memory, where the kernel has them), and the CPU time
of this process and of the children it reaped (``getrusage``): perfgate's supervisor reaps every
process of the launch's tree (it is their child subreaper, perfgate.system.supervisor), so the
launch's CPU time is all in ``RUSAGE_CHILDREN`` once ``run_capture`` has returned. The machine's
busy time less that is what other processes took. A sampling thread reads the load average, the
runnable tasks (``procs_running``) and MemAvailable every ``interval_s`` and, with NVML, the
processes on the launch's GPUs: others' are those outside this process's tree that ran before the
launch started or that this process's /proc shows (a process another pid namespace's NVML names,
not found here, is counted only when it ran before the launch). Without /proc/stat (not
Linux) ``report()`` is None; without NVML or a GPU the GPUs are not looked at. Clocks and throttling
are perfgate.capture.gpu_monitor's.

A child this process reaps during the launch that is not the launch's is counted as the launch's:
perfgate starts nothing else while a launch runs.

Checked on real machines: on this project's 2-CPU machine, beside nsys captures of 13-15 s, the
others' CPU-seconds the meter found agreed within 0.1 with what every other process's own counters
say (tests/capture/test_machine_meter.py); on an H200 machine NVML named the pids /proc shows, and a GPU
process adopted by init before the block and another during it were others' (2), the block's own
child was not.
"""
from __future__ import annotations

import os
import resource
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from perfgate.records.machine_state import DIGITS, MachineState
from perfgate.capture.gpu_monitor import open_visible


@dataclass(frozen=True)
class ProcTotals:
    """The machine's running totals at one moment (/proc/stat in seconds; PSI in seconds)."""

    busy_s: float                  # user + nice + system + irq + softirq, all CPUs
    steal_s: float
    cpus: int
    cpu_stall_s: float | None      # /proc/pressure/cpu "some" total
    memory_stall_s: float | None   # /proc/pressure/memory "some" total


@dataclass(frozen=True)
class ProcSample:
    """What one look at the machine saw."""

    load_1min: float
    runnable: int                  # procs_running, less the sampler itself
    mem_available_mib: float | None


def read_totals(proc: Path) -> ProcTotals | None:
    """The totals of ``proc`` (a /proc), None without a readable stat."""
    try:
        lines = (proc / "stat").read_text().splitlines()
        ticks = os.sysconf("SC_CLK_TCK")
        cpu = [int(v) for v in lines[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (cpu + [0] * 8)[:8]
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return ProcTotals(busy_s=(user + nice + system + irq + softirq) / ticks, steal_s=steal / ticks,
                      cpus=cpus or os.cpu_count() or 1, cpu_stall_s=_stall_s(proc / "pressure" / "cpu"),
                      memory_stall_s=_stall_s(proc / "pressure" / "memory"))


def _stall_s(path: Path) -> float | None:
    """The ``some`` line's ``total=`` (microseconds) of a PSI file, in seconds; None without one."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("some "):
                return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return None
    return None


def read_sample(proc: Path) -> ProcSample | None:
    """The load average, runnable tasks and MemAvailable of ``proc`` now; None without them."""
    try:
        load = float((proc / "loadavg").read_text().split()[0])
        running = next(int(line.split()[1]) for line in (proc / "stat").read_text().splitlines()
                       if line.startswith("procs_running "))
    except (OSError, ValueError, IndexError, StopIteration):
        return None
    return ProcSample(load_1min=load, runnable=max(0, running - 1),
                      mem_available_mib=_meminfo_mib(proc, "MemAvailable"))


def _meminfo_mib(proc: Path, key: str) -> float | None:
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024          # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def own_cpu_s() -> float:
    """CPU-seconds of this process and of the children it reaped, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measured_state(start: ProcTotals, end: ProcTotals, samples: list[ProcSample], *, wall_s: float,
                   launch_cpu_s: float, mem_total_mib: float | None = None,
                   gpu_other_processes: int | None = None) -> MachineState:
    """The MachineState of a launch from the totals at its start and end and the samples between
    (at least one: the meter takes one at each end)."""
    wall_s = _r(wall_s)     # as the record keeps it, and divides by it

    def share(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or wall_s <= 0 else _r(max(0.0, b - a) / wall_s)

    loads, runnable = [s.load_1min for s in samples], [s.runnable for s in samples]
    available = [s.mem_available_mib for s in samples if s.mem_available_mib is not None]
    return MachineState(
        cpus=end.cpus, wall_s=wall_s, samples=len(samples), load_1min_start=loads[0], load_1min_end=loads[-1],
        load_1min_mean=_r(statistics.fmean(loads)), runnable_mean=_r(statistics.fmean(runnable)),
        runnable_max=max(runnable), busy_cpu_s=_r(max(0.0, end.busy_s - start.busy_s)), launch_cpu_s=_r(launch_cpu_s),
        steal_cpu_s=_r(max(0.0, end.steal_s - start.steal_s)),
        cpu_pressure=share(start.cpu_stall_s, end.cpu_stall_s),
        memory_pressure=share(start.memory_stall_s, end.memory_stall_s),
        mem_available_min_mib=_r(min(available)) if available else None,
        mem_total_mib=None if mem_total_mib is None else _r(mem_total_mib), gpu_other_processes=gpu_other_processes)


def _r(value: float) -> float:
    return round(value, DIGITS)


class GpuProcessReader(Protocol):
    """What the meter needs from NVML: ``open()`` -> GPU count (raises when NVML is unusable),
    ``pids(gpu)`` -> the pids of the compute processes on the meter's GPU ``gpu`` (0 to count - 1;
    raises for a failed read), ``close()``."""

    def open(self) -> int: ...

    def pids(self, gpu: int) -> set[int]: ...

    def close(self) -> None: ...


class NvmlProcesses:
    """GpuProcessReader over ``pynvml`` (or an object with its API, for tests): the GPUs
    ``CUDA_VISIBLE_DEVICES`` leaves to the launch, as perfgate.capture.gpu_monitor samples them."""

    def __init__(self, nvml: Any | None = None) -> None:
        self._nvml: Any = nvml
        self._handles: list[Any] = []

    def open(self) -> int:
        self._nvml, self._handles = open_visible(self._nvml)
        return len(self._handles)

    def pids(self, gpu: int) -> set[int]:
        return {int(p.pid) for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handles[gpu])}

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


class OtherGpuProcesses:
    """Which processes on the GPUs are others': those outside ``root``'s tree (this process and its
    descendants, as ``proc`` shows them) that ran before the launch started, or that ``proc``
    shows (a pid it does not know, of NVML in another pid namespace, may be the launch's own: it
    is left out). ``most``: the most seen at once."""

    def __init__(self, proc: Path, root: int, before: set[int]) -> None:
        self._proc, self._root = proc, root
        self._known: set[int] = set()
        self._others: set[int] = set()
        self.most = 0
        self.see(before, before=True)

    def see(self, pids: set[int], *, before: bool = False) -> None:
        for pid in pids - self._known:
            self._known.add(pid)
            if not self._descends(pid) and (before or (self._proc / str(pid)).exists()):
                self._others.add(pid)
        self.most = max(self.most, len(pids & self._others))

    def _descends(self, pid: int) -> bool:
        for _ in range(64):     # a tree deeper than this is not perfgate's
            if pid == self._root:
                return True
            try:
                stat = (self._proc / str(pid) / "stat").read_text()
                pid = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                return False
            if pid <= 1:
                return False
        return False


class MachineMeter:
    """``with MachineMeter() as meter: <the launch>``; then ``meter.report()``. ``proc``: the /proc
    to read (tests give a folder of their own); ``gpus``: a GpuProcessReader (default NVML's, or
    ``nvml``: an object with pynvml's API); ``cpu_s``: the launch's CPU-seconds so far
    (``own_cpu_s``)."""

    def __init__(self, interval_s: float = 0.2, *, proc: Path = Path("/proc"), nvml: Any | None = None,
                 gpus: GpuProcessReader | None = None, cpu_s: Callable[[], float] = own_cpu_s) -> None:
        self.interval_s, self._proc, self._cpu_s = interval_s, proc, cpu_s
        self._gpus: GpuProcessReader = gpus if gpus is not None else NvmlProcesses(nvml)
        self._gpu_count = 0
        self._others: OtherGpuProcesses | None = None
        self._samples: list[ProcSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start: tuple[ProcTotals, float, float] | None = None   # totals, CPU-seconds, monotonic time
        self._report: MachineState | None = None

    def __enter__(self) -> MachineMeter:
        if read_totals(self._proc) is None:      # not Linux: nothing to measure
            return self
        opened = False
        try:
            self._gpu_count, opened = self._gpus.open(), True
            self._others = OtherGpuProcesses(self._proc, os.getpid(), self._gpu_pids())
        except Exception:  # noqa: BLE001 - no pynvml, no driver, no GPU: the GPUs are not looked at
            if opened:
                self._gpus.close()
        self._sample()
        self._start = self._totals_now()
        self._thread = threading.Thread(target=self._run, name="perfgate-machine-meter", daemon=True)
        self._thread.start()
        return self

    def _totals_now(self) -> tuple[ProcTotals, float, float] | None:
        totals = read_totals(self._proc)
        return None if totals is None else (totals, self._cpu_s(), time.monotonic())

    def _gpu_pids(self) -> set[int]:
        found: set[int] = set()
        for gpu in range(self._gpu_count):
            found |= self._gpus.pids(gpu)
        return found

    def _sample(self) -> None:
        sample = read_sample(self._proc)
        if sample is not None:
            self._samples.append(sample)
        if self._others is not None:
            try:
                self._others.see(self._gpu_pids())
            except Exception:  # noqa: BLE001 - a failed read is a missing sample
                pass

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def __exit__(self, *exc: object) -> None:
        if self._thread is None:
            return
        end = self._totals_now()
        self._stop.set()
        self._thread.join(timeout=5)
        self._sample()      # the launch's end
        if self._others is not None:
            self._gpus.close()
        if self._start is not None and end is not None and self._samples:
            (first, cpu_s, t), (last, cpu_end_s, t_end) = self._start, end
            self._report = measured_state(
                first, last, self._samples, wall_s=t_end - t, launch_cpu_s=cpu_end_s - cpu_s,
                mem_total_mib=_meminfo_mib(self._proc, "MemTotal"),
                gpu_other_processes=None if self._others is None else self._others.most)

    def report(self) -> MachineState | None:
        """What the machine did beside the block; None where it could not be read (not Linux)."""
        return self._report

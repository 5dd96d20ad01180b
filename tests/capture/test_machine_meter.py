"""The machine beside a launch (perfgate.capture.machine_meter): the meter over a /proc of the
test's own making and an NVML stand-in (this machine has no GPU), and over the real /proc around
real captures under nsys, once on a quiet machine and once beside two CPU hogs: the hogs' CPU time
is other processes', the launch's own is the launch's."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cpu_nvtx import NVTX

from perfgate.capture import machine_meter
from perfgate.capture.machine_meter import MachineMeter, NvmlProcesses, read_totals
from perfgate.gate.machine_states import machine_difference
from perfgate.records.launch import Launch
from perfgate.records.machine_state import MachineState

TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def write_proc(proc: Path, *, busy: int, steal: int = 0, running: int = 1, load: float = 0.5,
               cpu_stall_us: int | None = 0, available_kib: int = 8 * 1024 * 1024) -> None:
    """A /proc of two CPUs: ``busy`` ticks split over user, system and softirq; the idle time is
    never read."""
    (proc / "pressure").mkdir(parents=True, exist_ok=True)
    user, system, softirq = busy - busy // 4 - 10, busy // 4, 10
    (proc / "stat").write_text(f"cpu  {user} 0 {system} 999999 50 0 {softirq} {steal} 0 0\n"
                               f"cpu0 1 0 1 1 0 0 0 0 0 0\ncpu1 1 0 1 1 0 0 0 0 0 0\nintr 1\n"
                               f"procs_running {running}\nprocs_blocked 0\n")
    (proc / "loadavg").write_text(f"{load:.2f} 0.40 0.30 {running}/90 4242\n")
    (proc / "meminfo").write_text(f"MemTotal:       16777216 kB\nMemAvailable:   {available_kib} kB\n")
    if cpu_stall_us is not None:
        (proc / "pressure" / "cpu").write_text(f"some avg10=0.00 avg60=0.00 avg300=0.00 total={cpu_stall_us}\n"
                                               "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")


def test_the_meter_says_what_the_machine_did_and_what_others_took(tmp_path: Path) -> None:
    """Busy 600 ticks of which the launch took 1.5 s; 20 ticks of steal; 0.05 s of CPU stalls; the
    runnable tasks and MemAvailable of the samples; no memory PSI file: None."""
    proc = tmp_path / "proc"
    write_proc(proc, busy=1000, steal=10, running=5, load=2.0, cpu_stall_us=1_000_000)
    cpu = iter([10.0, 11.5])
    with MachineMeter(interval_s=0.01, proc=proc, gpus=NoGpus(), cpu_s=lambda: next(cpu)) as meter:
        write_proc(proc, busy=1000, steal=10, running=3, load=1.0, cpu_stall_us=1_000_000, available_kib=1024 * 1024)
        time.sleep(0.1)
        write_proc(proc, busy=1600, steal=30, running=1, load=0.25, cpu_stall_us=1_050_000)
    s = meter.report()
    assert s is not None
    assert (s.cpus, s.busy_cpu_s, s.launch_cpu_s, s.steal_cpu_s) == (2, round(600 * TICK_S, 3), 1.5,
                                                                    round(20 * TICK_S, 3))
    assert s.others_cpu_s == round(600 * TICK_S - 1.5, 3)
    assert 0.1 <= s.wall_s < 5 and s.others_cores == round(s.others_cpu_s / s.wall_s, 3)
    assert s.cpu_pressure == round(0.05 / s.wall_s, 3) and s.memory_pressure is None
    assert (s.load_1min_start, s.load_1min_end, s.runnable_max) == (2.0, 0.25, 4)   # procs_running less the sampler
    assert 0 < s.runnable_mean < 4 and 0.25 < s.load_1min_mean < 2.0 and s.samples >= 3
    assert (s.mem_available_min_mib, s.mem_total_mib) == (1024.0, 16384.0)
    assert s.gpu_other_processes is None                   # no GPU: not looked at
    assert MachineState.from_dict(s.to_dict()) == s


def test_without_proc_stat_there_is_nothing_to_report(tmp_path: Path) -> None:
    with MachineMeter(interval_s=0.01, proc=tmp_path, gpus=NoGpus()) as meter:
        pass
    assert meter.report() is None and read_totals(tmp_path) is None


class NoGpus:
    def open(self) -> int:
        raise RuntimeError("NVML Shared Library Not Found")

    def pids(self, gpu: int) -> set[int]:
        raise AssertionError("never asked")

    def close(self) -> None:
        raise AssertionError("never opened")


def test_without_nvml_the_gpus_are_not_looked_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)       # import pynvml raises ImportError
    proc = tmp_path / "proc"
    write_proc(proc, busy=100)
    with MachineMeter(interval_s=0.01, proc=proc) as meter:
        write_proc(proc, busy=150)
    s = meter.report()
    assert s is not None and s.gpu_other_processes is None and s.busy_cpu_s == round(50 * TICK_S, 3)


class FakeNvml:
    """The part of pynvml's API the meter uses: each GPU's compute processes, as a script of
    readings (the last one repeats)."""

    def __init__(self, script: list[dict[int, list[int]]], uuids: list[str] | None = None) -> None:
        self.script, self.uuids, self.reads, self.shut = script, uuids or ["GPU-a", "GPU-b"], 0, False

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None:
        self.shut = True
    def nvmlDeviceGetCount(self) -> int:
        return len(self.uuids)
    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i
    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return self.uuids[h].encode()
    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        step = self.script[min(self.reads // 2, len(self.script) - 1)]     # both GPUs each round
        self.reads += 1
        return [SimpleNamespace(pid=pid, usedGpuMemory=1 << 30) for pid in step.get(h, [])]


def fake_process(proc: Path, pid: int, ppid: int) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "stat").write_text(f"{pid} (python (x) y) S {ppid} {pid} {pid} 0 -1\n")


def test_others_on_the_gpus_are_those_before_the_launch_and_those_outside_its_tree(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before the launch: 700 on GPU 1 (another job's) and this process (a test that used CUDA:
    perfgate's own). During it: the launch's 801 (this process's grandchild), 900 (a stranger's,
    whose parent is init), 950 (another pid namespace's, not in this /proc: perhaps the launch's
    own, left out). The most seen at once: 700 and 900."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    proc = tmp_path / "proc"
    write_proc(proc, busy=100)
    fake_process(proc, 800, os.getpid())
    fake_process(proc, 801, 800)
    fake_process(proc, 900, 1)
    me = os.getpid()
    nvml = FakeNvml([{1: [700, me]}, {0: [801, 950], 1: [700, me]}, {0: [801, 950, 900], 1: [700, me]}, {0: [900]}])
    with MachineMeter(interval_s=0.01, proc=proc, nvml=nvml) as meter:
        time.sleep(0.1)
    s = meter.report()
    assert s is not None and s.gpu_other_processes == 2 and nvml.shut

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-b")    # the launch's GPU is GPU 1 only
    reader = NvmlProcesses(FakeNvml([{0: [801], 1: [700]}]))
    assert reader.open() == 1 and reader.pids(0) == {700}


# --------------------------------------------------------------------------- under nsys

BUSY = '''
import json, time
''' + NVTX + '''for _ in range(8):
    nvtx.range_push("step")
    t, x = time.process_time(), 0
    while time.process_time() - t < 0.3:      # 0.3 s of its own CPU, however many share the cores
        x += 1
    nvtx.range_pop()
print("PERFGATE_SELF_REPORT " + json.dumps({"workload": "busy", "cpu_s": time.process_time()}))
'''
HOG = "while True: pass"


def cpu_by_process() -> dict[int, float]:
    """Each live process's CPU-seconds (this one's left out), with those of the children it reaped:
    a process that ends is counted in its parent's, so a sum over two reads is what every other
    process took in between."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(entry.name)] = sum(int(v) for v in fields[11:15]) * TICK_S    # utime stime cutime cstime
    return found


class ReadMeter(MachineMeter):
    """The pipeline's meter, with every other process's CPU time read at its start and its end."""

    made: list[ReadMeter] = []

    def __enter__(self) -> ReadMeter:
        self.before = cpu_by_process()
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self.after = cpu_by_process()
        ReadMeter.made.append(self)

    def others_cpu_s(self, pids: list[int] | None = None) -> float:
        """What the processes read took between the meter's start and end (``pids``: those only; a
        process that ended is in its parent's count at the end, no longer in its own)."""
        if pids is not None:
            return sum(self.after[pid] - self.before[pid] for pid in pids)
        return sum(self.after.values()) - sum(self.before.values())


def test_a_launch_beside_two_cpu_hogs_records_them_as_others_and_its_own_cpu_as_its_own(
        tmp_path: Path, nsys_path: str, torch_module: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each launch's others agree with what the other processes' own counters say (within 0.15 of
    a core); the launch's CPU time holds the workload's own (its self-report) and is not others';
    beside the hogs, others took more than a core, the hogs' time among it. Where nothing else ran
    (the other processes' counters say so), others took less than half a core without the hogs,
    and the comparison calls the hogs' machine busier."""
    from perfgate.capture.command import TIMING
    from perfgate.pipeline.workload_run import launch_capture_and_analysis
    from perfgate.settings.config import load_settings
    from perfgate.settings.workloads import WorkloadSpec

    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'busy'\n")
    (tmp_path / "busywl.py").write_text(BUSY)
    settings, spec = load_settings(tmp_path, env={}, overrides={"timeout_s": 180}), WorkloadSpec("busy", "busywl")
    monkeypatch.setattr(machine_meter, "MachineMeter", ReadMeter)
    ReadMeter.made.clear()

    def launch(k: int) -> tuple[MachineState, float, ReadMeter]:
        capture, analysis = launch_capture_and_analysis(spec, settings, tmp_path / "runs" / f"launch-{k}", k, TIMING)
        state = analysis.launch.machine_state
        assert state is not None and capture.self_report is not None
        assert MachineState.from_dict(analysis.to_dict()["machine_state"]) == state
        return state, float(capture.self_report["cpu_s"]), ReadMeter.made[-1]

    quiet, quiet_workload_s, quiet_read = launch(1)
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(2)]
    try:
        time.sleep(0.5)
        hogged, hogged_workload_s, hogged_read = launch(2)
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:            # reaped after the meter: their time is never this process's children's
            hog.wait()

    totals = read_totals(Path("/proc"))
    for state, workload_s, read in ((quiet, quiet_workload_s, quiet_read),
                                    (hogged, hogged_workload_s, hogged_read)):
        seen = f"{state}; the other processes' counters: {read.others_cpu_s():.2f} CPU-s"
        assert totals is not None and state.cpus == totals.cpus, seen
        assert state.launch_cpu_s >= workload_s > 2.0, seen         # 8 busy steps of 0.3 s are the launch's
        assert abs(state.others_cpu_s - read.others_cpu_s()) <= 0.15 * state.wall_s + 0.3, seen
    hogs_s = hogged_read.others_cpu_s([hog.pid for hog in hogs])
    assert hogs_s > 0.1 * hogged.wall_s and hogged.others_cpu_s >= hogs_s - 0.3, (hogs_s, hogged)
    assert hogged.others_cores > min(1.0, hogged.cpus / 2), hogged        # 2 hogs beside a busy launch
    if quiet_read.others_cpu_s() < 0.3 * quiet.wall_s:      # nothing else ran: the machine was quiet
        assert quiet.others_cores < 0.5, quiet
        found = machine_difference([Launch(machine_state=quiet)], [Launch(machine_state=hogged)])
        assert found is not None and found.busier is True, found
        assert found.clauses[0].startswith(f"other processes used {hogged.others_cores:.2f} of {hogged.cpus} CPUs")

"""How loaded this machine was while something ran, measured beside it, for timing assertions that
hold on a loaded CI machine (issue 30, item 8): a test compares two runs' times relative to the
load each one saw, never with a bound tighter than the machine's noise.

``LoadMeter`` samples the number of runnable threads of the machine (``procs_running`` of
/proc/stat) every 0.1 s from a sleeping thread (it costs no measurable CPU) while its ``with``
block runs. ``slowdown``: how many times longer a CPU-bound thread took than on an idle machine,
about ``runnable / cores`` when that exceeds 1 (each runnable thread gets a core's share); 1 on a
quiet machine. What a loaded machine adds to a short sleep is not measured: a thread that sleeps
for long (this sampler) wakes at once, a busy loop's short sleeps each wait for a core for longer.
``drift(a, b)``: how much slower the machine made CPU work during ``b`` than during ``a``.

Runnable threads miss what happens outside this machine's kernel: a CI machine is a virtual
machine whose neighbours take its host's cores (steal time, which no runnable thread of its own
shows). A probe process therefore also times a fixed piece of Python work (about a millisecond)
every 0.1 s: its mean against the quietest meter's mean so far is how much slower CPU work ran,
whatever the cause (the mean: a vCPU taken away for a few ms lengthens some probes, not most). On
this project's 2-core machine, idle, the probe's work took 1.2-1.5 ms for some seconds and 2.3-2.7 ms
for others: CPU work changes speed by up to 2 times with no runnable thread to show for it. A woken
probe gets a core before busy threads do, so this machine's own load barely shows in it (4 busy
processes on 2 cores left it at x1.00 while runnable threads said x2.07). ``slowdown`` is the larger
of the two: a CI run once saw a step grow 39 ms more than the data-loading phase that held its 64 ms
sleep, beyond what runnable threads explained (tests/programs/test_user_loops_gate.py).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

PERIOD_S = 0.1
PROBE_LOOPS = 20_000        # about 1 ms of Python work on this project's CPU machine
PROBE_QUIET = 1.2           # a probe mean within this factor of the quietest one's: jitter, not load
PROBE_WARMUP = 2            # the child's first probes run cold
# the child ends when its pipe breaks (this process gone) or at SIGTERM (the meter's end)
PROBE = f"""
import sys, time
while True:
    t = time.perf_counter()
    x = 0
    for i in range({PROBE_LOOPS}):
        x += i
    sys.stdout.write(repr(time.perf_counter() - t) + "\\n")
    sys.stdout.flush()
    time.sleep({PERIOD_S})
"""
_quietest_probe: list[float] = []     # the smallest probe mean any meter of this process saw


def runnable_threads() -> int | None:
    """The machine's runnable threads now (this sampler's own included), None where /proc/stat has none."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


class LoadMeter:
    """``with LoadMeter() as load: ...``; then ``load.mean_running`` and ``load.slowdown``."""

    def __init__(self) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self.cores = os.cpu_count() or 1
        self.wall_s = 0.0
        self.probe_s: list[float] = []
        self.probe_mean: float | None = None   # of probe_s, once the block is done

    def _sample(self) -> None:
        while not self._stop.is_set():
            n = runnable_threads()
            if n is not None:
                self.samples.append(max(0, n - 1))      # less this sampler, running as it reads
            self._stop.wait(PERIOD_S)

    def __enter__(self) -> LoadMeter:
        self._started = time.monotonic()
        self._thread.start()
        self._probe = subprocess.Popen([sys.executable, "-c", PROBE], stdout=subprocess.PIPE, text=True)
        self._reader = threading.Thread(target=self._read_probe, daemon=True)   # a pipe never fills
        self._reader.start()
        return self

    def _read_probe(self) -> None:
        assert self._probe.stdout is not None
        for line in self._probe.stdout:
            self.probe_s.append(float(line))

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.wall_s = time.monotonic() - self._started
        self._probe.terminate()
        self._probe.wait(timeout=10)
        self._reader.join(timeout=10)
        del self.probe_s[:PROBE_WARMUP]
        if self.probe_s:
            self.probe_mean = statistics.fmean(self.probe_s)
            _quietest_probe[:] = [min([self.probe_mean, *_quietest_probe])]

    @property
    def mean_running(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def probe_slowdown(self) -> float:
        """This meter's probe mean against the quietest meter's so far (1.0 for that one, and
        without samples)."""
        if self.probe_mean is None or not _quietest_probe:
            return 1.0
        return max(1.0, self.probe_mean / _quietest_probe[0])

    @property
    def slowdown(self) -> float:
        return max(1.0, self.mean_running / self.cores, self.probe_slowdown)

    @property
    def quiet(self) -> bool:
        """No more runnable threads than cores, on average (nothing waited for a core), and the
        probe's work as fast as the quietest meter's, within its jitter."""
        return self.mean_running <= self.cores and self.probe_slowdown <= PROBE_QUIET

    def __repr__(self) -> str:
        return (f"LoadMeter({self.mean_running:.1f} runnable threads on {self.cores} cores over {self.wall_s:.0f} s, "
                f"probe x{self.probe_slowdown:.2f}: slowdown {self.slowdown:.2f})")


def drift(a: LoadMeter, b: LoadMeter) -> float:
    """How many times slower the machine made CPU work during ``b`` than during ``a``."""
    return b.slowdown / a.slowdown

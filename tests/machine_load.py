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
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

PERIOD_S = 0.1


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

    def _sample(self) -> None:
        while not self._stop.is_set():
            n = runnable_threads()
            if n is not None:
                self.samples.append(max(0, n - 1))      # less this sampler, running as it reads
            self._stop.wait(PERIOD_S)

    def __enter__(self) -> LoadMeter:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.wall_s = time.monotonic() - self._started

    @property
    def mean_running(self) -> float:
        return sum(self.samples) / len(self.samples) if self.samples else 0.0

    @property
    def slowdown(self) -> float:
        return max(1.0, self.mean_running / self.cores)

    @property
    def quiet(self) -> bool:
        """No more runnable threads than cores, on average: nothing waited for a core."""
        return self.slowdown <= 1.0

    def __repr__(self) -> str:
        return (f"LoadMeter({self.mean_running:.1f} runnable threads on {self.cores} cores over {self.wall_s:.0f} s: "
                f"slowdown {self.slowdown:.2f})")


def drift(a: LoadMeter, b: LoadMeter) -> float:
    """How many times slower the machine made CPU work during ``b`` than during ``a``."""
    return b.slowdown / a.slowdown

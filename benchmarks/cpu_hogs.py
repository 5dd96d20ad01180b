"""CPU hogs for the benchmarks that measure beside a busy machine (confirm_under_load.py,
launch_steadiness.py): ``n`` processes spinning ``while True: pass`` for the block, killed after."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()

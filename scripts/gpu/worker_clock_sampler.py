"""Issue 41: is a data-bound program's launch-to-launch noise its loader worker's CPU clock?

Samples, every ``--interval`` seconds until killed, every process that runs the program ``--match``
(default ``train``: an argument ``train``, as torchrun's ``-m train`` gives it, or ``train.py``;
the first version matched the text ``train.py`` and, under torchrun, no process): pid, parent pid, the CPU it last ran on (/proc/PID/stat field
39), its CPU-seconds so far, its working folder; and every CPU's clock (/proc/cpuinfo "cpu MHz",
the kernel's estimate from APERF/MPERF on x86). One JSON object a line to ``--out``.

    python3 scripts/gpu/worker_clock_sampler.py --out $OUT/clocks.jsonl &
"""
from __future__ import annotations

import argparse
import json
import os
import time


def cpu_mhz() -> list[float]:
    with open("/proc/cpuinfo") as f:
        return [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]


def runs(cmd: str, program: str) -> bool:
    """Whether a command line runs ``program``: an argument ``program`` or a path ending in ``program.py``."""
    return any(arg == program or arg.rsplit("/", 1)[-1] == f"{program}.py" for arg in cmd.split())


def processes(match: str) -> list[dict]:
    tick = os.sysconf("SC_CLK_TCK")
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            if not runs(cmd, match):
                continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        # fields[0] is stat's 3rd field (state): stat field n is fields[n - 3]
        found.append({"pid": int(pid), "ppid": int(fields[1]), "cpu": int(fields[36]),
                      "cpu_s": (int(fields[11]) + int(fields[12])) / tick, "cwd": cwd, "cmd": cmd[:120]})
    return found


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--match", default="train", help="the program: an argument NAME or a file NAME.py")
    p.add_argument("--interval", type=float, default=0.5)
    args = p.parse_args()
    with open(args.out, "w") as out:
        while True:
            out.write(json.dumps({"t": time.time(), "mhz": cpu_mhz(), "procs": processes(args.match)}) + "\n")
            out.flush()
            time.sleep(args.interval)


if __name__ == "__main__":
    main()

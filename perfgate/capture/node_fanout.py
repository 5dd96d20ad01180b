"""Run the nsys command of each node of a job at once, as one command under perfgate's supervisor
(perfgate/capture/nodes.py builds it: ``python node_fanout.py '<JSON list of commands>'``).
Standalone, standard library only, run by path like perfgate/system/supervisor.py.

SIGINT and SIGTERM are passed on to every node's nsys (each then writes the report of what ran).
A node that fails leaves the others waiting for it (at the rendezvous, at the next collective):
FAILED_GRACE_S after the first failure the nodes still running get SIGINT, and SIGKILL FINISH_S
later (a report not written by then is lost; perfgate's supervisor, which ends the rest of the tree,
gives nsys as long to finish). The exit status is the first failed node's (128 + the signal for
one ended by a signal), 0 when all succeeded."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from types import FrameType

FAILED_GRACE_S = 10.0
FINISH_S = 60.0
POLL_S = 0.2


def _status(code: int) -> int:
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    commands = json.loads(argv[1])
    procs: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    procs.extend(subprocess.Popen(cmd) for cmd in commands)
    failed_at = None
    first = 0                                           # the exit status of the node that failed first
    signals = [(FAILED_GRACE_S, signal.SIGINT), (FAILED_GRACE_S + FINISH_S, signal.SIGKILL)]
    while [p.poll() for p in procs].count(None):        # every one polled: its exit status known
        if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
            failed_at = time.monotonic()
            first = next(_status(p.returncode) for p in procs if p.returncode not in (None, 0))
        if failed_at is not None and signals and time.monotonic() - failed_at > signals[0][0]:
            forward(signals.pop(0)[1], None)
        time.sleep(POLL_S)
    return first or next((_status(p.returncode) for p in procs if p.returncode != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

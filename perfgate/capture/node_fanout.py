"""Run the nsys command of each node of a job at once, as one command under perfgate's supervisor
(perfgate/capture/nodes.py builds it: ``python node_fanout.py '<JSON list of commands>'``).
Standalone, standard library only, run by path like perfgate/system/supervisor.py.

SIGINT and SIGTERM are passed on to every node's nsys (each then writes the report of what ran).
A node that fails leaves the others waiting for it (at the rendezvous, at the next collective):
FAILED_GRACE_S after the first failure the nodes still running get SIGINT, and SIGKILL FINISH_S
later (a report not written by then is lost; perfgate's supervisor, which ends the rest of the tree,
gives nsys as long to finish). The exit status is the first failed node's (128 + the signal for
one ended by a signal), 0 when all succeeded.

With a second argument (a JSON command: the rendezvous's store, perfgate/capture/nodes.py), that
command starts first; the nodes start once its port accepts connections (at most STORE_WAIT_S),
and it is ended (SIGTERM, SIGKILL STORE_GRACE_S later) after the last node ended, whatever its
own status."""
from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from types import FrameType

FAILED_GRACE_S = 10.0
FINISH_S = 60.0
POLL_S = 0.2
STORE_WAIT_S = 60.0
STORE_GRACE_S = 5.0


def _status(code: int) -> int:
    return 128 - code if code < 0 else code


def _serving(store: subprocess.Popen[bytes], host: str, port: int) -> None:
    """Return once ``host:port`` accepts a connection, the store has ended, or STORE_WAIT_S passed."""
    deadline = time.monotonic() + STORE_WAIT_S
    while store.poll() is None and time.monotonic() < deadline:
        try:
            with socket.create_connection((host, port), timeout=1.0):
                return
        except OSError:
            time.sleep(POLL_S)


def _end(store: subprocess.Popen[bytes]) -> None:
    if store.poll() is None:
        store.terminate()
        try:
            store.wait(STORE_GRACE_S)
        except subprocess.TimeoutExpired:
            store.kill()
            store.wait()


def main(argv: list[str]) -> int:
    commands = json.loads(argv[1])
    store_cmd: list[str] = json.loads(argv[2]) if len(argv) > 2 else []
    procs: list[subprocess.Popen[bytes]] = []
    asked: list[int] = []                               # a signal that came before the nodes started

    def forward(signum: int, frame: FrameType | None) -> None:
        asked.append(signum)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    store = subprocess.Popen(store_cmd) if store_cmd else None
    try:
        if store is not None:
            _serving(store, store_cmd[-2], int(store_cmd[-1]))
        if asked:
            return 128 + asked[0]
        procs.extend(subprocess.Popen(cmd) for cmd in commands)
        return _wait(procs, forward)
    finally:
        if store is not None:
            _end(store)


def _wait(procs: list[subprocess.Popen[bytes]], forward: Callable[[int, FrameType | None], None]) -> int:
    """Wait for every node; after the first failure, stop the others (SIGINT, then SIGKILL)."""
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

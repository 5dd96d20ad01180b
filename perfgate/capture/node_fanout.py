"""Run the nsys command of each node of a job, as one command under perfgate's supervisor
(perfgate/capture/nodes.py builds it: ``python node_fanout.py '<JSON list of commands>'``).
Standalone, standard library only, run by path like perfgate/system/supervisor.py (whose process
walk it loads by path, with perfgate/system/nsys_program.py).

SIGINT and SIGTERM are passed on to every node's nsys (each then writes the report of what ran).
A node that fails leaves the others waiting for it (at the rendezvous, at the next collective):
FAILED_GRACE_S after the first failure the nodes still running get SIGINT, and SIGKILL FINISH_S
later (a report not written by then is lost; perfgate's supervisor, which ends the rest of the tree,
gives nsys as long to finish). The exit status is the first failed node's (128 + the signal for
one ended by a signal), 0 when all succeeded.

With a second argument (a JSON command: the rendezvous's store, perfgate/capture/nodes.py), that
command starts first; the nodes start once its port accepts connections (at most STORE_WAIT_S),
and it is ended (SIGTERM, SIGKILL STORE_GRACE_S later) after the last node ended, whatever its
own status.

The nodes start one after the other: node i+1 once node i's nsys has started its program (a process
of its tree outside nsys's install folder: perfgate/system/nsys_program.py), or
NODE_START_S passed; none once a node has failed. Each node's start takes the machine's turn at
starting nsys (nsys_program.turn_to_start), as every capture of one node does. Two nsys 2022.4 sessions started at the same
moment hang or break each other's start (1 of 2 pairs started together on the 2-core CPU machine
hung; two-node jobs failed with "Connection reset by peer" or "End of file" from one node's nsys).
A node's nsys that fails anyway (a session beside another one breaks now and then) fails the launch,
and perfgate's capture takes the whole launch again (perfgate.capture.launch: a node's report
missing, nsys's transient failure in the log); a node's nsys run again beside the others failed
with "Agent launcher failed." each time, the session table being left broken while they ran."""
from __future__ import annotations

import importlib.util
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType

FAILED_GRACE_S = 10.0
FINISH_S = 60.0
POLL_S = 0.2
STORE_WAIT_S = 60.0
STORE_GRACE_S = 5.0
NODE_START_S = 60.0      # perfgate.capture.launch.START_S: an nsys that started nothing by then hung


def _system(name: str) -> ModuleType:
    """perfgate/system/<name>.py, loaded by path: this file runs standalone too."""
    path = Path(__file__).resolve().parent.parent / "system" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"perfgate_{name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        descendants: Callable[[int], list[int]] = _system("supervisor").descendants
        program = _system("nsys_program")
        for cmd in commands:
            if asked or any(p.returncode not in (None, 0) for p in procs):   # told to stop, or failed
                break
            with program.turn_to_start(NODE_START_S):    # the machine's other nsys starts too
                _start(cmd, procs, lambda pid: program.started(pid, descendants), asked)
        return _wait(procs, forward)
    finally:
        if store is not None:
            _end(store)


def _start(cmd: list[str], procs: list[subprocess.Popen[bytes]], has_started: Callable[[int], bool],
           asked: list[int]) -> None:
    """Start ``cmd`` (one node's) into ``procs``; return once its nsys has started its program, it
    has ended, NODE_START_S passed, or a signal came."""
    proc = subprocess.Popen(cmd)
    procs.append(proc)                                  # where forward() finds it
    deadline = time.monotonic() + NODE_START_S
    while proc.poll() is None and time.monotonic() < deadline and not asked:
        if has_started(proc.pid):
            return
        time.sleep(POLL_S)


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

"""A job of several nodes captured on this machine (``nnodes`` in a workload's table): one
``nsys profile ... torchrun --nnodes=N --node-rank=i --rdzv-backend=c10d ...`` per node, all
started at once by perfgate/capture/node_fanout.py, which runs as the launch's one command under
perfgate's supervisor (every process ends with the launch). Each node writes its own report,
``trace-node<i>.nsys-rep`` and ``.sqlite``; the analysis merges them (perfgate/trace/nodes.py).
On machines of their own, each node runs its own nsys: docs/guides/multi-node.md."""
from __future__ import annotations

import json
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from perfgate.capture.command import Rendezvous
from perfgate.settings.workloads import WorkloadSpec

FANOUT = Path(__file__).with_name("node_fanout.py")
LOCAL_HOST = "127.0.0.1"


def node_stem(stem: str, node: int) -> str:
    """The report stem of one node (``trace-node1``)."""
    return f"{stem}-node{node}"


def free_port(host: str = LOCAL_HOST) -> int:
    """A TCP port nothing listens on now (the kernel's pick), for the rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def endpoint(spec: WorkloadSpec, port: Callable[[], int] = free_port) -> str:
    """The nodes' rendezvous: ``rdzv_endpoint`` as given where it has a port, else its host (or
    127.0.0.1) and a free port."""
    given = spec.rdzv_endpoint or LOCAL_HOST
    host, sep, tail = given.rpartition(":")
    if sep and tail.isdigit() and not host.endswith(":"):
        return given
    return f"{given}:{port()}"


def job_command(node_commands: list[list[str]], python: str = sys.executable) -> list[str]:
    """The one command that runs every node's command at once (perfgate/capture/node_fanout.py)."""
    return [python, str(FANOUT), json.dumps(node_commands)]


def node_commands(spec: WorkloadSpec, build: Callable[[Path, str | None, Rendezvous], list[str]], out: Path,
                  stem: str, session: str | None, run_id: str) -> list[list[str]]:
    """Each node's nsys command: ``build(output, session, rendezvous)`` (perfgate.capture.command.
    nsys_command with the launch's options), the outputs ``<out>/<stem>-node<i>``, the sessions
    ``<session>-<i>``, one rendezvous endpoint for all."""
    where = endpoint(spec)
    return [build(out / node_stem(stem, i), f"{session}-{i}" if session else None, Rendezvous(i, where, run_id))
            for i in range(spec.nnodes)]

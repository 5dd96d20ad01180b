"""A job of several nodes captured on this machine (``nnodes`` in a workload's table): one
``nsys profile ... torchrun --nnodes=N --node-rank=i --rdzv-backend=c10d ...`` per node, all
started one after the other by perfgate/capture/node_fanout.py, which runs as the launch's one command under
perfgate's supervisor (every process ends with the launch). Each node writes its own report,
``trace-node<i>.nsys-rep`` and ``.sqlite``; the analysis merges them (perfgate/trace/nodes.py).
On machines of their own, each node runs its own nsys: docs/guides/multi-node.md.

The rendezvous's c10d store is hosted by a process of its own (:func:`store_command`, started
first by the fanout and ended after the last node), every node a client of it
(``--rdzv-conf=is_host=0``): where node 0's torchrun hosted it, its agent took the store with it
when its workers ended first, and a node whose workers were still ending (an nsys session flushing
its buffers) failed with ``RendezvousConnectionError`` in its agent's last poll and exit status 1,
after a complete run (seen with 2 nodes x 2 processes on the 2-core CPU machine, under load;
pytorch/pytorch#69197, meta-pytorch/torchtune#2676)."""
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


def job_command(node_commands: list[list[str]], python: str = sys.executable,
                store: list[str] | None = None) -> list[str]:
    """The one command that runs every node's command (perfgate/capture/node_fanout.py),
    after ``store`` (:func:`store_command`) accepts connections where there is one."""
    return [python, str(FANOUT), json.dumps(node_commands), *([json.dumps(store)] if store else [])]


#: The rendezvous's store: a c10d TCPStore server at the endpoint, until it is ended.
STORE = ("import sys, time\nfrom torch.distributed import TCPStore\n"
         "store = TCPStore(sys.argv[1], int(sys.argv[2]), is_master=True, multi_tenant=True, wait_for_workers=False)\n"
         "while True:\n    time.sleep(3600)\n")


def store_command(where: str, python: str = sys.executable) -> list[str]:
    """The command that hosts the c10d store of the rendezvous at ``where`` (host:port)."""
    host, _, port = where.rpartition(":")
    return [python, "-c", STORE, host, port]


def multinode_command(spec: WorkloadSpec, build: Callable[[Path, str | None, Rendezvous], list[str]], out: Path,
                      stem: str, session: str | None, run_id: str, python: str = sys.executable) -> list[str]:
    """The job's one command (:func:`job_command`): each node's nsys command, ``build(output,
    session, rendezvous)`` (perfgate.capture.command.nsys_command with the launch's options), the
    outputs ``<out>/<stem>-node<i>``, the sessions ``<session>-<i>``, one rendezvous endpoint for
    all, whose store :func:`store_command` hosts."""
    where = endpoint(spec)
    nodes = [build(out / node_stem(stem, i), f"{session}-{i}" if session else None,
                   Rendezvous(i, where, run_id, hosted=True)) for i in range(spec.nnodes)]
    return job_command(nodes, python, store_command(where, python))

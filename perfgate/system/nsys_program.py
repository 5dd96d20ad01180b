"""Whether an nsys process has started the program it profiles, read from /proc. Standalone, the
standard library only: perfgate/capture/node_fanout.py loads it by path (as it loads
supervisor.py), perfgate.system.nsys imports it."""
from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def started(pid: int, descendants: Callable[[int], list[int]]) -> bool:
    """Whether the nsys of pid ``pid`` has started its program: a process of its tree (``descendants``,
    perfgate/system/supervisor.py's walk) whose executable is outside nsys's install folder (nsys's
    binaries, its agent and importers live in one folder, the parent of ``target-*``/``host-*``).
    True where it cannot be told (``pid`` is not nsys, e.g. a wrapper script, or cannot be read)."""
    try:
        exe = Path(os.readlink(f"/proc/{pid}/exe"))
    except OSError:
        return True
    if exe.name != "nsys":
        return True
    install = exe.parent.parent
    for child in descendants(pid):
        try:
            if install not in Path(os.readlink(f"/proc/{child}/exe")).parents:
                return True
        except OSError:
            continue
    return False

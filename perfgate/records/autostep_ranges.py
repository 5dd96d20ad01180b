"""What perfgate's autostep hooks emit in a profiled process (perfgate/capture/autostep/install.py): the NVTX range
and mark names, which the analysis reads back (analysis/loop.py, steps.py), and the one line on
stderr a problem becomes. Standard library only: imported at interpreter start with autostep on.
"""
from __future__ import annotations

import sys

__all__ = ["BACKWARD", "CHECKPOINT", "DATA_LOAD", "EVALUATION", "FORWARD", "INTERLUDE_RANGES", "MARK_BATCH", "MARK_INPUT",
           "MARK_LOADER",
           "MARK_OPTIMIZER_NEW", "MARK_OPTIMIZER_SKIPPED", "MARK_OPTIMIZER_STEP", "NOTE_PREFIX", "OPTIMIZER",
           "MARK_RANK", "PREFIX", "RANGE_NAMES", "WRAPPED", "note"]

PREFIX = "perfgate/"
DATA_LOAD = "perfgate/data_load"
BACKWARD = "perfgate/backward"
FORWARD = "perfgate/forward"
OPTIMIZER = "perfgate/optimizer"
EVALUATION = "perfgate/eval"
CHECKPOINT = "perfgate/checkpoint"
RANGE_NAMES = (DATA_LOAD, FORWARD, BACKWARD, OPTIMIZER, EVALUATION, CHECKPOINT)
#: Ranges that are not part of a training iteration: a period holding one is an interlude.
INTERLUDE_RANGES = (EVALUATION, CHECKPOINT)

MARK_OPTIMIZER_STEP = "perfgate/optimizer_step"        # :<k>
MARK_OPTIMIZER_NEW = "perfgate/optimizer_new"          # :<k>:<class>
MARK_OPTIMIZER_SKIPPED = "perfgate/optimizer_skipped"  # :<k>
MARK_BATCH = "perfgate/batch"                          # :<leading dimension>
MARK_LOADER = "perfgate/loader"                        # :<num_workers>
MARK_INPUT = "perfgate/input"                          # :<module>.<qualname> of the program's batch function
MARK_RANK = "perfgate/rank"                            # :<RANK>:<LOCAL_RANK>:<GROUP_RANK> (torchrun's)

NOTE_PREFIX = "perfgate autostep: "
WRAPPED = "__perfgate_autostep__"  # set on every wrapper, so a module patched twice is wrapped once


def note(message: str) -> None:
    """One line on stderr, prefixed ``perfgate autostep:``; never raises."""
    try:
        sys.stderr.write(NOTE_PREFIX + message + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not break the user's program
        pass

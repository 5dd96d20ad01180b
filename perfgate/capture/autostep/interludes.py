"""The hooks that tell training from what interrupts it (perfgate/capture/autostep/install.py): an evaluation
(``Module.train``) and a checkpoint (``torch.save``); the analysis leaves the periods that hold
one out of the measured steps as interludes (analysis/steps.py). Standard library only at import.
"""
from __future__ import annotations

import functools
import sys

from perfgate.capture.autostep import forward, hooks
from perfgate.records.autostep_ranges import CHECKPOINT, EVALUATION, WRAPPED

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any

    from perfgate.capture.autostep.installation import Installation

__all__ = ["TARGETS"]


def _patch_module(inst: Installation, module: ModuleType) -> None:
    """``Module.train``: a module in training mode put in eval mode opens ``perfgate/eval`` on this
    thread, until that same module is put back in training mode (the call's recursion into the
    children passes through) or training work resumes (``end_evaluation``)."""
    cls = module.Module
    original = cls.__dict__["train"]
    if getattr(original, WRAPPED, False):
        return
    pair = inst.range(EVALUATION)
    if pair is None:
        return
    start, end = pair
    hooks.bind_evaluation_end(end)

    @functools.wraps(original)
    def train(self: Any, mode: bool = True) -> Any:
        state = hooks.state()
        if state.in_train_call or hooks.is_compiling():
            return original(self, mode)
        state.in_train_call = True
        try:
            if mode is False and state.eval_range is None and getattr(self, "training", False):
                state.eval_range, state.eval_module = start(), id(self)
            elif mode is True and state.eval_range is not None and state.eval_module == id(self):
                end(state.eval_range)
                state.eval_range = None
            return original(self, mode)
        finally:
            state.in_train_call = False

    inst.own(train)
    cls.train = train
    inst.undo.append(lambda: setattr(cls, "train", original))


def _patch_serialization(inst: Installation, module: ModuleType) -> None:
    """``torch.save`` in a ``perfgate/checkpoint`` range (torch's package imports ``save`` from this
    module after it executes, so ``torch.save`` is the wrapper too), with the forward hooks taken
    off what it saves (perfgate/capture/autostep/forward.py)."""
    original = module.save
    if getattr(original, WRAPPED, False):
        return
    pair = inst.range(CHECKPOINT)
    if pair is None:
        return
    @functools.wraps(original)
    def without_our_hooks(*args: Any, **kwargs: Any) -> Any:
        with forward.detached():
            return original(*args, **kwargs)

    save = hooks.in_range(without_our_hooks, "checkpoint", *pair)
    inst.own(save)
    setattr(module, "save", save)
    inst.undo.append(lambda: setattr(module, "save", original))
    torch: Any = sys.modules.get("torch")
    if torch is not None and getattr(torch, "save", None) is original:   # installed after torch loaded
        setattr(torch, "save", save)
        inst.undo.append(lambda: setattr(torch, "save", original))


TARGETS: dict[str, Callable[[Installation, ModuleType], None]] = {
    "torch.nn.modules.module": _patch_module,
    "torch.serialization": _patch_serialization,
}

"""Autostep: NVTX ranges and marks for training code that has none of its own, without editing it.

perfgate runs a workload with ``PERFGATE_AUTOSTEP=1`` and ``perfgate/capture/autostep/site`` first on
``PYTHONPATH``; that folder's ``sitecustomize.py`` calls :func:`install` at interpreter start
(the hooks: perfgate/capture/autostep/hooks.py; the names they emit: perfgate/records/autostep_ranges.py).
``install`` imports no torch: it puts a finder on ``sys.meta_path`` that patches torch modules right
after they execute (so a process that never imports torch pays nothing):

================================  ===================================================  ==========================
module                            hook                                                 range (start/end)
================================  ===================================================  ==========================
``torch.utils.data.dataloader``   ``_BaseDataLoaderIter.__next__`` and ``__init__``     ``perfgate/data_load``
``torch.autograd``                ``torch.autograd.backward`` (``Tensor.backward``      ``perfgate/backward``
                                  looks it up on the module at each call)
``torch.optim.optimizer``         global optimizer step pre/post hooks; a closure      ``perfgate/optimizer``
                                  passed to ``step`` runs outside the range
``torch.amp.grad_scaler``         ``GradScaler.step`` (a step skipped on inf/NaN)      (a mark)
``torch.nn.modules.module``       ``Module.train``: a training module put in eval      ``perfgate/eval``
                                  mode until it is put back in training mode or
                                  training resumes (a backward pass, an optimizer step)
``torch.serialization``           ``torch.save``                                       ``perfgate/checkpoint``
(the model, found at the first    forward pre/post hooks of its outermost trained      ``perfgate/forward``
backward pass)                    modules and their direct children
(the program's batch function,    the function of the training loop whose result the   ``perfgate/data_load``
found in the first iterations)    model's forward takes first (``get_batch()``, no
                                  DataLoader): its global or class attribute replaced
================================  ===================================================  ==========================

Ranges are NVTX *start/end* ranges of torch's own binding (``torch.cuda.nvtx.range_start`` /
``range_end``; CUDA builds of torch have it even without a GPU), not push/pop ranges: they are on
no thread's stack, so they never close a range of the workload's or of a callback's
(``perfgate.integrations``), whatever order hooks fire in. Each is opened at most once per thread
at a time (a nested ``__next__``, a re-entrant backward, an optimizer whose ``step`` calls another
optimizer's ``step`` give one range). A closure given to ``optimizer.step`` (LBFGS, Lightning's
automatic optimization) runs forward and backward *inside* ``step``: the optimizer range is closed
while the closure runs, so forward and backward stay phases of their own.

Marks (instants, ``<name>:<value>``) say what the hooks saw, for the analysis's step model
(perfgate/analysis/loop.py):

- ``perfgate/optimizer_step:<k>`` after each optimizer step, ``k`` the optimizer's number in the
  process (1, 2, ... in the order of their first steps); ``perfgate/optimizer_new:<k>:<class>`` at
  an optimizer's first step; ``perfgate/optimizer_skipped:<k>`` where ``GradScaler.step`` skipped
  the step (inf/NaN gradients), so that the iteration still ends there.
- ``perfgate/batch:<n>``: the leading dimension of what a DataLoader iterator yields (a tensor, a
  tuple/list/dict of tensors with one leading dimension, a list of per-sample dicts), whenever it
  differs from that iterator's previous batch; ``perfgate/loader:<workers>`` when an iterator is
  created (its DataLoader's ``num_workers``).
- ``perfgate/input:<module>.<qualname>`` once, when the program's own batch function is found and
  wrapped (``perfgate/input:__main__.get_batch``).

A CPU-only torch (no NVTX binding) gets no hooks and one line on stderr. Code that torch.compile
captures emits nothing (``torch.compiler.is_compiling()``: no graph break); code it leaves to eager
execution after a graph break (``loss.backward()`` inside a compiled step) still does, because the
wrappers' frames are registered with torch._dynamo as never compiled on their own once it is loaded.
The forward pass gets ``perfgate/forward`` without a global module hook (one would cost Python work
on every module call and interfere with torch.compile): at the first backward pass the model's
outermost trained modules are found once and only their calls are hooked
(perfgate/capture/autostep/forward.py; ``PERFGATE_AUTOSTEP_FORWARD=0`` turns it off). Batches the
program makes itself become the input phase the same way: a profile function, for the few
iterations after the first backward pass only, finds the loop's function whose result the model's
forward takes first, which is then wrapped (perfgate/capture/autostep/inputs.py;
``PERFGATE_AUTOSTEP_INPUTS=0`` turns it off; a program with its own ``sys.setprofile`` is left alone).

Test hook: ``PERFGATE_AUTOSTEP_DEBUG=<file>`` makes every range and mark also append a line
``<pid> start|end|mark <text>`` to that file (read once, by :func:`install`).

This module imports only the standard library at import time; it must stay cheap because it
runs in every Python process that inherits the environment (nsys helpers, DataLoader workers).
"""
from __future__ import annotations

import functools
import os
import sys

from perfgate.capture.autostep import (
    forward as autostep_forward, hooks as autostep_hooks, inputs as autostep_inputs, interludes as autostep_interludes,
)
from perfgate.capture.autostep.installation import DEBUG_ENV_VAR, Installation
from perfgate.records.autostep_ranges import note

__all__ = [
    "ENV_VAR",
    "enabled",
    "install",
    "installed",
    "site_dir",
    "uninstall",
]

ENV_VAR = "PERFGATE_AUTOSTEP"
"""``1`` (or ``true``/``yes``/``on``) in a process's environment turns autostep on there."""

_ON_VALUES = frozenset({"1", "true", "yes", "on"})
_OFF_VALUES = frozenset({"0", "false", "no", "off"})


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether ``PERFGATE_AUTOSTEP`` in ``environ`` (default ``os.environ``) turns autostep on."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "").strip().lower() in _ON_VALUES


def site_dir() -> str:
    """The folder holding autostep's ``sitecustomize.py``, to put first on ``PYTHONPATH``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


# --------------------------------------------------------------------------- install / uninstall

_installation: Installation | None = None
_fork_hook_registered = False


def install(environ: dict[str, str] | None = None) -> bool:
    """Hook torch (now for the modules already imported, at their first import for the others;
    perfgate.capture.autostep.hooks). Idempotent; imports no torch. Reads ``PERFGATE_AUTOSTEP_DEBUG`` from
    ``environ`` (default ``os.environ``). Returns True when installed (errors become one note on
    stderr and False)."""
    global _installation, _fork_hook_registered
    if _installation is not None:
        return True
    try:
        env = os.environ if environ is None else environ
        inst = Installation({**autostep_hooks.TARGETS, **autostep_interludes.TARGETS},
                            env.get(DEBUG_ENV_VAR) or None, lambda: _installation is inst)
        if env.get(autostep_forward.ENV_VAR, "1").strip().lower() not in _OFF_VALUES:
            inputs = env.get(autostep_inputs.ENV_VAR, "1").strip().lower() not in _OFF_VALUES
            inst.first_backward = functools.partial(_at_first_backward, inst, inputs)
        _installation = inst
        sys.meta_path.insert(0, inst.finder)
        if not _fork_hook_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=autostep_hooks.reset_state)
            _fork_hook_registered = True
        for name in inst.targets:
            module = sys.modules.get(name)
            if module is not None:
                inst.patch(module)
    except Exception as exc:  # noqa: BLE001 - never raise into the user's program
        note(f"install failed: {type(exc).__name__}: {exc}")
        return False
    return True


def _at_first_backward(inst: Installation, inputs: bool) -> None:
    """Hook the model's forward; then, with ``inputs``, look for the program's batch function."""
    autostep_forward.discover(inst)
    if inputs:
        autostep_inputs.find_batch_function(inst)


def uninstall() -> None:
    """Remove the finder and undo every hook (tests and overhead measurements)."""
    global _installation
    inst, _installation = _installation, None
    if inst is None:
        return
    try:
        sys.meta_path.remove(inst.finder)
    except ValueError:
        pass
    for undo in reversed(inst.undo):
        undo()
    inst.undo.clear()
    autostep_hooks.reset_state()
    autostep_hooks.unbind_is_compiling()


def installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _installation is not None

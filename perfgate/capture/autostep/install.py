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

A CPU-only torch (no NVTX binding) gets no hooks and one line on stderr. Code that torch.compile
captures emits nothing (``torch.compiler.is_compiling()``: no graph break); code it leaves to eager
execution after a graph break (``loss.backward()`` inside a compiled step) still does, because the
wrappers' frames are registered with torch._dynamo as never compiled on their own once it is loaded.
There is no ``forward`` range: it would need a global module hook, which costs Python work on every
module call and interferes with torch.compile; the time outside the ranges is the forward pass (plus
whatever else the loop does there).

Test hook: ``PERFGATE_AUTOSTEP_DEBUG=<file>`` makes every range and mark also append a line
``<pid> start|end|mark <text>`` to that file (read once, by :func:`install`).

This module imports only the standard library at import time; it must stay cheap because it
runs in every Python process that inherits the environment (nsys helpers, DataLoader workers).
"""
from __future__ import annotations

import functools
import os
import sys

from perfgate.capture.autostep import hooks as autostep_hooks, interludes as autostep_interludes
from perfgate.capture.autostep.post_import import PostImportFinder
from perfgate.records.autostep_ranges import WRAPPED, note

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, ModuleType
    from typing import Any

__all__ = [
    "DEBUG_ENV_VAR",
    "Installation",
    "ENV_VAR",
    "enabled",
    "install",
    "installed",
    "site_dir",
    "uninstall",
]

ENV_VAR = "PERFGATE_AUTOSTEP"
"""``1`` (or ``true``/``yes``/``on``) in a process's environment turns autostep on there."""
DEBUG_ENV_VAR = "PERFGATE_AUTOSTEP_DEBUG"
"""A file path: every range and mark is also appended to it as ``<pid> start|end|mark <text>`` (tests)."""

_ON_VALUES = frozenset({"1", "true", "yes", "on"})


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether ``PERFGATE_AUTOSTEP`` in ``environ`` (default ``os.environ``) turns autostep on."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "").strip().lower() in _ON_VALUES


def site_dir() -> str:
    """The folder holding autostep's ``sitecustomize.py``, to put first on ``PYTHONPATH``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


class Installation:
    """What :func:`install` set up (the NVTX binding, the finder, every hook, so that
    :func:`uninstall` can take it back), and how the hooks emit: ``range(name)`` and ``mark``."""

    def __init__(self, debug_path: str | None, active: Callable[[], bool]) -> None:
        self.debug_path = debug_path
        self.targets = {**autostep_hooks.TARGETS, **autostep_interludes.TARGETS}
        self.finder = PostImportFinder(self.targets, self.patch, active)
        self.undo: list[Callable[[], Any]] = []
        self.binding: Any = None
        self.nvtx_missing = False
        self.codes: list[CodeType] = []     # code of every wrapper and hook, see skip_frames
        self.skipped = 0                     # how many of them torch.compile has been told to skip
        self.optimizer_number: Callable[[Any], int] | None = None   # set by the optimizer hook

    def nvtx(self) -> Any:
        """torch's NVTX binding (``torch._C._nvtx``), or None (and one note) without one."""
        if self.binding is None and not self.nvtx_missing:
            binding = getattr(sys.modules.get("torch._C"), "_nvtx", None)
            if binding is None or not all(hasattr(binding, f) for f in ("rangeStartA", "rangeEnd", "markA")):
                self.nvtx_missing = True
                note("torch has no NVTX (CPU-only build?): torch._C._nvtx is missing; "
                     "no automatic ranges in this process")
            else:
                self.binding = binding
        return self.binding

    def range(self, name: str) -> tuple[Callable[[], int], Callable[[int], None]] | None:
        """``(start, end)`` of the start/end range ``name`` (``end(start())``), or None without NVTX."""
        binding = self.nvtx()
        if binding is None:
            return None
        start, end = functools.partial(binding.rangeStartA, name), binding.rangeEnd
        if not self.debug_path:
            return start, end
        path = self.debug_path

        def start_logged() -> int:
            _debug_line(path, "start", name)
            return start()

        def end_logged(range_id: int) -> None:
            end(range_id)
            _debug_line(path, "end", name)

        return start_logged, end_logged

    def mark(self, text: str) -> None:
        """An NVTX mark ``text`` (nothing without NVTX)."""
        binding = self.nvtx()
        if binding is None:
            return
        binding.markA(text)
        if self.debug_path:
            _debug_line(self.debug_path, "mark", text)

    def own(self, *functions: Callable[..., Any]) -> None:
        """Mark ``functions`` as autostep's and keep torch.compile from compiling them as frames."""
        for fn in functions:
            setattr(fn, WRAPPED, True)
            self.codes.append(fn.__code__)
        self.skip_frames()

    def skip_frames(self) -> None:
        """Once torch._dynamo is loaded (by the first torch.compile), tell it never to compile a
        frame of ours by itself. Where code that torch.compile traces calls a wrapper or hook,
        the call is inlined and emits nothing (``is_compiling``), as before; but where the traced
        code breaks its graph and the rest runs eagerly (``loss.backward()`` does), our frame
        would otherwise be compiled on its own, with ``is_compiling`` true, and lose its range."""
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        skip_code = getattr(eval_frame, "skip_code", None)
        if skip_code is None:
            return
        for code in self.codes[self.skipped:]:
            skip_code(code)
        self.skipped = len(self.codes)

    def patch(self, module: ModuleType) -> None:
        """Apply the hook of ``module`` (one of ``targets``); a failure becomes one note."""
        patcher = self.targets.get(module.__name__)
        if patcher is None:
            return
        try:
            patcher(self, module)
        except Exception as exc:  # noqa: BLE001 - never raise into the user's program
            note(f"could not hook {module.__name__}: {type(exc).__name__}: {exc}")


def _debug_line(path: str, event: str, name: str) -> None:
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(f"{os.getpid()} {event} {name}\n")
    except OSError as exc:
        note(f"cannot append to {DEBUG_ENV_VAR} file {path}: {exc}")


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
        inst = Installation(env.get(DEBUG_ENV_VAR) or None, lambda: _installation is inst)
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

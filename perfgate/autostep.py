"""Autostep: NVTX ranges for training code that has none of its own, without editing it.

perfgate runs a workload with ``PERFGATE_AUTOSTEP=1`` and ``perfgate/_autostep_site`` first on
``PYTHONPATH``; that folder's ``sitecustomize.py`` calls :func:`install` at interpreter start.
``install`` imports no torch: it puts a finder on ``sys.meta_path`` that patches three torch
modules right after they execute (so a process that never imports torch pays nothing):

==============================  ======================================================  =====================
module                          hook                                                    range
==============================  ======================================================  =====================
``torch.utils.data.dataloader``  ``_BaseDataLoaderIter.__next__`` wrapped                 ``perfgate/data_load``
``torch.autograd``               ``torch.autograd.backward`` wrapped (``Tensor.backward``  ``perfgate/backward``
                                 looks it up on the module at each call)
``torch.optim.optimizer``        global optimizer step pre/post hooks                     ``perfgate/optimizer``
==============================  ======================================================  =====================

Ranges are NVTX push/pop ranges of torch's own binding (what ``torch.cuda.nvtx.range_push`` /
``range_pop`` call), which CUDA builds of torch have even without a GPU. Each range is opened
at most once per thread at a time (a nested ``__next__``, a re-entrant backward, an optimizer
whose ``step`` calls another optimizer's ``step`` give one range) and a CPU-only torch (no NVTX
binding) gets no hooks and one line on stderr. Code that torch.compile captures emits nothing
(``torch.compiler.is_compiling()``: no graph break); code it leaves to eager execution after a
graph break (``loss.backward()`` inside a compiled step) still does, because the wrappers'
frames are registered with torch._dynamo as never compiled on their own once it is loaded. There is no ``forward`` range: it would need a global module hook, which costs Python
work on every module call and interferes with torch.compile; the time between a
``data_load`` range's end and the next ``backward`` range's start is the forward pass (plus
whatever else the loop does there).

Test hook: ``PERFGATE_AUTOSTEP_DEBUG=<file>`` makes every push and pop also append a line
``<pid> push|pop <range name>`` to that file (read once, by :func:`install`).

This module imports only the standard library at import time; it must stay cheap because it
runs in every Python process that inherits the environment (nsys helpers, DataLoader workers).
"""
from __future__ import annotations

import functools
import os
import sys
from _thread import _local

from perfgate.post_import import PostImportFinder

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, ModuleType
    from typing import Any

__all__ = [
    "BACKWARD",
    "DATA_LOAD",
    "DEBUG_ENV_VAR",
    "ENV_VAR",
    "OPTIMIZER",
    "RANGE_NAMES",
    "enabled",
    "install",
    "installed",
    "site_dir",
    "uninstall",
]

ENV_VAR = "PERFGATE_AUTOSTEP"
"""``1`` (or ``true``/``yes``/``on``) in a process's environment turns autostep on there."""
DEBUG_ENV_VAR = "PERFGATE_AUTOSTEP_DEBUG"
"""A file path: every push/pop is also appended to it as ``<pid> push|pop <name>`` (tests)."""

DATA_LOAD = "perfgate/data_load"
BACKWARD = "perfgate/backward"
OPTIMIZER = "perfgate/optimizer"
RANGE_NAMES = (DATA_LOAD, BACKWARD, OPTIMIZER)

NOTE_PREFIX = "perfgate autostep: "
_ON_VALUES = frozenset({"1", "true", "yes", "on"})
_MARK = "__perfgate_autostep__"  # set on every wrapper, so a module patched twice is wrapped once


def enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether ``PERFGATE_AUTOSTEP`` in ``environ`` (default ``os.environ``) turns autostep on."""
    env = os.environ if environ is None else environ
    return env.get(ENV_VAR, "").strip().lower() in _ON_VALUES


def site_dir() -> str:
    """The folder holding autostep's ``sitecustomize.py``, to put first on ``PYTHONPATH``."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_autostep_site")


def note(message: str) -> None:
    """One line on stderr, prefixed ``perfgate autostep:``; never raises."""
    try:
        sys.stderr.write(NOTE_PREFIX + message + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a closed stderr must not break the user's program
        pass


class _State(_local):
    """Per-thread state; class attributes are each thread's initial values."""

    data_load = False       # inside a data_load range on this thread
    backward = False        # inside a backward range on this thread
    optimizer_depth = 0     # optimizer step pre hooks minus post hooks seen on this thread


_state = _State()


def _never_compiling() -> bool:
    return False


def _bind_is_compiling(compiler: ModuleType | None) -> None:
    global _is_compiling
    _is_compiling = getattr(compiler, "is_compiling", None) or _never_compiling


def _first_is_compiling() -> bool:
    """``torch.compiler.is_compiling``, bound on first use where the import hook on
    torch.compiler did not bind it (torch imports torch.compiler after the hooked modules, and
    importing it from their hooks could import it too early)."""
    _bind_is_compiling(sys.modules.get("torch.compiler"))
    return _is_compiling()


_is_compiling: Callable[[], bool] = _first_is_compiling


class _Installation:
    """What :func:`install` set up, so that :func:`uninstall` can take it back."""

    def __init__(self, debug_path: str | None) -> None:
        self.debug_path = debug_path
        self.finder = PostImportFinder(TARGETS, self.patch, lambda: _installation is self)
        self.undo: list[Callable[[], Any]] = []
        self.binding: Any = None
        self.nvtx_missing = False
        self.codes: list[CodeType] = []     # code of every wrapper and hook, see skip_frames
        self.skipped = 0                     # how many of them torch.compile has been told to skip

    def ranges(self, name: str) -> tuple[Callable[[], Any], Callable[[], Any]] | None:
        """``(enter, leave)`` for the range ``name``, or None (and one note) without NVTX."""
        if self.binding is None and not self.nvtx_missing:
            torch_c = sys.modules.get("torch._C")
            binding = getattr(torch_c, "_nvtx", None)
            if binding is None or not (hasattr(binding, "rangePushA") and hasattr(binding, "rangePop")):
                self.nvtx_missing = True
                note("torch has no NVTX (CPU-only build?): torch._C._nvtx is missing; "
                     "no automatic ranges in this process")
            else:
                self.binding = binding
        if self.binding is None:
            return None
        push, pop = self.binding.rangePushA, self.binding.rangePop
        if not self.debug_path:
            return functools.partial(push, name), pop
        path = self.debug_path

        def enter() -> None:
            _debug_line(path, "push", name)
            push(name)

        def leave() -> None:
            pop()
            _debug_line(path, "pop", name)

        return enter, leave

    def own(self, *functions: Callable[..., Any]) -> None:
        """Mark ``functions`` as autostep's and keep torch.compile from compiling them as frames."""
        for fn in functions:
            setattr(fn, _MARK, True)
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
        """Apply the hook of ``module`` (a target of TARGETS); a failure becomes one note."""
        patcher = TARGETS.get(module.__name__)
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


# --------------------------------------------------------------------------- the hooks


def _in_range(original: Callable[..., Any], flag: str, enter: Callable[[], None], leave: Callable[[], None],
              busy: Callable[[], bool] | None = None) -> Callable[..., Any]:
    """``original`` wrapped in one NVTX range: not again while this thread is already inside it
    (``_state.<flag>``), nor while torch.compile traces, nor while ``busy()`` says so."""
    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        state = _state
        if getattr(state, flag) or _is_compiling() or (busy is not None and busy()):
            return original(*args, **kwargs)
        setattr(state, flag, True)
        enter()
        try:
            return original(*args, **kwargs)
        finally:
            leave()
            setattr(state, flag, False)

    return wrapper


def _patch_dataloader(inst: _Installation, module: ModuleType) -> None:
    cls = module._BaseDataLoaderIter
    original = cls.__dict__["__next__"]
    if getattr(original, _MARK, False):
        return
    pair = inst.ranges(DATA_LOAD)
    if pair is None:
        return
    __next__ = _in_range(original, "data_load", *pair)
    inst.own(__next__)
    cls.__next__ = __next__
    inst.undo.append(lambda: setattr(cls, "__next__", original))


def _patch_autograd(inst: _Installation, module: ModuleType) -> None:
    original = module.backward
    if getattr(original, _MARK, False):
        return
    pair = inst.ranges(BACKWARD)
    if pair is None:
        return
    # -1 outside a backward pass; >= 0 on any thread running one (a reentrant backward from a
    # checkpointed function may run on an autograd device thread, where our flag is not set)
    graph_task_id = getattr(sys.modules.get("torch._C"), "_current_graph_task_id", None) or (lambda: -1)
    backward = _in_range(original, "backward", *pair, busy=lambda: graph_task_id() != -1)
    inst.own(backward)
    setattr(module, "backward", backward)
    inst.undo.append(lambda: setattr(module, "backward", original))


def _patch_optimizer(inst: _Installation, module: ModuleType) -> None:
    if any(getattr(h, _MARK, False) for h in module._global_optimizer_pre_hooks.values()):
        return
    pair = inst.ranges(OPTIMIZER)
    if pair is None:
        return
    enter, leave = pair

    def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _is_compiling():
            return None
        state = _state
        depth = state.optimizer_depth
        state.optimizer_depth = depth + 1
        if depth == 0:
            enter()
        return None

    def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
        if _is_compiling():
            return
        state = _state
        depth = state.optimizer_depth
        if depth <= 0:  # no pre hook of ours on this thread (e.g. installed during a step)
            return
        state.optimizer_depth = depth - 1
        if depth == 1:
            leave()

    inst.own(pre_hook, post_hook)
    pre = module.register_optimizer_step_pre_hook(pre_hook)
    post = module.register_optimizer_step_post_hook(post_hook)
    inst.undo.append(pre.remove)
    inst.undo.append(post.remove)


def _patch_compiler(inst: _Installation, module: ModuleType) -> None:
    _bind_is_compiling(module)


def _patch_dynamo(inst: _Installation, module: ModuleType) -> None:
    inst.skip_frames()


TARGETS: dict[str, Callable[[_Installation, ModuleType], None]] = {
    "torch.utils.data.dataloader": _patch_dataloader,
    "torch.autograd": _patch_autograd,
    "torch.optim.optimizer": _patch_optimizer,
    "torch.compiler": _patch_compiler,            # imported by torch after the three above
    "torch._dynamo.eval_frame": _patch_dynamo,    # loaded by the first torch.compile, if any
}


# --------------------------------------------------------------------------- install / uninstall

_PostImportFinder = PostImportFinder   # its earlier name here
_installation: _Installation | None = None
_fork_hook_registered = False


def _reset_state_after_fork() -> None:
    global _state
    _state = _State()


def install(environ: dict[str, str] | None = None) -> bool:
    """Hook torch's DataLoader, backward and optimizer step (now for the modules already imported,
    at their first import for the others). Idempotent; imports no torch. Reads
    ``PERFGATE_AUTOSTEP_DEBUG`` from ``environ`` (default ``os.environ``). Returns True when
    installed (errors become one note on stderr and False)."""
    global _installation, _fork_hook_registered
    if _installation is not None:
        return True
    try:
        env = os.environ if environ is None else environ
        inst = _Installation(env.get(DEBUG_ENV_VAR) or None)
        _installation = inst
        sys.meta_path.insert(0, inst.finder)
        if not _fork_hook_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_reset_state_after_fork)
            _fork_hook_registered = True
        for name in TARGETS:
            module = sys.modules.get(name)
            if module is not None:
                inst.patch(module)
    except Exception as exc:  # noqa: BLE001 - never raise into the user's program
        note(f"install failed: {type(exc).__name__}: {exc}")
        return False
    return True


def uninstall() -> None:
    """Remove the finder and undo every hook (tests and overhead measurements)."""
    global _installation, _is_compiling
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
    _reset_state_after_fork()
    _is_compiling = _first_is_compiling


def installed() -> bool:
    """Whether :func:`install` is in effect in this process."""
    return _installation is not None

"""The forward pass of code without NVTX (perfgate/capture/autostep/install.py): ``perfgate/forward``
around each training call of the model's outermost modules. Standard library only at import.

No global module hook: one would put every module call on torch's slow path and into what
torch.compile traces. Instead, once, at the first backward pass of the process (the model has run
its first forward by then), the modules in training mode that hold parameters needing gradients
are found (``gc``), and forward pre/post hooks are put on the outermost of them (``roots``) and on
their direct children that hold such parameters (a LightningModule's own forward is never called;
its model's is). A call opens the range when none is open on its thread; the module that opened it
closes it. A module in eval mode, a call inside a backward pass (activation checkpointing's
recomputation) or one that torch.compile traces emits nothing. The first iteration has no forward
range: it is warm-up, which the analysis skips. ``torch.save`` saves a hooked module without our
hooks (``detached``), so a checkpoint never names perfgate. ``PERFGATE_AUTOSTEP_FORWARD=0`` turns
it off.
"""
from __future__ import annotations

import contextlib
import gc
import sys

from perfgate.capture.autostep import hooks
from perfgate.records.autostep_ranges import FORWARD, note

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any

    from perfgate.capture.autostep.installation import Installation

__all__ = ["ENV_VAR", "detached", "discover", "hooked", "outermost_trained", "post_hook", "pre_hook", "watch"]

ENV_VAR = "PERFGATE_AUTOSTEP_FORWARD"
"""``0`` (or ``false``/``no``/``off``) turns the forward hooks off."""


def _trained(module: Any) -> bool:
    return bool(getattr(module, "training", False)) and any(p.requires_grad for p in module.parameters())


def outermost_trained(modules: list[Any]) -> list[Any]:
    """Of ``modules`` (torch modules), those in training mode holding parameters that need gradients
    and inside no other of ``modules``, then their direct children that hold such parameters."""
    inside: set[int] = set()
    for m in modules:
        inside.update(id(c) for c in m.modules() if c is not m)
    roots = [m for m in modules if id(m) not in inside and _trained(m)]
    children = [c for m in roots for c in m.children() if _trained(c)]
    return list({id(m): m for m in [*roots, *children]}.values())


_start: Any = None      # the forward range's start and end, bound by ``discover``
_end: Any = None
_hooked: list[tuple[Any, int, int]] = []   # (module, pre hook id, post hook id) of every hooked module
_watch: Any = None      # told each call that opens a range, while set (perfgate/capture/autostep/inputs.py)


def hooked() -> bool:
    """Whether ``discover`` hooked any module."""
    return bool(_hooked)


def watch(fn: Callable[[tuple[Any, ...], dict[str, Any] | None], None] | None) -> None:
    """Tell ``fn`` the arguments of each call that opens a forward range (None: stop)."""
    global _watch
    _watch = fn


def pre_hook(module: Any, args: Any, kwargs: Any = None) -> None:
    """Open the forward range: no range open on this thread, the module training, no backward
    pass running (a checkpoint's recomputation), not traced by torch.compile. Module level, so
    that pickling a module whose hooks are ours does not fail on a local function."""
    state = hooks.state()
    if state.forward_range is not None or state.backward or not module.training or hooks.is_compiling():
        return
    state.forward_range, state.forward_module = _start(), id(module)
    if _watch is not None:
        _watch(args, kwargs)


def post_hook(module: Any, args: Any, output: Any) -> None:
    """Close the forward range the same module opened."""
    state = hooks.state()
    if state.forward_range is not None and state.forward_module == id(module):
        range_id, state.forward_range = state.forward_range, None
        _end(range_id)


def discover(inst: Installation) -> None:
    """Find the model's outermost trained modules in this process and hook their forward calls."""
    global _start, _end
    module_cls = getattr(sys.modules.get("torch.nn.modules.module"), "Module", None)
    pair = inst.range(FORWARD)
    if module_cls is None or pair is None:
        return
    _start, _end = pair
    inst.own(pre_hook, post_hook)
    # type(), not isinstance(): an object's __class__ can be a property (a deprecated alias that warns)
    targets = outermost_trained([o for o in gc.get_objects() if issubclass(type(o), module_cls)])
    for m in targets:
        try:    # the keyword arguments too (inputs.py); a post hook that closes on an exception too
            pre = m.register_forward_pre_hook(pre_hook, with_kwargs=True)
            post = m.register_forward_hook(post_hook, always_call=True)
        except TypeError:                                               # torch before 2.0
            pre, post = m.register_forward_pre_hook(pre_hook), m.register_forward_hook(post_hook)
        _hooked.append((m, pre.id, post.id))
        inst.undo.append(pre.remove)
        inst.undo.append(post.remove)
    inst.undo.append(_hooked.clear)
    if not targets:
        note("no module in training mode holds parameters that need gradients: no forward ranges")


HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks", "_forward_hooks_always_called",
              "_forward_hooks_with_kwargs")


@contextlib.contextmanager
def detached() -> Iterator[None]:
    """Our hooks taken off every hooked module while the block runs (``torch.save`` of a module:
    a checkpoint must not name perfgate's functions), then put back under the same ids."""
    taken: list[tuple[dict[int, Any], int, Any]] = []
    for m, pre, post in _hooked:
        for name in HOOK_DICTS:
            table = getattr(m, name, None)
            if not isinstance(table, dict):
                continue
            for key in (pre, post):
                if key in table:
                    taken.append((table, key, table.pop(key)))
    try:
        yield
    finally:
        for table, key, value in taken:
            table[key] = value

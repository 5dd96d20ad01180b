"""The batches a program makes itself (perfgate/capture/autostep/install.py): a function of the
training loop that makes them (nanoGPT's ``get_batch``, no DataLoader) runs inside
``perfgate/data_load`` ranges once it is found. Standard library only at import.

Found by what the model takes, not by where the call stands (nanoGPT fetches the next batch after
the forward, as a prefetch): at the first backward pass (perfgate/capture/autostep/forward.py has
just hooked the model) the loop's frames are those of the stack outside torch, perfgate and the
standard library: the one that called ``backward`` and its callers (a ``train_step`` called by the
loop). For a few iterations (the window) a profile function (``sys.setprofile``, this thread only)
keeps the tensors that functions called from those frames return or yield (weak references, the
last few calls); the forward's first tensor argument, when
it is one of them, names the function that made it. The window closes on a match, after
``FORWARDS`` training calls of the model, or at the ``BACKWARDS``-th backward pass. The function
is then wrapped where the loop looks it up: a module-level function in its module's globals (and
the loop's, where imported by name), a method on the class that defines it; a generator function
so that each ``next()`` of the generators it makes from then on runs in the range (the one already
running is left as it is). A function that cannot be wrapped (a closure in a local, a lambda)
gets one note and no range. ``perfgate/input:<module>.<qualname>`` marks the function found.
A program with its own profiler (``sys.getprofile()``) is left alone (one note).
``PERFGATE_AUTOSTEP_INPUTS=0`` turns this off.
"""
from __future__ import annotations

import collections
import functools
import os
import sys
import weakref
from _thread import get_ident

from perfgate.capture.autostep import forward, hooks
from perfgate.records.autostep_ranges import DATA_LOAD, MARK_INPUT, WRAPPED, note

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, FrameType
    from typing import Any

    from perfgate.capture.autostep.installation import Installation

__all__ = ["BACKWARDS", "ENV_VAR", "FORWARDS", "find_batch_function"]

ENV_VAR = "PERFGATE_AUTOSTEP_INPUTS"
"""``0`` (or ``false``/``no``/``off``) turns the search for the program's batch function off."""

FORWARDS = 4     # the window closes after this many training calls of the model ...
BACKWARDS = 4    # ... or at this backward pass (the first one opened it)
RECENT = 4       # returns kept at a time
ITEMS = 16       # items of a tuple, list or dict looked at for tensors
_CO_GENERATOR = 0x20   # inspect.CO_GENERATOR (inspect is too heavy to import at interpreter start)
_OWN = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # perfgate/


def _libraries() -> tuple[str, ...]:
    """Folders whose code is no training loop: torch's, perfgate's, the standard library's."""
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    roots = [_OWN, os.path.dirname(os.__file__)] + ([os.path.dirname(torch_file)] if torch_file else [])
    return tuple(os.path.join(r, "") for r in roots) + ("<frozen ",)


def _tensors(value: Any, tensor: type, depth: int = 0) -> list[Any]:
    """The tensors of ``value``: itself, or inside a tuple, list or dict (two levels down)."""
    if isinstance(value, tensor):
        return [value]
    if depth >= 2:
        return []
    if isinstance(value, dict):
        items = list(value.values())[:ITEMS]
    elif isinstance(value, (tuple, list)):
        items = list(value[:ITEMS])
    else:
        return []
    return [t for v in items for t in _tensors(v, tensor, depth + 1)]


class _Window:
    """The learning window: what the loop's callees returned, matched against the forward's input."""

    def __init__(self, inst: Installation, loop: list[CodeType], tensor: type) -> None:
        self.inst, self.tensor = inst, tensor
        self.loop = loop                              # kept alive: their ids are not reused
        self.loop_ids = {id(code) for code in loop}
        self.thread = get_ident()
        self.libraries = _libraries()
        self.owned = set(inst.codes)
        self.candidate: dict[CodeType, bool] = {}
        # (code, its globals, the class of its self/cls or None, the caller's globals, weak
        # references to its tensors)
        self.recent: collections.deque[tuple[CodeType, dict[str, Any], type | None, dict[str, Any], list[Any]]] = \
            collections.deque(maxlen=RECENT)
        self.forwards = 0
        self.backwards = 1
        self.profile = self._profile    # one bound method: sys.getprofile() is it while ours

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "return":
            return
        back = frame.f_back
        if back is None or id(back.f_code) not in self.loop_ids:
            return
        try:
            self._record(frame, back, arg)
        except Exception as exc:  # noqa: BLE001 - never raise into the user's program
            self.close()
            note(f"stopped looking for the program's batches: {type(exc).__name__}: {exc}")

    def _record(self, frame: FrameType, back: FrameType, value: Any) -> None:
        code = frame.f_code
        ok = self.candidate.get(code)
        if ok is None:
            ok = self.candidate[code] = code not in self.owned and not code.co_filename.startswith(self.libraries)
        if not ok:
            return
        found = _tensors(value, self.tensor)
        if not found:
            return
        owner = None
        first = code.co_varnames[0] if code.co_argcount else ""
        if first in ("self", "cls"):
            local = frame.f_locals.get(first)
            owner = local if first == "cls" and isinstance(local, type) else type(local)
        self.recent.append((code, frame.f_globals, owner, back.f_globals, [weakref.ref(t) for t in found]))

    def forward_call(self, args: tuple[Any, ...], kwargs: dict[str, Any] | None) -> None:
        """A training call of the model (forward.pre_hook): is its first tensor argument a batch?"""
        if get_ident() != self.thread:
            return
        try:
            tensor = self.tensor
            first = next((a for a in args if isinstance(a, tensor)), None)
            if first is None and kwargs:
                first = next((v for v in kwargs.values() if isinstance(v, tensor)), None)
            self.forwards += 1
            hit = None if first is None else next(
                (r for r in reversed(self.recent) if any(ref() is first for ref in r[4])), None)
            if hit is not None or self.forwards >= FORWARDS:
                self.close()
            if hit is not None:
                _wrap(self.inst, *hit[:4])
        except Exception as exc:  # noqa: BLE001 - never raise into the user's program
            self.close()
            note(f"could not wrap the program's batch function: {type(exc).__name__}: {exc}")

    def backward_pass(self) -> None:
        """A backward pass (hooks, at its start): the window closes at the ``BACKWARDS``-th."""
        try:
            self.backwards += 1
            if self.backwards >= BACKWARDS:
                self.close()
        except Exception as exc:  # noqa: BLE001 - never raise into the user's program
            note(f"stopped looking for the program's batches: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        """End the window (idempotent): the profile function off (where ours, on our thread)."""
        global _window
        if _window is self:
            _window = None
        forward.watch(None)
        if self.inst.each_backward == self.backward_pass:
            self.inst.each_backward = None
        self.recent.clear()
        if get_ident() == self.thread and sys.getprofile() is self.profile:
            sys.setprofile(None)


_window: _Window | None = None
_fork_hook = False


def _after_fork() -> None:
    """A child process (a DataLoader worker) does not keep the parent's window open."""
    global _window
    window, _window = _window, None
    if window is not None and sys.getprofile() is window.profile:
        sys.setprofile(None)


def find_batch_function(inst: Installation) -> None:
    """Open the window, from the first backward pass (after forward.discover hooked the model).
    Never raises: a problem is one note."""
    global _window, _fork_hook
    try:
        tensor = getattr(sys.modules.get("torch"), "Tensor", None)
        if tensor is None or _window is not None or not forward.hooked():
            return
        if sys.getprofile() is not None:
            note("a profiler is set (sys.setprofile): the program's own batch function is not looked for")
            return
        libraries = _libraries()
        loop: list[CodeType] = []
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            if not frame.f_code.co_filename.startswith(libraries):
                loop.append(frame.f_code)
            frame = frame.f_back
        if not loop:
            return
        window = _Window(inst, loop, tensor)
        if not _fork_hook and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork)
            _fork_hook = True
        _window = window
        forward.watch(window.forward_call)
        inst.each_backward = window.backward_pass
        inst.undo.append(window.close)
        sys.setprofile(window.profile)
    except Exception as exc:  # noqa: BLE001 - never raise into the user's program
        if _window is not None:
            _window.close()
        note(f"could not look for the program's batch function: {type(exc).__name__}: {exc}")


# --------------------------------------------------------------------------- wrapping


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


class _RangedGenerator:
    """A generator each of whose resumptions (``next``, ``send``, ``throw``) runs in ``ranged``."""

    __slots__ = ("_generator", "_ranged")

    def __init__(self, generator: Any, ranged: Callable[..., Any]) -> None:
        self._generator, self._ranged = generator, ranged

    def __iter__(self) -> _RangedGenerator:
        return self

    def __next__(self) -> Any:
        return self._ranged(next, self._generator)

    def send(self, value: Any) -> Any:
        return self._ranged(self._generator.send, value)

    def throw(self, *args: Any) -> Any:
        return self._ranged(self._generator.throw, *args)

    def close(self) -> None:
        self._generator.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._generator, name)


def _ranged(inst: Installation, fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """``fn`` whose calls (a generator function: its generators' resumptions) are data_load ranges."""
    pair = inst.range(DATA_LOAD)
    if pair is None:
        return None
    start, end = pair
    if not fn.__code__.co_flags & _CO_GENERATOR:
        wrapper = hooks.in_range(fn, "data_load", start, end)
    else:
        ranged = hooks.in_range(_call, "data_load", start, end)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return _RangedGenerator(fn(*args, **kwargs), ranged)

        inst.own(ranged)
    inst.own(wrapper)
    return wrapper


def _wrap(inst: Installation, code: CodeType, globals_: dict[str, Any], owner: type | None,
          loop_globals: dict[str, Any]) -> None:
    """Wrap the function of ``code`` (its globals ``globals_``, its caller's ``loop_globals``) where
    the loop finds it (the module's docstring); a note where it cannot."""
    name = code.co_name
    fn = globals_.get(name)
    places: list[tuple[Any, Any]] = []
    if getattr(fn, "__code__", None) is code:
        places = [(globals_, fn)] + ([(loop_globals, fn)] if loop_globals is not globals_
                                     and loop_globals.get(name) is fn else [])
    elif owner is not None:
        for cls in owner.__mro__:
            raw = cls.__dict__.get(name)
            if getattr(getattr(raw, "__func__", raw), "__code__", None) is code:
                fn, places = getattr(raw, "__func__", raw), [(cls, raw)]
                break
    if not places:
        note(f"the program's batches come from {code.co_qualname if hasattr(code, 'co_qualname') else name} "
             f"({code.co_filename}:{code.co_firstlineno}), which cannot be wrapped (not a module-level "
             "function or a method): no data_load range for them")
        return
    if getattr(fn, WRAPPED, False):
        return
    wrapper = _ranged(inst, fn)     # type: ignore[arg-type]
    if wrapper is None:
        return
    for place, old in places:
        if isinstance(place, dict):
            place[name] = wrapper
            inst.undo.append(functools.partial(place.__setitem__, name, old))
        else:
            new = type(old)(wrapper) if isinstance(old, (staticmethod, classmethod)) else wrapper
            setattr(place, name, new)
            inst.undo.append(functools.partial(setattr, place, name, old))
    inst.mark(f"{MARK_INPUT}:{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', name)}")

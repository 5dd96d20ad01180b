"""NVTX ranges for training loops, on any build of torch, at no measurable cost without nsys.

    from perfgate import nvtx

    with nvtx.range("step"):
        with nvtx.range("forward"):
            ...

The backend is chosen once, when this module is imported:

1. ``torch`` -- torch's own NVTX binding (``torch._C._nvtx``). CUDA builds of torch have it
   even on a machine without a GPU, and nsys records its ranges there too.
2. ``nvtx`` -- the ``nvtx`` package from PyPI, when torch has no binding. (nsys 2022.4 records
   no ranges from it for CPU processes; newer nsys does.)
3. ``noop`` -- nothing is emitted: CPU-only builds of torch without the ``nvtx`` package,
   or ``PERFGATE_NVTX=0`` in the environment.

The public functions are bound to the chosen backend's functions at import, so a call costs
one Python call into the NVTX library (which returns at once when no profiler is attached) and
never re-checks which backend is active. :func:`select` re-reads the environment and rebinds
(tests use it after patching what is importable).
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

__all__ = [
    "Backend",
    "ENV_VAR",
    "backend",
    "choose_backend",
    "end",
    "mark",
    "pop",
    "push",
    "range",
    "select",
    "start",
]

ENV_VAR = "PERFGATE_NVTX"
"""Set to ``0`` (or ``off``/``false``/``no``) to emit no NVTX ranges at all."""

_OFF_VALUES = frozenset({"0", "off", "false", "no"})


@dataclass(frozen=True)
class Backend:
    """The functions one NVTX implementation offers, under one naming."""

    name: str                                   # "torch", "nvtx" or "noop"
    push: Callable[[str], Any]                  # open a nested range on this thread
    pop: Callable[[], Any]                      # close the innermost range of this thread
    start: Callable[[str], Any]                 # open a range that may end on another thread; returns a handle
    end: Callable[[Any], Any]                   # close the range of a handle from ``start``
    mark: Callable[[str], Any]                  # an instantaneous marker


def _noop_push(name: str) -> None:
    return None


def _noop_pop() -> None:
    return None


def _noop_end(handle: Any) -> None:
    return None


NOOP = Backend("noop", _noop_push, _noop_pop, _noop_push, _noop_end, _noop_push)


def _torch_backend() -> Backend | None:
    """torch's compiled NVTX binding, or None on builds without it."""
    try:
        torch_c = importlib.import_module("torch._C")
    except Exception:
        return None
    binding = getattr(torch_c, "_nvtx", None)
    needed = ("rangePushA", "rangePop", "rangeStartA", "rangeEnd", "markA")
    if binding is None or not all(hasattr(binding, attr) for attr in needed):
        return None
    return Backend(
        "torch",
        binding.rangePushA,
        binding.rangePop,
        binding.rangeStartA,
        binding.rangeEnd,
        binding.markA,
    )


def _nvtx_package_backend() -> Backend | None:
    """The PyPI ``nvtx`` package, or None when it is not importable."""
    try:
        package = importlib.import_module("nvtx")
    except Exception:
        return None
    if not all(hasattr(package, attr) for attr in ("push_range", "pop_range", "start_range", "end_range", "mark")):
        return None
    return Backend(
        "nvtx",
        package.push_range,
        package.pop_range,
        package.start_range,
        package.end_range,
        package.mark,
    )


def choose_backend(environ: dict[str, str] | None = None) -> Backend:
    """The backend to use: torch's binding, else the ``nvtx`` package, else no-op.

    ``PERFGATE_NVTX=0`` in ``environ`` (default: ``os.environ``) forces the no-op backend.
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR, "").strip().lower() in _OFF_VALUES:
        return NOOP
    return _torch_backend() or _nvtx_package_backend() or NOOP


class _Range:
    """Context manager of one push/pop range; ``_push``/``_pop`` are rebound by :func:`select`."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _Range:
        _push(self.name)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        _pop()


class _NoopRange:
    """The context manager ``range`` returns when no NVTX is emitted: one shared instance."""

    __slots__ = ()

    def __enter__(self) -> _NoopRange:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


_NOOP_RANGE = _NoopRange()


def _noop_range(name: str) -> _NoopRange:
    return _NOOP_RANGE


# Module-level bindings, replaced by select(). Kept as plain globals so that a call is one lookup.
_active: Backend = NOOP
_push: Callable[[str], Any] = _noop_push
_pop: Callable[[], Any] = _noop_pop
push: Callable[[str], Any] = _noop_push
pop: Callable[[], Any] = _noop_pop
start: Callable[[str], Any] = _noop_push
end: Callable[[Any], Any] = _noop_end
mark: Callable[[str], Any] = _noop_push
range: Callable[[str], Any] = _noop_range  # noqa: A001 - the NVTX name users expect


def select(chosen: Backend | None = None) -> Backend:
    """Bind this module's functions to ``chosen`` (default: :func:`choose_backend`); return it.

    Code that did ``from perfgate.nvtx import push`` keeps the function it imported; code that
    calls ``nvtx.push`` / ``nvtx.range`` through the module sees the new binding.
    """
    global _active, _push, _pop, push, pop, start, end, mark, range
    chosen = choose_backend() if chosen is None else chosen
    _active = chosen
    _push, _pop = chosen.push, chosen.pop
    push, pop, start, end, mark = chosen.push, chosen.pop, chosen.start, chosen.end, chosen.mark
    range = _noop_range if chosen.name == "noop" else _Range
    return chosen


def backend() -> str:
    """Name of the active backend: ``"torch"``, ``"nvtx"`` or ``"noop"``."""
    return _active.name


select()

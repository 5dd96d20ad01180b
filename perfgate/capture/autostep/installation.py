"""The state of autostep in one process (perfgate.capture.autostep.install makes it): torch's NVTX
binding, the import finder, every hook's undo, and how the hooks (perfgate.capture.autostep.hooks,
perfgate.capture.autostep.interludes) emit ranges and marks. It imports neither of them: they take
an Installation, install hands it theirs.

Imports only the standard library at import time (it runs in every process autostep reaches)."""
from __future__ import annotations

import functools
import os
import sys

from perfgate.capture.autostep.post_import import PostImportFinder
from perfgate.records.autostep_ranges import WRAPPED, note

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import CodeType, ModuleType
    from typing import Any

DEBUG_ENV_VAR = "PERFGATE_AUTOSTEP_DEBUG"
"""A file path: every range and mark is also appended to it as ``<pid> start|end|mark <text>`` (tests)."""


class Installation:
    """What perfgate.capture.autostep.install.install set up (the NVTX binding, the finder, every
    hook, so that ``uninstall`` can take it back), and how the hooks emit: ``range(name)`` and
    ``mark``. ``targets``: module name -> its patcher (hooks.TARGETS and interludes.TARGETS)."""

    def __init__(self, targets: Mapping[str, Callable[[Installation, ModuleType], None]], debug_path: str | None,
                 active: Callable[[], bool]) -> None:
        self.debug_path = debug_path
        self.targets = dict(targets)
        self.finder = PostImportFinder(self.targets, self.patch, active)
        self.undo: list[Callable[[], Any]] = []
        self.binding: Any = None
        self.nvtx_missing = False
        self.codes: list[CodeType] = []     # code of every wrapper and hook, see skip_frames
        self.skipped = 0                     # how many of them torch.compile has been told to skip
        self.optimizer_number: Callable[[Any], int] | None = None   # set by the optimizer hook
        self.first_backward: Callable[[], None] | None = None       # run once, at the first backward pass
        self.each_backward: Callable[[], None] | None = None        # run at each backward pass while set

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

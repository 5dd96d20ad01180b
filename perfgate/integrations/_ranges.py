"""The NVTX ranges a callback has open, so that hooks close exactly what they opened."""
from __future__ import annotations

from perfgate import nvtx


class OpenRanges:
    """A stack of push/pop ranges opened by hooks on the training thread.

    Hooks fire in an order the framework decides; an exception can skip the hook that would
    close a range. Every pop here matches one of this object's pushes, so a missed hook never
    pops a range that the user's own code opened, and :meth:`close_all` (from an end or
    exception hook, or the next step's start) repairs the nesting. ``nvtx.push``/``nvtx.pop``
    are looked up at each call so :func:`perfgate.nvtx.select` (and tests) can rebind them.
    """

    __slots__ = ("_names",)

    def __init__(self) -> None:
        self._names: list[str] = []

    @property
    def names(self) -> tuple[str, ...]:
        """Open ranges, outermost first."""
        return tuple(self._names)

    @property
    def top(self) -> str | None:
        """The innermost open range, or None."""
        return self._names[-1] if self._names else None

    def push(self, name: str) -> None:
        nvtx.push(name)
        self._names.append(name)

    def pop_to(self, depth: int) -> None:
        """Close ranges until ``depth`` remain open (innermost first)."""
        while len(self._names) > depth:
            self._names.pop()
            nvtx.pop()

    def pop_if(self, name: str) -> bool:
        """Close the innermost range if it is ``name``; whether it was."""
        if self.top != name:
            return False
        self.pop_to(len(self._names) - 1)
        return True

    def close_all(self) -> None:
        self.pop_to(0)

    def __len__(self) -> int:
        return len(self._names)

"""Post-import hooks: run a function on a module right after it executes at its first import,
without importing it (perfgate.capture.autostep.install patches torch's modules this way, so that a process
that never imports torch pays nothing).

Standard library only, and cheap to import: it runs in every Python process autostep is on in.
"""
from __future__ import annotations

import sys
from _thread import _local

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Container
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any


class PostImportFinder:
    """A ``sys.meta_path`` finder for the modules named in ``targets`` only: it finds them through
    the other finders and wraps their loader so that ``on_loaded(module)`` runs right after the
    module executes, while ``active()`` (the hook is still installed) says so."""

    def __init__(self, targets: Container[str], on_loaded: Callable[[ModuleType], None],
                 active: Callable[[], bool]) -> None:
        self._targets = targets
        self._on_loaded = on_loaded
        self._active = active
        self._busy = _local()  # names being looked up on this thread (another hook finder may ask us back)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if fullname not in self._targets:
            return None
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = None
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if finder is self or find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _HookedLoader(spec.loader, self._on_loaded, self._active)
        return spec


class _HookedLoader:
    """Delegates to the real loader; after ``exec_module`` runs the hook. The module keeps the
    real loader in ``__loader__`` and ``__spec__.loader``."""

    def __init__(self, loader: Any, on_loaded: Callable[[ModuleType], None], active: Callable[[], bool]) -> None:
        self._loader = loader
        self._on_loaded = on_loaded
        self._active = active

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        self._loader.exec_module(module)
        if self._active():  # not uninstalled meanwhile
            self._on_loaded(module)

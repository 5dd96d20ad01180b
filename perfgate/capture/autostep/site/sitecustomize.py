"""perfgate autostep's ``sitecustomize``: Python imports it at start-up when this folder is on
``PYTHONPATH`` (perfgate puts it there for the processes it profiles).

With ``PERFGATE_AUTOSTEP=1`` (or true/yes/on) it calls ``perfgate.capture.autostep.install.install()``; with any
other value, or none, it installs nothing. Either way it then runs the ``sitecustomize`` that
Python would have found later on ``sys.path`` (e.g. Debian's ``/usr/lib/python3.X/sitecustomize.py``
or the user's own), which becomes ``sys.modules["sitecustomize"]``. It runs once per process
even when another chaining ``sitecustomize`` finds it again, and never raises: a problem is one
line on stderr starting ``perfgate autostep:``. Keep this file free of syntax newer than 3.6:
any Python started with this environment reads it.
"""
import os
import sys

_MARKER = "_perfgate_autostep_sitecustomize"
_ON_VALUES = ("1", "true", "yes", "on")


def _note(message):
    # type: (str) -> None
    try:
        sys.stderr.write("perfgate autostep: " + message + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _install():
    # type: () -> None
    if os.environ.get("PERFGATE_AUTOSTEP", "").strip().lower() not in _ON_VALUES:
        return
    try:
        from perfgate.capture.autostep import install as autostep
    except ImportError as exc:
        _note("perfgate is not importable by %s (%s); no automatic NVTX ranges" % (sys.executable, exc))
        return
    autostep.install()


def _chain():
    # type: () -> None
    """Run the next ``sitecustomize`` on sys.path (skipping this folder), if there is one."""
    import importlib.machinery
    import importlib.util

    here = os.path.realpath(os.path.dirname(os.path.abspath(__file__)))
    path = [p for p in sys.path if os.path.realpath(os.path.abspath(p or os.curdir)) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    if spec.origin and os.path.realpath(spec.origin) == os.path.realpath(os.path.abspath(__file__)):
        return
    module = importlib.util.module_from_spec(spec)
    ours = sys.modules.get("sitecustomize")
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        if ours is not None:
            sys.modules["sitecustomize"] = ours
        _note("error in %s: %s: %s" % (spec.origin, type(exc).__name__, exc))


def _main():
    # type: () -> None
    if __name__ != "sitecustomize" or _MARKER in sys.modules:  # imported as perfgate.capture.autostep.site...
        return
    sys.modules[_MARKER] = sys.modules.get(__name__) or sys
    for step in (_install, _chain):
        try:
            step()
        except Exception as exc:
            _note("%s failed: %s: %s" % (step.__name__.lstrip("_"), type(exc).__name__, exc))


_main()

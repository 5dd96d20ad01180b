"""Domain exceptions. The library raises these; only the CLI and the pytest plugin turn them
into messages and exit codes (``perfgate: error: ...`` and exit 2 for every PerfgateError)."""
from __future__ import annotations


class PerfgateError(Exception):
    """Base of every error perfgate reports to a user. Its message names the file or option
    and what is wrong; the CLI prints it and exits with code 2."""

    exit_code = 2


class ConfigError(PerfgateError):
    """A bad option, pyproject.toml [tool.perfgate] value or workload declaration."""


class TraceError(PerfgateError):
    """An nsys export perfgate cannot use: not SQLite, truncated, no NVTX, no step ranges."""


class NsysNotFoundError(PerfgateError):
    """No nsys executable was found where perfgate looks."""


class CaptureError(PerfgateError):
    """Running a workload under nsys failed; the message says how, and where the artifacts are."""


class WorkloadFailedError(CaptureError):
    """The workload exited non-zero (the message carries the tail of its output)."""


class CaptureTimeoutError(CaptureError):
    """The workload ran past its timeout; its whole process tree was killed."""


class ImporterError(CaptureError):
    """nsys left a .qdstrm but no .nsys-rep: its importer could not run."""


class BaselineError(PerfgateError):
    """A baseline file that cannot be read: bad JSON, unknown format version, wrong workload."""


class StaleBaselineError(BaselineError):
    """A baseline this perfgate cannot use as it is (an older or a newer format, another workload's or
    machine's file) whose fix is to record it again: its message ends with "re-record it", and the
    command in use adds how (``perfgate baseline update`` or ``pytest --perfgate-update-baselines``)."""


def os_error_message(exc: OSError, path: object = None) -> str:
    """``<file>: <what went wrong>`` for an OSError (``No space left on device``, ``Permission
    denied``); ``path``: the file at hand when the error names none (a failed write)."""
    where = exc.filename if exc.filename is not None else (path or "a file")
    return f"{where}: {exc.strerror or exc}"

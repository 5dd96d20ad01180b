"""``perfgate`` command line: the table of commands and the dispatch. Each command lives in
``perfgate/commands/<module>.py`` with ``add_parser(subparsers)`` (which sets ``func(args) -> int``
with ``parser.set_defaults``) and its ``cmd_*`` function; only the command being run is imported.

Exit codes: 0 pass, 1 regression, 2 usage or infrastructure error (``perfgate: error: <message>``),
130 interrupted (Ctrl-C), 143 terminated (SIGTERM); every process perfgate started has ended by then.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from perfgate.commands.output import say_error
from perfgate.errors import ConfigError, PerfgateError, StaleBaselineError

EXIT_ERROR = 2
EXIT_BROKEN_PIPE = 141   # 128 + SIGPIPE, what a shell reports for a program its pipe's reader left
#: command -> (its module, its help line: ``perfgate --help`` lists a command without importing it)
COMMANDS = {
    "run": ("run", "run workloads under nsys and compare with their baselines"),
    "analyze": ("analyze", "analyze one nsys trace (.sqlite or .nsys-rep), or one per node of a job"),
    "compare": ("compare", "compare two traces (or job folders), result JSONs or baseline files"),
    "baseline": ("baseline", "manage baselines"),
    "list": ("list_workloads", "list the workloads perfgate discovers"),
    "ab": ("ab", "A/B: measure two commits interleaved in this job and compare them"),
    "calibrate": ("calibrate", "measure false-alarm and detection rates of the gate on this machine"),
    "report": ("report", "re-render a perfgate-report.json: summary, job summary, annotations, commit statuses"),
    "history": ("history", "the step-time trend of a workload's gated runs (history_dir)"),
    "init": ("init_repo", "set up this repository for the gate: pyproject, baselines/, a GitHub workflow, .gitignore"),
    "bisect": ("bisect", "find the commit that made a workload slower (binary search of A/B measurements)"),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; with ``argv`` given, only the command it names is imported (the others are
    listed by their help line)."""
    parser = argparse.ArgumentParser(
        prog="perfgate", description="CI performance regression gate for PyTorch training under Nsight Systems.")
    from perfgate import __version__

    parser.add_argument("--version", action="version", version=f"perfgate {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    wanted = None if argv is None else next((a for a in argv if not a.startswith("-")), "")
    for name, (module_name, help_line) in COMMANDS.items():
        if wanted is not None and name != wanted:
            sub.add_parser(name, help=help_line, add_help=False)
            continue
        module_path = f"perfgate.commands.{module_name}"
        try:
            module = importlib.import_module(module_path)
        except ImportError as exc:   # a missing dependency: said, never a command that vanishes
            if wanted == name:
                raise ConfigError(f"perfgate {name} cannot run: importing {module_path} failed ({exc}); "
                                  "install perfgate's dependencies (pip install -e .)") from exc
            sub.add_parser(name, help=f"{help_line} (unavailable: {exc})", add_help=False)
            continue
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command (exit codes above; SIGHUP 129); every process it started has ended when this
    returns (perfgate.system.process_tree). Without ``argv`` (the ``perfgate`` program itself) the
    process then ends at once (:func:`exit_now`) rather than returning."""
    if argv is None:
        import gc

        # an analysis makes many objects and few reference cycles: collect every 10,000
        # allocations rather than every 700 (about 150 collections fewer at 10^6 GPU ops)
        gc.set_threshold(10_000, *gc.get_threshold()[1:])
    code = _main(argv)
    if argv is None:
        exit_now(code)
    return code


def exit_now(code: int) -> None:
    """End the process with ``code`` once the exit handlers have run and stdout and stderr are
    flushed, without tearing the interpreter down: freeing numpy's, pandas's and DuckDB's modules
    one object at a time takes about 0.1 s, as long as a small analysis. Returns (the process
    goes on to end normally) while another thread is still running."""
    import atexit
    import threading

    if threading.active_count() > 1:
        return
    atexit._run_exitfuncs()   # perfgate.system.process_tree's stop_all among them
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: let the interpreter report it as it would
        return
    os._exit(code)


def _main(argv: Sequence[str] | None) -> int:
    from perfgate.system.process_tree import EXIT_INTERRUPTED, Terminated, stop_all, terminate_raises

    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(argv)      # a Ctrl-C while it imports a command or reads the options: 130,
        args = parser.parse_args(argv)   # not a traceback
        with terminate_raises():
            return int(args.func(args))
    except PerfgateError as exc:        # a stale baseline's fix is a recording, with this command
        say_error(f"{exc}: perfgate baseline update" if isinstance(exc, StaleBaselineError) else exc)
        return EXIT_ERROR
    except BrokenPipeError:  # whoever read stdout went away (`perfgate analyze | head`): end quietly
        stop_all()
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # a full disk, a file perfgate may not read or write
        say_error(f"{exc.filename if exc.filename is not None else 'a file'}: {exc.strerror or exc}")
        return EXIT_ERROR
    except Terminated as exc:
        stop_all()
        print(f"perfgate: terminated (signal {exc.signum})", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        stop_all()
        print("perfgate: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug: exit 2, never 1 (a regression), one line rather than a traceback
        import traceback

        from perfgate.system.process_tree import swallowed_interrupt

        stop_all()
        interrupt = swallowed_interrupt(exc)
        if interrupt is not None:   # a Ctrl-C or SIGTERM that DuckDB turned into an error
            signum = interrupt.signum if isinstance(interrupt, Terminated) else None
            print(f"perfgate: terminated (signal {signum})" if signum else "perfgate: interrupted", file=sys.stderr)
            return 128 + signum if signum else EXIT_INTERRUPTED
        if os.environ.get("PERFGATE_DEBUG", "") not in ("", "0"):
            traceback.print_exc()
        say_error(f"internal error (a bug in perfgate, please report it): {type(exc).__name__}: {exc} "
                  "(PERFGATE_DEBUG=1 prints the traceback)")
        return EXIT_ERROR


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush of a closed pipe is silent."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):
        pass

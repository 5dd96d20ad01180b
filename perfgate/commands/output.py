"""What every ``perfgate`` command prints: a line made inert for a terminal and a CI log (names and
messages come from the workload's trace, output and files), and ``perfgate: error: <message>``
with any secret of this environment redacted."""
from __future__ import annotations

import os
import sys
from typing import Any, TextIO


def say(text: str, stream: TextIO | None = None) -> None:
    """Print ``text`` made inert (perfgate.report.escape.terminal_text) to ``stream`` (stdout)."""
    from perfgate.report.escape import terminal_text

    print(terminal_text(text), file=stream or sys.stdout, flush=True)


def say_error(message: Any) -> None:
    """Print ``perfgate: error: <message>`` to stderr, the environment's secrets redacted."""
    from perfgate.system.secrets import redact_text, secret_values
    from perfgate.report.escape import terminal_text

    print(f"perfgate: error: {terminal_text(redact_text(str(message), secret_values(os.environ)))}", file=sys.stderr)

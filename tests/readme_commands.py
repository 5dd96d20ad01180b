"""The commands README.md shows to be run: the lines that start with ``$ `` in its ```console
blocks, in order (tests/project/test_readme_commands.py checks them against the parser,
tests/commands/test_init.py runs them in a fresh repository)."""
from __future__ import annotations

import shlex
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def console_commands(text: str | None = None) -> list[list[str]]:
    """Each ``$ `` line of each ```console block, split as a shell would (comments dropped)."""
    text = README.read_text(encoding="utf-8") if text is None else text
    commands, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            inside = stripped == "```console"
            continue
        if inside and stripped.startswith("$ "):
            commands.append(shlex.split(stripped[2:], comments=True))
    return commands


def perfgate_commands(text: str | None = None) -> list[list[str]]:
    """The console commands that run ``perfgate``, without the program name."""
    return [c[1:] for c in console_commands(text) if c and c[0] == "perfgate"]

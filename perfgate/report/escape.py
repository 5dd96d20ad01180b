"""Escaping for GitHub-flavoured Markdown: every name, message and path a report shows is text
the workload, its trace or a result file controls, so none of it may become Markdown or HTML.

- :func:`md_code`: a code span (names, paths) with a backtick fence longer than any run inside,
  newlines and control characters folded to spaces: nothing in it is Markdown or HTML.
- :func:`md_text`: plain text, line by line: HTML's ``<``, ``>``, ``&`` as entities, inline
  Markdown (`` ` ``, ``*``, ``_`` at word edges, ``[``, ``]``, ``~``, ``!``, ``|``, ``\\``)
  backslash-escaped, and a line that would open a block (``#`` heading, ``>`` quote, ``-``/``+``
  list or setext underline, ``1.`` list) escaped at its start.
  An ``@`` gets a zero-width space after it, so a name or message never mentions (notifies) a
  GitHub user or team in a job summary or pull-request comment.
- :func:`md_cell_text`: :func:`md_text` on one line, for a table cell (the table row itself
  escapes ``|``; see report/markdown.py).
- :func:`terminal_text`: text for a terminal or a CI log: control characters (escape sequences
  that recolour, move the cursor or clear the screen; a carriage return that overwrites a line)
  shown as ``\\xNN``, and what a GitHub Actions runner would take for a workflow command (a line
  starting with ``::`` after its indentation, ``##[`` anywhere) broken by a zero-width space.
"""
from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_NEWLINES = re.compile(r"\r\n|\r|\n")
_INLINE = re.compile(r"([\\`*\[\]~!])")
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_BLOCK_START = re.compile(r"^(\s{0,3}\d*)([#=+.)-])")


_TERMINAL_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_WORKFLOW_COMMAND = re.compile(r"^([ \t]*)::", re.M)
ZERO_WIDTH_SPACE = "\u200b"


def terminal_text(text: object) -> str:
    """``text`` as it may be printed: inert in a terminal and in a GitHub Actions log (where
    the runner reads ``::error ...::``, ``::add-mask::``, ``::stop-commands::`` and ``##[...]``
    from any line of the job's output, even indented)."""
    out = _TERMINAL_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(text))
    out = _WORKFLOW_COMMAND.sub(lambda m: f"{m.group(1)}:{ZERO_WIDTH_SPACE}:", out)
    return out.replace("##[", f"#{ZERO_WIDTH_SPACE}#[")


def _controls_to_spaces(text: str) -> str:
    return _CONTROL.sub(" ", text.replace("\t", " "))


def md_code(text: object) -> str:
    """``text`` as one inline code span (``\\`name\\```), safe for any content."""
    body = _controls_to_spaces(_NEWLINES.sub(" ", str(text)))
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if body.startswith(("`", " ")) or body.endswith(("`", " ")) else ""
    return f"{fence}{pad}{body}{pad}{fence}"


def _inline(line: str, pipes: bool) -> str:
    line = line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    line = _INLINE.sub(r"\\\1", line)
    line = _EDGE_UNDERSCORE.sub(r"\\_", line).replace("@", "@" + ZERO_WIDTH_SPACE)
    return line.replace("|", "\\|") if pipes else line


def md_text(text: object) -> str:
    """Multi-line plain text as Markdown that renders exactly that text (line breaks kept)."""
    lines = _NEWLINES.split(_controls_to_spaces(str(text)))
    return "\n".join(_BLOCK_START.sub(r"\1\\\2", _inline(line, pipes=True)) for line in lines)


def md_cell_text(text: object) -> str:
    """One line of plain text for a table cell (newlines folded; pipes left to the row)."""
    return _inline(_controls_to_spaces(_NEWLINES.sub(" ", str(text))), pipes=False)

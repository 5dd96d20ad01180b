"""Redacting secrets in an nsys SQLite export in place (perfgate.capture.redaction.launch_folder says when).

Every text value of every table goes through perfgate.system.secrets.find_secrets (known secret values,
secret-named environment entries, credential shapes) and is rewritten with ``[REDACTED]``; values
found by their variable's name are searched for everywhere in a second pass; ``VACUUM`` then
rewrites the file so that no free page keeps the old bytes, and a byte scan confirms it.
"""
from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.system.secrets import (
    Found, MIN_SECRET_LENGTH, file_contains, find_secrets, is_harmless, is_searchable,
    public_environment_values, redact_text, withhold,
)


def withhold_quietly(path: Path, reason: str) -> Path:
    """perfgate.system.secrets.withhold without a Python warning: the pipeline reports withheld files."""
    return withhold(path, reason, warn=False)


@dataclass
class _Scan:
    """What one pass over an SQLite file found."""

    found: dict[Found, None] = field(default_factory=dict)
    public: set[str] = field(default_factory=set)


def text_columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return [(t, r[1]) for t in tables for r in conn.execute(f'PRAGMA table_info("{t}")')]


def _sqlite_pass(conn: sqlite3.Connection, known: Sequence[str], write: bool) -> _Scan:
    """Find (and with ``write``, redact) the secrets in every text value of every table."""
    scan = _Scan()
    memo: dict[str, str] = {}

    def redact(value: str | bytes | int | float | None) -> str | bytes | int | float | None:
        if not isinstance(value, str):
            return value
        if value not in memo:
            hits = find_secrets(value, known)
            scan.found.update(dict.fromkeys(hits))
            scan.public |= public_environment_values(value)
            memo[value] = redact_text(value, known) if hits else value
        return memo[value]

    conn.create_function("perfgate_redact", 1, redact, deterministic=True)
    for table, column in text_columns(conn):
        c = f'"{column}"'
        where = f"typeof({c}) = 'text' AND perfgate_redact({c}) IS NOT {c}"
        if write:
            conn.execute(f'UPDATE "{table}" SET {c} = perfgate_redact({c}) WHERE {where}')
        else:
            conn.execute(f'SELECT count(*) FROM "{table}" WHERE {where}').fetchone()
    return scan


def scan_sqlite(path: Path, known: Sequence[str] = (), *, write: bool = False) -> list[Found]:
    """The secrets in the SQLite file ``path`` (with ``write``: redacted in place, in two passes so
    that a value found by its variable's name is also redacted where it appears without it, then
    ``VACUUM``), without the harmless ones (perfgate.system.secrets.is_harmless: a path, a value a
    non-secret variable holds too), which are redacted all the same. Raises sqlite3.Error for a
    file that is not SQLite."""
    uri = f"file:{path}" if write else f"file:{path}?mode=ro"
    conn = sqlite3.connect(uri, uri=True)
    try:
        with conn:
            scan = _sqlite_pass(conn, known, write)
            learned = _learned_values(scan, known)
            if learned:
                scan.found.update(_sqlite_pass(conn, [*known, *learned], write).found)
        if write and scan.found:
            conn.execute("VACUUM")
    finally:
        conn.close()
    return [f for f in scan.found if f.secret in known or not is_harmless(f.secret, scan.public)]


def _learned_values(scan: _Scan, known: Sequence[str]) -> list[str]:
    """Secret values found by name that are worth searching for on their own."""
    values = {f.secret for f in scan.found} - set(known)
    return sorted((v for v in values if is_searchable(v, scan.public)), key=lambda v: (-len(v), v))


def needles(found: Iterable[Found], known: Iterable[str]) -> list[bytes]:
    """Byte strings that must not remain in a cleaned file: each found secret in its context, and
    the searchable secret values, in UTF-8 and UTF-16-LE."""
    texts = {f.context for f in found if len(f.context) >= MIN_SECRET_LENGTH}
    texts |= {f.secret for f in found if len(f.secret) >= MIN_SECRET_LENGTH and f.secret == f.context}
    texts |= {v for v in known if len(v) >= MIN_SECRET_LENGTH}
    return sorted({t.encode(enc) for t in texts for enc in ("utf-8", "utf-16-le")}, key=len, reverse=True)


def clean_sqlite(path: Path, known: Sequence[str]) -> tuple[list[Found], Path | None]:
    """Redact ``path`` in place and check its bytes: (what was found, the withheld note or None)."""
    try:
        found = scan_sqlite(path, known, write=True)
    except sqlite3.Error as exc:
        return [], withhold_quietly(path, f"it could not be checked for secrets (SQLite: {exc})")
    for suffix in ("-journal", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if file_contains(path, needles(found, known)):
        return found, withhold_quietly(path, "a secret remained in it after redaction")
    return found, None

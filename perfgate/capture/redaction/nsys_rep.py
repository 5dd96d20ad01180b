"""Masking secrets in an ``.nsys-rep`` in place, and proving it worked
(perfgate.capture.redaction.launch_folder says when).

The report is compressed, but nsys 2022.4 keeps these strings as literal bytes (LZ4-style literal
runs and back-references), so each secret is overwritten by ``*`` of the same length: whole where
its context occurs whole, else its longest occurring prefix and suffix, and every REVEAL_WINDOW-byte
piece of it anywhere. The masked report is kept only when nsys exports it again, neither that
export nor the masked report holds REVEAL_WINDOW characters of a secret in a row, and the strings
the trace is read by (NVTX ranges, CUDA names, thread names) are unchanged; otherwise it is
withheld and the cleaned ``.sqlite`` stays.
"""
from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from perfgate.system.secrets import MIN_SECRET_LENGTH, REDACTED, Found, find_secrets
from perfgate.capture.redaction.sqlite_export import scan_sqlite, text_columns, withhold_quietly

EXPORT_TIMEOUT_S = 600
STRING_REFERENCES = frozenset({"textId", "nameId", "shortName", "demangledName", "mangledName", "domainId"})
REVEAL_WINDOW = 8          # characters of a secret in a row that a cleaned report may not hold
EXPORT_TABLES = frozenset({"EXPORT_META_DATA", "META_DATA_EXPORT"})   # the export's own time and file names


_PRINTABLE_RUN = re.compile(rb"[\x20-\x7e]{%d,}" % MIN_SECRET_LENGTH)
# What any secret find_secrets recognises holds (a NAME=value, a URL, a token prefix): runs
# without any of these are not worth its regular expressions.
_CANDIDATE = re.compile(rb"[_=:-]|AKIA|ASIA|eyJ|earer ")
# Secrets found by their variable's name (NAME=value): the report's environment blocks, which its
# export holds too (and so are masked anyway); in compressed bytes such a match is mostly chance.
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=.*", re.S)


def found_in_report(data: bytes) -> list[Found]:
    """Credential-shaped values (by their shape, not a variable's name) in the report's own
    literal bytes, read as printable runs: the report holds strings its SQLite export does not,
    such as the profiled process's command line (a token passed as a workload argument). A run's end is
    uncertain by a byte (the next field's tag may be a printable one, which a token's pattern
    would take in), so the last character of each is left unmasked: one character reveals nothing,
    and masking a tag would break the report."""
    found = [f for m in _PRINTABLE_RUN.finditer(data) if _CANDIDATE.search(m.group())
             for f in find_secrets(m.group().decode("ascii")) if not _ASSIGNMENT.fullmatch(f.context)]
    return [Found(f.context[:-1] if f.context.endswith(f.secret) else f.context, f.secret[:-1])
            for f in found if len(f.secret) > MIN_SECRET_LENGTH]


def _mask(context: bytes, secret: bytes) -> tuple[bytes, int, int]:
    """(``context`` with ``secret`` overwritten by ``*``, where the secret starts, where it ends)."""
    at = context.index(secret)
    return context[:at] + b"*" * len(secret) + context[at + len(secret):], at, at + len(secret)


def _longest_present(data: bytes, context: bytes, from_start: bool) -> int:
    """The length of the longest prefix (or suffix) of ``context`` that occurs in ``data``."""
    low, high = 0, len(context)
    while low < high:                       # every shorter piece of a present piece is present too
        mid = (low + high + 1) // 2
        piece = context[:mid] if from_start else context[len(context) - mid:]
        low, high = (mid, high) if piece in data else (low, mid - 1)
    return low


def _partial(data: bytes, context: bytes, secret: bytes) -> bytes:
    """``data`` with the longest prefix and the longest suffix of ``context`` that occur in it masked
    where they overlap the secret: a compressed stream holds a string as a literal run plus
    back-references to bytes that occur earlier in the stream anyway."""
    masked, lo, hi = _mask(context, secret)
    for from_start in (True, False):
        n = _longest_present(data, context, from_start)
        start = 0 if from_start else len(context) - n
        covered = min(start + n, hi) - max(start, lo)
        if n >= MIN_SECRET_LENGTH and covered >= min(len(secret), 4):
            data = data.replace(context[start:start + n], masked[start:start + n])
    return data


def _essential(found: Iterable[Found]) -> list[Found]:
    """The parts worth masking in a compressed stream: for a secret that holds credential-shaped
    parts (a secret-named variable's URL with a password), only those parts, so that fewer bytes
    other strings may back-reference change."""
    out: list[Found] = []
    for f in found:
        inner = [g.secret for g in find_secrets(f.secret) if g.secret != f.secret and g.secret in f.context]
        out += [Found(f.context, secret) for secret in inner] if inner else [f]
    return out


def _mask_windows(data: bytes, secrets: Iterable[str]) -> bytes:
    """``data`` with every occurrence of any REVEAL_WINDOW-byte piece of a secret overwritten by
    ``*``: the literal runs a compressed stream keeps of a secret it split with back-references."""
    pieces = {s.encode()[i:i + REVEAL_WINDOW] for s in secrets if len(s.encode()) >= REVEAL_WINDOW
              for i in range(len(s.encode()) - REVEAL_WINDOW + 1)}
    pieces = {p for p in pieces if b"*" not in p}
    if not pieces:
        return data
    starts = re.compile(b"(?=(" + b"|".join(re.escape(p) for p in sorted(pieces)) + b"))")
    out = bytearray(data)
    for m in starts.finditer(data):
        out[m.start(1):m.end(1)] = b"*" * (m.end(1) - m.start(1))
    return bytes(out)


def mask_bytes(data: bytes, found: Iterable[Found], known: Iterable[str]) -> bytes:
    """``data`` with every found secret (in its context) and known value overwritten by ``*`` of
    the same byte length; where a context does not occur whole (a compressed stream), its longest
    occurring prefix and suffix are masked over the secret, and so is every REVEAL_WINDOW-byte
    piece of a secret anywhere. Pieces shorter than MIN_SECRET_LENGTH are left alone (too likely to
    match unrelated compressed bytes)."""
    wanted = _essential([*found, *(Found(v, v) for v in known)])
    wanted += [Found(f.secret, f.secret) for f in wanted]     # the secret alone, where its context is split
    pairs = {(f.context.encode(), f.secret.encode()) for f in wanted if len(f.context.encode()) >= MIN_SECRET_LENGTH}
    for context, secret in sorted(pairs, key=lambda p: -len(p[0])):
        if context in data:
            data = data.replace(context, _mask(context, secret)[0])
        else:
            data = _partial(data, context, secret)
    return _mask_windows(data, {f.secret for f in wanted})


def _protected(conn: sqlite3.Connection) -> set[tuple[str, str, int]]:
    """Keys (table, column, rowid) of the strings a trace is read by: NVTX range texts, and the
    StringIds rows that NVTX events, CUDA activity (kernel, API call, memcpy names) and thread
    names refer to."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    keys: set[tuple[str, str, int]] = set()
    ids: set[int] = set()
    for table in sorted(t for t in tables if t == "NVTX_EVENTS" or t.startswith("CUPTI_ACTIVITY_KIND_")
                        or t == "ThreadNames"):
        for column in {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')} & STRING_REFERENCES:
            ids |= {v for (v,) in conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}"') if isinstance(v, int)}
        if table == "NVTX_EVENTS":
            keys |= {(table, "text", r) for (r,) in conn.execute('SELECT rowid FROM NVTX_EVENTS WHERE text IS NOT NULL')}
    if "StringIds" in tables:
        keys |= {("StringIds", "value", i) for i in ids}
    return keys


def _texts(path: Path, only_protected: bool = False) -> dict[tuple[str, str, int], str]:
    """Every text value of an SQLite file by (table, column, rowid) (or those :func:`_protected`)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        keep = _protected(conn) if only_protected else None
        out: dict[tuple[str, str, int], str] = {}
        for table, column in text_columns(conn):
            try:
                rows = conn.execute(f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\'')
            except sqlite3.OperationalError:    # a table without rowid
                continue
            out.update({(table, column, rowid): value for rowid, value in rows
                        if keep is None or (table, column, rowid) in keep})
        return out
    finally:
        conn.close()


def _collateral(cleaned: Path, reexport: Path) -> list[str]:
    """Strings the trace is read by (:func:`_protected`) that masking changed although they held no
    secret: a back-reference of the compressed report into masked bytes. ``cleaned``: the redacted
    export of the original. (Other strings, such as process names and the recorded environments,
    may show a ``*`` where they shared bytes with a secret.)"""
    before, after = _texts(cleaned, only_protected=True), _texts(reexport)
    return [after[key] for key, value in before.items()
            if key[0] not in EXPORT_TABLES and REDACTED not in value and key in after and after[key] != value]


def _leaks(found: Iterable[Found]) -> list[Found]:
    """What a re-export of a masked report still holds: secrets not even partly masked."""
    return [f for f in found if "***" not in f.secret]


def _pieces(secrets: Iterable[str]) -> re.Pattern[bytes] | None:
    """A pattern for every REVEAL_WINDOW-character piece of each secret (a shorter one whole, from
    4 characters), in UTF-8 and UTF-16-LE: a masked report may keep a few characters of a secret
    that a back-reference copies from unrelated bytes, never this many in a row."""
    pieces: set[bytes] = set()
    for secret in secrets:
        n = min(REVEAL_WINDOW, len(secret))
        for i in range(len(secret) - n + 1 if n >= 4 else 0):
            piece = secret[i:i + n]
            if "*" not in piece:
                pieces |= {piece.encode(), piece.encode("utf-16-le")}
    if not pieces:
        return None
    return re.compile(b"|".join(re.escape(p) for p in sorted(pieces, key=len, reverse=True)))


def _reveals(path: Path, pattern: re.Pattern[bytes] | None, chunk_bytes: int = 1 << 22) -> bool:
    """Whether the file's bytes hold a piece of a secret (streamed, overlap-safe)."""
    if pattern is None:
        return False
    overlap, tail = 4 * REVEAL_WINDOW, b""
    with path.open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            window = tail + chunk
            if pattern.search(window):
                return True
            tail = window[-overlap:]
    return False


def reexport_sqlite(report: Path, out: Path, nsys: Path) -> bool:
    """Whether nsys exported ``report`` to ``out`` (False on any failure: a report to withhold)."""
    try:
        proc = subprocess.run(
            [str(nsys), "export", "--type", "sqlite", "--force-overwrite", "true", "--output", str(out), str(report)],
            capture_output=True, timeout=EXPORT_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0 and out.is_file()


def clean_report(report: Path, found: Sequence[Found], known: Sequence[str], nsys: Path | None) -> Path | None:
    """Mask the secrets in the ``.nsys-rep`` in place when its re-export proves it clean; else
    withhold it. ``found``: what its SQLite export held. Returns the withheld note or None."""
    if nsys is None:
        return withhold_quietly(report, "no nsys was at hand to check it for secrets")
    with tempfile.TemporaryDirectory(prefix="perfgate-redact-", dir=report.parent) as tmp:
        masked = Path(tmp) / report.name
        masked.write_bytes(mask_bytes(report.read_bytes(), found, known))
        export = Path(tmp) / "check.sqlite"
        if not reexport_sqlite(masked, export, nsys):
            return withhold_quietly(report, "its secrets could not be masked (nsys could not read the masked report)")
        learned = sorted({f.secret for f in found if len(f.secret) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        pieces = _pieces(f.secret for f in _essential([*found, *(Found(v, v) for v in known)]))
        if _leaks(scan_sqlite(export, [*known, *learned])) or _reveals(export, pieces) or _reveals(masked, pieces):
            return withhold_quietly(report, "a secret remained in it after masking (its export still held one)")
        changed = _collateral(report.with_suffix(".sqlite"), export) if report.with_suffix(".sqlite").is_file() else []
        if changed:
            return withhold_quietly(report, f"masking its secrets would also have changed {len(changed)} other "
                                    f"string(s) of the trace (e.g. {changed[0][:60]!r})")
        shutil.copystat(report, masked)
        masked.replace(report)
    return None

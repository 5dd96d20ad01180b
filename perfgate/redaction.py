"""Cleaning a launch's artifacts of secrets while keeping its trace usable.

nsys writes environments into the report and its SQLite export (perfgate.secrets says whose), so
after every launch, successful or not, :func:`clean_artifacts` goes through the launch folder:

- ``.sqlite``: every text value of every table is redacted in place (perfgate.secrets
  ``find_secrets``: known secret values, secret-named environment entries, credential shapes;
  values it finds by name are searched for everywhere in a second pass), then ``VACUUM`` rewrites
  the file so no free page keeps the old bytes, and a byte scan of the whole file (UTF-8 and
  UTF-16) confirms it. If the scan still finds a secret, the export is withheld.
- ``.nsys-rep``: the report is compressed, but nsys 2022.4 stores these strings as literal bytes,
  so each secret is overwritten in place by ``*`` of the same length (where compression split it,
  the pieces that are literal). The result counts as clean only when nsys exports it again and
  neither that export nor the masked report holds REVEAL_WINDOW characters of a secret in a row
  (a few characters a back-reference copies from unrelated bytes may stay), and every other
  string of the trace is unchanged; otherwise the report is withheld and the cleaned ``.sqlite``
  is kept.
- text files (``workload.log``, ``command.txt``, JSON, ...): redacted in place.
- anything else (a ``.qdstrm`` the importer left) cannot be checked: withheld when it holds a
  known secret's bytes, or when it is a raw capture (``.qdstrm``).

Withholding replaces a file by ``<name>.withheld.txt`` saying why (perfgate.secrets.withhold).
"""
from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from perfgate.secrets import (
    MIN_SECRET_LENGTH,
    REDACTED,
    WITHHELD_SUFFIX,
    Found,
    file_contains,
    find_secrets,
    is_harmless,
    is_searchable,
    public_environment_values,
    redact_text,
    withhold as _withhold,
)

def withhold(path: Path, reason: str) -> Path:
    """perfgate.secrets.withhold without a Python warning: the pipeline reports withheld files."""
    return _withhold(path, reason, warn=False)


TEXT_SUFFIXES = frozenset({".txt", ".log", ".json", ".csv", ".md", ".xml", ".out", ".err"})
UNCHECKABLE_SUFFIXES = frozenset({".qdstrm"})
EXPORT_TIMEOUT_S = 600
REVEAL_WINDOW = 8          # characters of a secret in a row that a cleaned report may not hold
EXPORT_TABLES = frozenset({"EXPORT_META_DATA", "META_DATA_EXPORT"})   # the export's own time and file names


@dataclass
class Cleaning:
    """What :func:`clean_artifacts` did: files redacted in place, notes of withheld files."""

    redacted: list[Path] = field(default_factory=list)
    withheld: list[Path] = field(default_factory=list)

    def merge(self, other: Cleaning) -> Cleaning:
        self.redacted += other.redacted
        self.withheld += other.withheld
        return self


# ----------------------------------------------------------------------------- SQLite


@dataclass
class _Scan:
    """What one pass over an SQLite file found."""

    found: dict[Found, None] = field(default_factory=dict)
    public: set[str] = field(default_factory=set)


def _text_columns(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    tables = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")]
    return [(t, r[1]) for t in tables for r in conn.execute(f'PRAGMA table_info("{t}")')]


def _sqlite_pass(conn: sqlite3.Connection, known: Sequence[str], write: bool) -> _Scan:
    """Find (and with ``write``, redact) the secrets in every text value of every table."""
    scan = _Scan()
    memo: dict[str, str] = {}

    def redact(value: object) -> object:
        if not isinstance(value, str):
            return value
        if value not in memo:
            hits = find_secrets(value, known)
            scan.found.update(dict.fromkeys(hits))
            scan.public |= public_environment_values(value)
            memo[value] = redact_text(value, known) if hits else value
        return memo[value]

    conn.create_function("perfgate_redact", 1, redact, deterministic=True)
    for table, column in _text_columns(conn):
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
    ``VACUUM``), without the harmless ones (perfgate.secrets.is_harmless: a path, a value a
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


def _needles(found: Iterable[Found], known: Iterable[str]) -> list[bytes]:
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
        return [], withhold(path, f"it could not be checked for secrets (SQLite: {exc})")
    for suffix in ("-journal", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if file_contains(path, _needles(found, known)):
        return found, withhold(path, "a secret remained in it after redaction")
    return found, None


# ----------------------------------------------------------------------------- .nsys-rep


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


def mask_bytes(data: bytes, found: Iterable[Found], known: Iterable[str]) -> bytes:
    """``data`` with every found secret (in its context) and known value overwritten by ``*`` of
    the same byte length; where a context does not occur whole (a compressed stream), its longest
    occurring prefix and suffix are masked over the secret. Pieces shorter than MIN_SECRET_LENGTH
    are left alone (too likely to match unrelated compressed bytes)."""
    wanted = _essential([*found, *(Found(v, v) for v in known)])
    wanted += [Found(f.secret, f.secret) for f in wanted]     # the secret alone, where its context is split
    pairs = {(f.context.encode(), f.secret.encode()) for f in wanted if len(f.context.encode()) >= MIN_SECRET_LENGTH}
    for context, secret in sorted(pairs, key=lambda p: -len(p[0])):
        if context in data:
            data = data.replace(context, _mask(context, secret)[0])
        else:
            data = _partial(data, context, secret)
    return data


def _texts(path: Path) -> dict[tuple[str, str, int], str]:
    """Every text value of an SQLite file by (table, column, rowid)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out: dict[tuple[str, str, int], str] = {}
        for table, column in _text_columns(conn):
            try:
                rows = conn.execute(f'SELECT rowid, "{column}" FROM "{table}" WHERE typeof("{column}") = \'text\'')
            except sqlite3.OperationalError:    # a table without rowid
                continue
            out.update({(table, column, rowid): value for rowid, value in rows})
        return out
    finally:
        conn.close()


def _collateral(cleaned: Path, reexport: Path) -> list[str]:
    """Strings of the trace that masking changed although they held no secret: a back-reference of
    the compressed report into masked bytes. ``cleaned``: the redacted export of the original."""
    before, after = _texts(cleaned), _texts(reexport)
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


def _export(report: Path, out: Path, nsys: Path) -> bool:
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
        return withhold(report, "no nsys was at hand to check it for secrets")
    with tempfile.TemporaryDirectory(prefix="perfgate-redact-", dir=report.parent) as tmp:
        masked = Path(tmp) / report.name
        masked.write_bytes(mask_bytes(report.read_bytes(), found, known))
        export = Path(tmp) / "check.sqlite"
        if not _export(masked, export, nsys):
            return withhold(report, "its secrets could not be masked (nsys could not read the masked report)")
        learned = sorted({f.secret for f in found if len(f.secret) >= MIN_SECRET_LENGTH}, key=len, reverse=True)
        pieces = _pieces(f.secret for f in _essential([*found, *(Found(v, v) for v in known)]))
        if _leaks(scan_sqlite(export, [*known, *learned])) or _reveals(export, pieces) or _reveals(masked, pieces):
            return withhold(report, "a secret remained in it after masking (its export still held one)")
        changed = _collateral(report.with_suffix(".sqlite"), export) if report.with_suffix(".sqlite").is_file() else []
        if changed:
            return withhold(report, f"masking its secrets would also have changed {len(changed)} other "
                                    f"string(s) of the trace (e.g. {changed[0][:60]!r})")
        shutil.copystat(report, masked)
        masked.replace(report)
    return None


# ----------------------------------------------------------------------------- folders


def clean_text_file(path: Path, known: Sequence[str]) -> bool:
    """Redact a text file in place; True when it changed."""
    try:
        text = path.read_text(encoding="utf-8", errors="surrogateescape")
    except OSError:
        return False
    cleaned = redact_text(text, known)
    if cleaned == text:
        return False
    path.write_text(cleaned, encoding="utf-8", errors="surrogateescape")
    return True


def clean_artifacts(folder: Path, known: Sequence[str], nsys: Path | None = None) -> Cleaning:
    """Clean every file under ``folder`` (see the module docstring). ``known``: secret values of
    perfgate's own environment (perfgate.secrets.secret_values); ``nsys``: the nsys that exports
    a report to check it, and a report without a sibling export."""
    done = Cleaning()
    if not folder.is_dir():
        return done
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()
                   and not p.name.endswith(WITHHELD_SUFFIX))
    for report in [p for p in files if p.suffix == ".nsys-rep"]:
        export = report.with_suffix(".sqlite")
        if not export.is_file() and (nsys is None or not _export(report, export, nsys)):
            done.withheld.append(withhold(report, "it could not be exported to check it for secrets"))
            continue
        if export not in files:
            files.append(export)
    for path in sorted(set(files)):
        done.merge(_clean_file(path, known, nsys))
    return done


def _clean_file(path: Path, known: Sequence[str], nsys: Path | None) -> Cleaning:
    done = Cleaning()
    if not path.is_file():
        return done
    if path.suffix == ".sqlite":
        found, note = clean_sqlite(path, known)
        if note is not None:
            done.withheld.append(note)
        elif found:
            done.redacted.append(path)
        report = path.with_suffix(".nsys-rep")
        if report.is_file() and (found or file_contains(report, _needles((), known))):
            note = clean_report(report, found, known, nsys)
            done.withheld.append(note) if note else done.redacted.append(report)
    elif path.suffix == ".nsys-rep":
        pass  # cleaned with its export
    elif path.suffix in TEXT_SUFFIXES:
        if clean_text_file(path, known):
            done.redacted.append(path)
    elif path.suffix in UNCHECKABLE_SUFFIXES:
        done.withheld.append(withhold(path, "a raw capture cannot be checked for secrets"))
    elif file_contains(path, _needles((), known)):
        done.withheld.append(withhold(path, "it contains the value of a secret environment variable"))
    return done


__all__ = ["REDACTED", "Cleaning", "clean_artifacts", "clean_report", "clean_sqlite", "clean_text_file",
           "mask_bytes", "scan_sqlite"]

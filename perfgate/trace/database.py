"""Column reads from an nsys SQLite export through DuckDB's SQLite scanner: whole columns as numpy
arrays, or a large table in chunks so that it is never held whole (``stream``).

The scanner is the ``sqlite_scanner`` extension shipped by the pip package
``duckdb-extension-sqlite-scanner`` (pinned with duckdb in requirements/ and pyproject.toml); an
extension that DuckDB installed itself (``INSTALL sqlite``) is used where that package is absent.
The export is attached read-only as the catalog ``t``. Where duckdb is not installed (a GPU runner
with no package index, a platform without its wheels), the same queries run through Python's
sqlite3 (``SqliteConnection``): the same results, slower.
"""
from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from perfgate.errors import TraceError
from perfgate.trace import read_ahead
from perfgate.trace.read_ahead import CATALOG, ROWS_PER_CHUNK, SQLITE3_BELOW_BYTES


def _extension_file(version: str) -> Path | None:
    try:
        import duckdb_extension_sqlite_scanner as package
    except ImportError:
        return None
    path = Path(package.__file__).parent / "extensions" / f"v{version}" / "sqlite_scanner.duckdb_extension"
    return path if path.is_file() else None


class SqliteConnection:
    """The part of a DuckDB connection perfgate uses, over Python's sqlite3 (duckdb absent)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.con = read_ahead.attach(path)

    def execute(self, sql: str) -> _SqliteResult:
        # DuckDB's two-argument greatest() is SQLite's scalar max()
        return _SqliteResult(self.con.execute(sql.replace("greatest(", "max(")))


class _SqliteResult:
    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor
        self.names = [d[0] for d in cursor.description]

    def _columns(self, rows: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
        """One array per column, its type inferred by numpy (in C): int64 where every value is an
        integer, float64 where any is a float, object where any is text or NULL (None)."""
        if not rows:
            return {name: np.array([], dtype=np.int64) for name in self.names}
        out = {}
        for name, values in zip(self.names, zip(*rows)):
            array = np.array(values)
            if array.dtype.kind == "U":
                array = np.array(values, dtype=object)
            elif array.dtype.kind not in "iufO":     # e.g. a BLOB column (bytes): no query reads one
                raise TraceError(f"column {name}: values numpy reads as {array.dtype}")
            out[name] = array
        return out

    def fetchnumpy(self) -> dict[str, np.ndarray]:
        return self._columns(self.cursor.fetchall())

    def fetchone(self) -> Any:
        return self.cursor.fetchone()

    def fetchall(self) -> list[Any]:
        return self.cursor.fetchall()


def connect(path: Path) -> Any:
    """A DuckDB connection with ``path`` attached read-only as catalog ``t`` (a
    ``SqliteConnection`` where duckdb is not installed, or where the export is smaller than
    ``SQLITE3_BELOW_BYTES``: there DuckDB's import and its scanner's loading cost more than they save)."""
    if path.stat().st_size < SQLITE3_BELOW_BYTES:
        return SqliteConnection(path)
    try:
        import duckdb
    except ImportError:
        return SqliteConnection(path)
    ext = _extension_file(duckdb.__version__)
    # the scanner of the pip package is as trusted as the duckdb package beside it in site-packages:
    # DuckDB's signature check (a hash of its 33 MB, about 0.07 s a command) is left to the extension
    # DuckDB installs itself, the one loaded where that package is absent
    con = duckdb.connect(":memory:", config={"allow_unsigned_extensions": ext is not None})
    try:
        con.execute(f"LOAD '{ext}'" if ext is not None else "LOAD sqlite_scanner")
    except duckdb.Error as exc:
        raise TraceError(
            f"DuckDB {duckdb.__version__} has no SQLite scanner here: install the matching "
            f"duckdb-extension-sqlite-scanner=={duckdb.__version__} ({exc})") from exc
    quoted = str(path.resolve()).replace("'", "''")
    try:
        con.execute(f"ATTACH '{quoted}' AS {CATALOG} (TYPE sqlite, READ_ONLY)")
    except duckdb.Error as exc:
        raise TraceError(f"{path}: cannot open as SQLite: {exc}") from exc
    return con


def fetch(con: Any, sql: str) -> dict[str, np.ndarray]:
    """All rows of a query as one numpy array per column (NULL text is None; a query must
    coalesce NULL numbers itself)."""
    out = {}
    for k, v in con.execute(sql).fetchnumpy().items():
        if np.ma.isMaskedArray(v) and v.dtype != object and np.ma.getmaskarray(v).any():
            raise ValueError(f"column {k} holds NULLs: coalesce it in the query")
        out[k] = np.asarray(v)
    return out


def stream(con: Any, sql: str, rows: int = ROWS_PER_CHUNK) -> Iterator[dict[str, np.ndarray]]:
    """The rows of a query in order, ``rows`` at a time (at least one DuckDB vector)."""
    result = con.execute(sql)
    if isinstance(result, _SqliteResult):
        while True:
            chunk = result.cursor.fetchmany(rows)
            if not chunk:
                return
            yield result._columns(chunk)
    vectors = max(1, rows // 2048)
    while True:
        chunk = result.fetch_df_chunk(vectors)
        if len(chunk) == 0:
            return
        yield {c: chunk[c].to_numpy() for c in chunk.columns}


def stream_integers(con: Any, table: str, columns: Mapping[str, str],
                    rows: int = ROWS_PER_CHUNK) -> Iterator[dict[str, np.ndarray]]:
    """The rows of ``table`` in rowid order, ``rows`` rowids at a time, as int64 arrays of the
    integer SQL expressions ``columns`` (name -> expression; NULLs coalesced by the caller).

    Through sqlite3, each chunk is one query that gives each column as one comma-separated string
    (``read_ahead.concat_chunks``: made by SQLite in C, parsed by numpy in C; no Python object per
    value, about twice as fast as rows fetched through the cursor), or what ``read_ahead`` read of
    it in a thread. A value that is not an integer is an error."""
    if not isinstance(con, SqliteConnection):
        exprs = ", ".join(f"{sql} AS {name}" for name, sql in columns.items())
        yield from stream(con, f"SELECT {exprs} FROM {CATALOG}.{table}", rows)
        return
    ahead = read_ahead.take(con.path, table, columns) if rows == ROWS_PER_CHUNK else None
    for n, texts in (ahead if ahead is not None else read_ahead.concat_chunks(con.con, table, columns, rows)):
        chunk = {}
        for name, text in zip(columns, texts):
            try:
                with warnings.catch_warnings():   # numpy before 2.x warned and stopped at a bad value
                    warnings.simplefilter("error", DeprecationWarning)
                    values = np.fromstring(text or "", dtype=np.int64, sep=",")
            except (ValueError, DeprecationWarning) as exc:
                raise TraceError(f"{table}: column {name} holds a value that is not an integer") from exc
            if values.size != n:
                raise TraceError(f"{table}: column {name} holds {n - values.size} NULL or non-integer values")
            chunk[name] = values
        yield chunk

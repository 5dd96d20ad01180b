"""The integer columns the analysis reads from an export's GPU-op and CUDA API tables: which (the
SQL of each column, decided here once), how (in rowid chunks, each column one ``group_concat``
string made by SQLite in C), and reading them ahead.

``start_reading(path)`` reads them in threads, one per table on its own read-only connection, while the
command imports numpy and the analysis: SQLite runs without the GIL, so on a capture of tens of
thousands of GPU ops the reads are done by the time the analysis asks for them
(``columnar.stream_integers`` takes what was read ahead, and reads itself whatever was not). Only
for exports that ``columnar`` reads through sqlite3 (under ``SQLITE3_BELOW_BYTES``): the strings of
larger ones would be held whole. Reading ahead changes no result; a failed read ahead is dropped
and the analysis reads, and reports, as without it. Standard library only: nothing here waits for
numpy's import.
"""
from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

CATALOG = "t"
ROWS_PER_CHUNK = 1 << 18   # rows per streamed chunk: bounded memory, few Python-level steps
# exports below this size are read through sqlite3: DuckDB's import and the scanner's loading take
# about 0.15 s, which its faster reads make up only from about this size on
SQLITE3_BELOW_BYTES = 8 << 20

GPU_OP_TABLES: dict[str, str] = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "graph": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
}
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
# (GpuOps column, export column); a column the table lacks reads as -1
OP_SOURCES: tuple[tuple[str, str], ...] = (
    ("start", "start"), ("end", '"end"'), ("device_id", "deviceId"), ("stream_id", "streamId"),
    ("correlation_id", "correlationId"), ("global_pid", "globalPid"), ("bytes", "bytes"),
    ("copy_kind", "copyKind"), ("src_kind", "srcKind"), ("dst_kind", "dstKind"),
)

Chunk = tuple[int, list[str | None]]   # (rows, one comma-separated string per column)


def op_columns(columns: set[str] | frozenset[str]) -> dict[str, str] | None:
    """The SQL of each GpuOps column of a GPU-op table with ``columns``; None when the table cannot
    give GPU ops (no start, end, correlationId or globalPid)."""
    if not {"start", "end", "correlationId", "globalPid"} <= set(columns):
        return None
    exprs = {dst: f"coalesce({src}, -1)" for dst, src in OP_SOURCES if src.strip('"') in columns}
    name = next((c for c in ("shortName", "demangledName") if c in columns), None)
    if name:
        exprs["name_id"] = f"coalesce({name}, -1)"
    return exprs


def call_columns(columns: set[str] | frozenset[str]) -> dict[str, str]:
    """The SQL of each column read of the CUDA API-call table with ``columns``."""
    name = "coalesce(nameId, -1)" if "nameId" in columns else "-1"
    return {"start": "start", "end": '"end"', "tid": "globalTid", "corr": "coalesce(correlationId, -1)",
            "name": name}


def concat_chunks(con: sqlite3.Connection, table: str, columns: Mapping[str, str],
                  rows: int = ROWS_PER_CHUNK) -> Iterator[Chunk]:
    """``table``'s rows in rowid order, ``rows`` rowids a query: the row count and each column as
    one comma-separated string (SQLite aggregates all columns in the same scan: they stay aligned;
    ``group_concat`` skips NULL, which the count then shows)."""
    source = f"{CATALOG}.{table}"
    bounds = rowid_bounds(con, source)
    if bounds is None:
        return
    first, last = bounds
    aggregates = ", ".join(f"group_concat({sql})" for sql in columns.values())
    query = f"SELECT count(*), {aggregates} FROM {source} WHERE rowid >= ? AND rowid < ?"
    for at in range(first, last + 1, rows):
        n, *texts = con.execute(query, (at, at + rows)).fetchone()
        if n:
            yield int(n), texts


def rowid_bounds(con: sqlite3.Connection, source: str) -> tuple[int, int] | None:
    """(smallest, largest) rowid of a table, None when it is empty. One aggregate a query: SQLite
    reads min(rowid) or max(rowid) off the b-tree's edge, but both in one query scan the table."""
    first = con.execute(f"SELECT min(rowid) FROM {source}").fetchone()[0]
    last = con.execute(f"SELECT max(rowid) FROM {source}").fetchone()[0]
    return None if first is None else (int(first), int(last))


def attach(path: Path, check_same_thread: bool = True) -> sqlite3.Connection:
    """An in-memory connection with ``path`` attached read-only as catalog ``t``."""
    con = sqlite3.connect(":memory:", uri=True, check_same_thread=check_same_thread)
    con.execute(f"ATTACH DATABASE ? AS {CATALOG}", (f"file:{path.resolve()}?mode=ro",))
    return con


class _Read:
    """One table read in a thread."""

    def __init__(self, path: Path, table: str, columns: dict[str, str]) -> None:
        self.key = (table, tuple(columns.items()))
        self.chunks: list[Chunk] | None = None
        self.thread = threading.Thread(target=self._run, args=(path, table, columns), daemon=True,
                                       name=f"perfgate-read-{table}")
        self.thread.start()

    def _run(self, path: Path, table: str, columns: dict[str, str]) -> None:
        try:
            con = attach(path)
            try:
                self.chunks = list(concat_chunks(con, table, columns))
            finally:
                con.close()
        except (sqlite3.Error, OSError, ValueError):
            self.chunks = None       # the analysis reads the table itself and reports what fails


_READS: dict[Path, dict[tuple[str, tuple[tuple[str, str], ...]], _Read]] = {}


def start_reading(path: str | Path) -> None:
    """Start reading ahead the GPU-op and API-call tables of the SQLite export ``path`` (nothing
    for another file, one that is not an export, or one at or over ``SQLITE3_BELOW_BYTES``)."""
    path = Path(path)
    try:
        if path.suffix != ".sqlite" or not path.is_file() or path.stat().st_size >= SQLITE3_BELOW_BYTES:
            return
        con = attach(path)
        try:
            tables = {r[0] for r in con.execute(f"SELECT name FROM {CATALOG}.sqlite_master WHERE type='table'")}
            wanted: list[tuple[str, dict[str, str]]] = []
            for table in (*GPU_OP_TABLES.values(), RUNTIME_TABLE):
                if table not in tables:
                    continue
                cols = {r[1] for r in con.execute(f'PRAGMA {CATALOG}.table_info("{table}")')}
                exprs = call_columns(cols) if table == RUNTIME_TABLE else op_columns(cols)
                if exprs is not None:
                    wanted.append((table, exprs))
        finally:
            con.close()
    except (sqlite3.Error, OSError):
        return                       # not an export perfgate can read: load_trace says why
    reads = {}
    for table, exprs in wanted:
        read = _Read(path, table, exprs)
        reads[read.key] = read
    _READS[path.resolve()] = reads


def take(path: Path, table: str, columns: Mapping[str, str]) -> list[Chunk] | None:
    """What was read ahead of ``table`` with ``columns`` from ``path`` (waiting for its thread),
    once; None when nothing was, or the read failed."""
    reads = _READS.get(path.resolve())
    read = reads.pop((table, tuple(columns.items())), None) if reads is not None else None
    if read is None:
        return None
    read.thread.join()
    return read.chunks

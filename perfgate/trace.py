"""Reading an nsys SQLite export into pandas frames (``Trace``), probing tables and columns so that
exports of nsys 2022.4 (schema 3.0) through 2026.x (schema 3.25+) all read the same way.

The only module that imports sqlite3. Files are opened read-only (``file:...?mode=ro``).
Column names in the frames are snake_case; timestamps are integer ns relative to session start.
"""
from __future__ import annotations

import itertools
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from perfgate.errors import TraceError

# NVTX event types by their ENUM_NSYS_EVENT_TYPE name, with the ids every known version uses.
NVTX_EVENT_TYPES: dict[str, int] = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
}
PUSHPOP_TYPES = ("NvtxPushPopRange", "NvtxtPushPopRange")
STARTEND_TYPES = ("NvtxStartEndRange", "NvtxtStartEndRange")

GPU_OP_TABLES: dict[str, str] = {
    "kernel": "CUPTI_ACTIVITY_KIND_KERNEL",
    "memcpy": "CUPTI_ACTIVITY_KIND_MEMCPY",
    "memset": "CUPTI_ACTIVITY_KIND_MEMSET",
    "graph": "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
}
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMORY_USAGE_TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
PID_MASK = -0x1000000  # globalTid & ~0xFFFFFF == globalPid (as a signed 64-bit integer)

SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True, eq=False)
class Trace:
    """One nsys export as frames.

    ``nvtx``: one row per NVTX push/pop or start/end range, columns ``row_id, start, end,
    unterminated, text, name, style, global_tid, end_global_tid, pid, domain_id``. ``name`` is the
    ``domain:text`` tag nsys stats prints (``text`` alone in the default domain); an unterminated
    range ends at the largest NVTX timestamp, as in ``nsys stats``.
    ``gpu_ops``: kernels, memcpys, memsets and CUDA-graph launches, columns ``kind, start, end,
    device_id, stream_id, correlation_id, global_pid, pid, name_id, bytes, copy_kind, src_kind,
    dst_kind`` (-1 where a column does not apply).
    ``runtime``: CUDA runtime/driver API calls, columns ``start, end, global_tid, global_pid,
    correlation_id, name_id``.
    ``memory_events``: ``start, global_pid, device_id, bytes, op`` (op 0 alloc, 1 free) or None.
    """

    path: Path
    nsys_version: str | None
    schema_version: str | None
    nvtx: pd.DataFrame
    gpu_ops: pd.DataFrame
    runtime: pd.DataFrame
    strings: dict[int, str]
    memory_events: pd.DataFrame | None = None
    tables: frozenset[str] = field(default_factory=frozenset)

    @property
    def has_gpu(self) -> bool:
        return len(self.gpu_ops) > 0

    def string(self, string_id: int) -> str:
        return self.strings.get(int(string_id), f"<string {int(string_id)}>")


def load_trace(path: str | Path) -> Trace:
    """Read an nsys SQLite export. Raises TraceError naming the file when it is not SQLite, is
    truncated or corrupt, or holds no NVTX ranges."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such trace file")
    with path.open("rb") as fh:
        if fh.read(16) != SQLITE_MAGIC:
            raise TraceError(f"{path}: not an SQLite file (expected an nsys SQLite export)")
    try:
        conn = sqlite3.connect(f"file:{path.resolve()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open as SQLite: {exc}") from exc
    try:
        return _read(conn, path)
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{path}: unreadable SQLite export (truncated or corrupt?): {exc}") from exc
    finally:
        conn.close()


def _read(conn: sqlite3.Connection, path: Path) -> Trace:
    tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    meta = _meta(conn, tables)
    if "NVTX_EVENTS" not in tables:
        raise TraceError(
            f"{path}: no NVTX_EVENTS table: the capture recorded no NVTX ranges "
            "(was nsys run with --trace=nvtx and does the workload push NVTX ranges?)"
        )
    types = _event_types(conn, tables)
    nvtx = _nvtx(conn, tables, types)
    if nvtx.empty:
        raise TraceError(
            f"{path}: NVTX_EVENTS holds no push/pop or start/end ranges "
            "(ranges from the PyPI nvtx package are not recorded by nsys 2022.4; use torch.cuda.nvtx)"
        )
    runtime = _runtime(conn, tables)
    gpu_ops = _gpu_ops(conn, tables)
    strings = _strings(conn, tables)
    return Trace(
        path=path,
        nsys_version=meta.get("EXPORT_PRODUCT_VERSION"),
        schema_version=meta.get("EXPORT_SCHEMA_VERSION"),
        nvtx=nvtx,
        gpu_ops=gpu_ops,
        runtime=runtime,
        strings=strings,
        memory_events=_memory_events(conn, tables),
        tables=tables,
    )


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _meta(conn: sqlite3.Connection, tables: frozenset[str]) -> dict[str, str]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables and {"name", "value"} <= _columns(conn, table):
            return {str(n): str(v) for n, v in conn.execute(f"SELECT name, value FROM {table}")}
    return {}


def _event_types(conn: sqlite3.Connection, tables: frozenset[str]) -> dict[str, int]:
    types = dict(NVTX_EVENT_TYPES)
    if "ENUM_NSYS_EVENT_TYPE" in tables:
        for ident, name in conn.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            if name in types:
                types[name] = int(ident)
    return types


def _nvtx(conn: sqlite3.Connection, tables: frozenset[str], types: dict[str, int]) -> pd.DataFrame:
    """NVTX ranges named and closed exactly as ``nsys stats`` (nvtxsum / nvtx_sum) does."""
    cols = _columns(conn, "NVTX_EVENTS")
    has_sid = "textId" in cols and "StringIds" in tables
    text = "coalesce(sid.value, ne.text)" if has_sid else "ne.text"
    dtext = "coalesce(dsid.value, e.text)" if has_sid and "textId" in cols else "e.text"
    sid_join = "LEFT JOIN StringIds AS sid ON ne.textId = sid.id" if has_sid else ""
    dsid_join = "LEFT JOIN StringIds AS dsid ON e.textId = dsid.id" if has_sid else ""
    domain = "ne.domainId" if "domainId" in cols else "NULL"
    end_tid = "ne.endGlobalTid" if "endGlobalTid" in cols else "NULL"
    pushpop = ",".join(str(types[t]) for t in PUSHPOP_TYPES)
    startend = ",".join(str(types[t]) for t in STARTEND_TYPES)
    domain_cte = (
        f"""domains AS (SELECT min(e.start), e.domainId AS id, e.globalTid AS globalTid, {dtext} AS name
            FROM NVTX_EVENTS AS e {dsid_join} WHERE e.eventType = {types['NvtxDomainCreate']}
            GROUP BY 2, 3),"""
        if "domainId" in cols else "domains AS (SELECT NULL AS id, NULL AS globalTid, NULL AS name),"
    )
    query = f"""
    WITH {domain_cte}
    maxts AS (SELECT max(max(start), max("end")) AS m FROM NVTX_EVENTS)
    SELECT ne.rowid AS row_id, ne.start AS start,
           coalesce(ne."end", (SELECT m FROM maxts)) AS "end",
           ne."end" IS NULL AS unterminated,
           coalesce({text}, '') AS text,
           CASE WHEN d.name IS NOT NULL THEN d.name || ':' || coalesce({text}, '')
                ELSE coalesce({text}, '') END AS name,
           CASE WHEN ne.eventType IN ({startend}) THEN 'StartEnd' ELSE 'PushPop' END AS style,
           ne.globalTid AS global_tid, {end_tid} AS end_global_tid, {domain} AS domain_id
    FROM NVTX_EVENTS AS ne {sid_join}
    LEFT JOIN domains AS d ON {domain} = d.id
         AND (ne.globalTid & 0x0000FFFFFF000000) = (d.globalTid & 0x0000FFFFFF000000)
    WHERE ne.eventType IN ({pushpop},{startend})
    """
    df = pd.read_sql_query(query, conn)
    if df.empty:
        return df.assign(pid=pd.Series(dtype="int64"))
    df["start"] = df["start"].astype("int64")
    df["end"] = df["end"].astype("int64")
    df["unterminated"] = df["unterminated"].astype(bool)
    df["global_tid"] = df["global_tid"].astype("int64")
    df["end_global_tid"] = df["end_global_tid"].astype("Int64")
    df["pid"] = (df["global_tid"].to_numpy() >> 24) & 0xFFFFFF
    return df


def _runtime(conn: sqlite3.Connection, tables: frozenset[str]) -> pd.DataFrame:
    empty = pd.DataFrame({c: pd.Series(dtype="int64") for c in
                          ("start", "end", "global_tid", "global_pid", "correlation_id", "name_id")})
    if RUNTIME_TABLE not in tables:
        return empty
    cols = _columns(conn, RUNTIME_TABLE)
    name = "nameId" if "nameId" in cols else "-1"
    arr = _int_matrix(conn, RUNTIME_TABLE, ["start", '"end"', "globalTid", "correlationId", name])
    if arr.shape[0] == 0:
        return empty
    return pd.DataFrame({
        "start": arr[:, 0], "end": arr[:, 1], "global_tid": arr[:, 2],
        "global_pid": arr[:, 2] & PID_MASK, "correlation_id": arr[:, 3], "name_id": arr[:, 4],
    })


GPU_OP_COLUMNS = ("kind", "start", "end", "device_id", "stream_id", "correlation_id", "global_pid",
                  "pid", "name_id", "bytes", "copy_kind", "src_kind", "dst_kind")
KIND_CODES = {"kernel": 0, "memcpy": 1, "memset": 2, "graph": 3}


def _gpu_ops(conn: sqlite3.Connection, tables: frozenset[str]) -> pd.DataFrame:
    parts: list[np.ndarray] = []
    for kind, table in GPU_OP_TABLES.items():
        if table not in tables:
            continue
        cols = _columns(conn, table)
        if not {"start", "end", "correlationId", "globalPid"} <= cols:
            continue
        name = next((c for c in ("shortName", "demangledName") if c in cols), None)
        exprs = [str(KIND_CODES[kind]), "start", '"end"',
                 "deviceId" if "deviceId" in cols else "-1",
                 "streamId" if "streamId" in cols else "-1",
                 "correlationId", "globalPid", name or "-1"]
        exprs += [c if c in cols else "-1" for c in ("bytes", "copyKind", "srcKind", "dstKind")]
        arr = _int_matrix(conn, table, exprs)
        if arr.shape[0]:
            parts.append(arr)
    if not parts:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in GPU_OP_COLUMNS})
    arr = np.concatenate(parts) if len(parts) > 1 else parts[0]
    df = pd.DataFrame({
        "kind": pd.Categorical.from_codes(arr[:, 0], categories=list(KIND_CODES)),
        "start": arr[:, 1], "end": arr[:, 2], "device_id": arr[:, 3], "stream_id": arr[:, 4],
        "correlation_id": arr[:, 5], "global_pid": arr[:, 6], "pid": (arr[:, 6] >> 24) & 0xFFFFFF,
        "name_id": arr[:, 7], "bytes": arr[:, 8], "copy_kind": arr[:, 9],
        "src_kind": arr[:, 10], "dst_kind": arr[:, 11],
    })
    return df


def _int_matrix(conn: sqlite3.Connection, table: str, exprs: list[str]) -> np.ndarray:
    """All rows of ``table`` as an int64 matrix, one column per expression (NULL -> -1), built
    straight from the cursor without an intermediate list of row tuples."""
    n = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    select = ", ".join(f"coalesce({e}, -1)" for e in exprs)
    flat = np.fromiter(itertools.chain.from_iterable(conn.execute(f"SELECT {select} FROM {table}")),
                       dtype=np.int64, count=n * len(exprs))
    return flat.reshape(n, len(exprs))


def _strings(conn: sqlite3.Connection, tables: frozenset[str]) -> dict[int, str]:
    """StringIds: names of kernels and API calls (and registered NVTX strings)."""
    if "StringIds" not in tables:
        return {}
    return {int(i): str(v) for i, v in conn.execute("SELECT id, value FROM StringIds")}


def _memory_events(conn: sqlite3.Connection, tables: frozenset[str]) -> pd.DataFrame | None:
    if MEMORY_USAGE_TABLE not in tables:
        return None
    cols = _columns(conn, MEMORY_USAGE_TABLE)
    if not {"start", "bytes", "memoryOperationType"} <= cols:
        return None
    gpid = "globalPid" if "globalPid" in cols else "0"
    dev = "deviceId" if "deviceId" in cols else "0"
    return pd.read_sql_query(
        f"SELECT start, {gpid} AS global_pid, {dev} AS device_id, bytes, "
        f"memoryOperationType AS op FROM {MEMORY_USAGE_TABLE}", conn)

"""Reading an nsys SQLite export (``Trace``), probing tables and columns so that exports of nsys
2022.4 (schema 3.0) through 2026.x (schema 3.25+) all read the same way.

Small tables (meta data, enums, StringIds) and the schema probe go through sqlite3; the event
tables through DuckDB's SQLite scanner (``perfgate.trace.database``), each needed column read once:
NVTX ranges when the trace is loaded, GPU ops and the CUDA API calls on first use
(``Trace.gpu``). Files are opened read-only (``file:...?mode=ro`` / ``READ_ONLY``). Column names
in the tables are snake_case; timestamps are integer ns relative to session start.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from perfgate.errors import TraceError
from perfgate.records.ranks import NodeProcess
from perfgate.trace import database
from perfgate.trace.api_calls import SYNC_CALLS, ApiCalls, api_name, scan_runtime
from perfgate.trace.columns import Columns, factorize, run_starts
from perfgate.trace.gpu_ops import PID_MASK, GpuOps, empty_ops, read_gpu_ops
from perfgate.trace.read_ahead import GPU_OP_TABLES, RUNTIME_TABLE, rowid_bounds

# NVTX event types by their ENUM_NSYS_EVENT_TYPE name, with the ids every known version uses.
NVTX_EVENT_TYPES: dict[str, int] = {
    "NvtxPushPopRange": 59,
    "NvtxStartEndRange": 60,
    "NvtxtPushPopRange": 70,
    "NvtxtStartEndRange": 71,
    "NvtxDomainCreate": 75,
    "NvtxMark": 34,
}
PUSHPOP_TYPES = ("NvtxPushPopRange", "NvtxtPushPopRange")
STARTEND_TYPES = ("NvtxStartEndRange", "NvtxtStartEndRange")
MARK_COLUMNS = ("start", "text", "global_tid", "pid")
MEMORY_USAGE_TABLE = "CUDA_GPU_MEMORY_USAGE_EVENTS"
PID_BITS = 0x0000FFFFFF000000   # the pid part of a globalTid

SQLITE_MAGIC = b"SQLite format 3\x00"
__all__ = ["Trace", "load_trace"]


@dataclass(frozen=True, eq=False)
class Trace:
    """One nsys export.

    ``nvtx``: one row per NVTX push/pop or start/end range (``Columns``, in export order):
    ``row_id, start, end, unterminated, text, name, style, global_tid, end_global_tid, domain_id,
    pid``; ``end_global_tid`` and ``domain_id`` are ``NO_ID`` where the export has NULL. ``name`` is the
    ``domain:text`` tag nsys stats prints (``text`` alone in the default domain); an unterminated
    range ends at the largest NVTX timestamp, as in ``nsys stats``.
    ``marks``: one row per NVTX mark (an instant: ``start, text, global_tid, pid``, by time); perfgate's
    autostep hooks record what they see with them (``perfgate/optimizer_step:1``, ``perfgate/batch:64``).
    ``gpu(window)``: the GPU ops joined to their launching calls (``GpuOps``, read and joined once)
    and the CUDA API calls of a window (``ApiCalls``), from one pass over the API-call table.
    ``gpu_ops`` / ``runtime``: the same tables as pandas frames, for tests and inspection
    (``runtime`` reads the whole API-call table); ``memory_events``: the GPU memory events.
    """

    path: Path
    nsys_version: str | None
    schema_version: str | None
    nvtx: Columns
    strings: dict[int, str]
    marks: Columns = field(default_factory=lambda: Columns.empty_of(MARK_COLUMNS, {"text": object}))
    tables: frozenset[str] = field(default_factory=frozenset)
    columns: dict[str, frozenset[str]] = field(default_factory=dict, repr=False)
    capacity: dict[str, int] = field(default_factory=dict, repr=False)
    session_start_utc_ns: int | None = None   # wall clock (Unix ns) of timestamp 0 (energy windows)
    processes: dict[int, NodeProcess] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    _con: Any = field(default=None, repr=False)
    _cache: dict[Any, Any] = field(default_factory=dict, repr=False)

    def string(self, string_id: int) -> str:
        return self.strings.get(int(string_id), f"<string {int(string_id)}>")

    def _columns(self, table: str) -> set[str]:
        return set(self.columns.get(table, ()))

    @property
    def ops(self) -> GpuOps:
        """The GPU ops, not yet joined to their launches (read once)."""
        if "ops" not in self._cache:
            self._cache["ops"] = (read_gpu_ops(self._con, self.tables, self._columns, self.capacity.__getitem__)
                                  if self._con is not None else empty_ops())
        return self._cache["ops"]

    @property
    def has_gpu(self) -> bool:
        return len(self.ops) > 0

    def sync_name_ids(self) -> frozenset[int]:
        """StringIds of the synchronizing API calls (SYNC_CALLS, version suffix dropped)."""
        return frozenset(i for i, v in self.strings.items() if api_name(v) in SYNC_CALLS)

    def gpu(self, window: tuple[int, int] | None = None) -> tuple[GpuOps, ApiCalls | None]:
        """The GPU ops with their launching calls, and the API calls of ``window`` (start, end ns)
        aggregated; one pass over the API-call table per window, none for a window seen before."""
        key = ("api", window)
        if key not in self._cache:
            ops = self.ops
            if RUNTIME_TABLE not in self.tables or self._con is None:
                launched = ops
                api = None if window is None else ApiCalls(start_ns=window[0], end_ns=window[1])
            elif window is None and "launched" in self._cache:
                launched, api = self._cache["launched"], None
            else:
                launched, api = _guarded(self.path, lambda: scan_runtime(
                    self._con, self._columns(RUNTIME_TABLE), ops, window, self.sync_name_ids()))
            self._cache.setdefault("launched", launched)
            self._cache[key] = (self._cache["launched"], api)
        return self._cache[key]

    @property
    def gpu_ops(self) -> Any:
        """GPU ops with their API-call columns, as a frame (``kind`` categorical)."""
        return self.gpu()[0].frame()

    @property
    def runtime(self) -> Any:
        """The whole API-call table as a pandas frame: ``start, end, global_tid, global_pid,
        correlation_id, name_id``."""
        import pandas as pd

        cols = ("start", "end", "global_tid", "global_pid", "correlation_id", "name_id")
        if RUNTIME_TABLE not in self.tables or self._con is None:
            return pd.DataFrame({c: pd.Series(dtype="int64") for c in cols})
        name = "nameId" if "nameId" in self._columns(RUNTIME_TABLE) else "-1"
        d = database.fetch(self._con, f'SELECT start, "end", globalTid AS global_tid, '
                           f"coalesce(correlationId, -1) AS correlation_id, coalesce({name}, -1) AS name_id "
                           f"FROM {database.CATALOG}.{RUNTIME_TABLE}")
        d["global_pid"] = d["global_tid"] & PID_MASK
        return pd.DataFrame({c: d[c].astype(np.int64) for c in cols})

    @property
    def memory_events(self) -> Columns | None:
        """``start, global_pid, device_id, bytes, op`` (op 0 alloc, 1 free) of
        CUDA_GPU_MEMORY_USAGE_EVENTS, or None without that table."""
        if "memory" not in self._cache:
            self._cache["memory"] = _memory_events(self)
        return self._cache["memory"]


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
        probe = _probe(conn, path)
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{path}: unreadable SQLite export (truncated or corrupt?): {exc}") from exc
    finally:
        conn.close()
    con = database.connect(path)
    nvtx, marks = _guarded(path, lambda: _nvtx(con, probe))
    if nvtx.empty:
        raise TraceError(
            f"{path}: NVTX_EVENTS holds no push/pop or start/end ranges "
            "(ranges from the PyPI nvtx package are not recorded by nsys 2022.4; use torch.cuda.nvtx)"
        )
    return Trace(path=path, nsys_version=probe["meta"].get("EXPORT_PRODUCT_VERSION"),
                 schema_version=probe["meta"].get("EXPORT_SCHEMA_VERSION"), nvtx=nvtx, marks=marks,
                 strings=probe["strings"], tables=probe["tables"], columns=probe["columns"],
                 capacity=probe["capacity"], session_start_utc_ns=probe["session_start"], _con=con)


def _guarded(path: Path, read: Any) -> Any:
    """``read()``, with DuckDB's errors on a damaged file turned into a TraceError (duckdb is not
    imported for that: where the reader is sqlite3, it is not loaded at all)."""
    import sys

    errors: tuple[type[BaseException], ...] = (sqlite3.DatabaseError,)
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None:
        errors += (duckdb.Error,)
    try:
        return read()
    except errors as exc:
        raise TraceError(f"{path}: unreadable SQLite export (truncated or corrupt?): {exc}") from exc


def _probe(conn: sqlite3.Connection, path: Path) -> dict[str, Any]:
    """Tables, the columns of those perfgate reads, meta data, event types, StringIds and row
    capacities of the GPU tables (largest minus smallest rowid plus one: no scan)."""
    tables = frozenset(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
    if "NVTX_EVENTS" not in tables:
        raise TraceError(
            f"{path}: no NVTX_EVENTS table: the capture recorded no NVTX ranges "
            "(was nsys run with --trace=nvtx and does the workload push NVTX ranges?)"
        )
    wanted = {"NVTX_EVENTS", RUNTIME_TABLE, MEMORY_USAGE_TABLE, *GPU_OP_TABLES.values()} & tables
    columns = {t: frozenset(r[1] for r in conn.execute(f'PRAGMA table_info("{t}")')) for t in wanted}
    capacity = {}
    for t in set(GPU_OP_TABLES.values()) & tables:
        bounds = rowid_bounds(conn, t)
        capacity[t] = 0 if bounds is None else bounds[1] - bounds[0] + 1
    meta: dict[str, str] = {}
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if table in tables and {"name", "value"} <= {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}:
            meta = {str(n): str(v) for n, v in conn.execute(f"SELECT name, value FROM {table}")}
            break
    types = dict(NVTX_EVENT_TYPES)
    if "ENUM_NSYS_EVENT_TYPE" in tables:
        for ident, name in conn.execute("SELECT id, name FROM ENUM_NSYS_EVENT_TYPE"):
            if name in types:
                types[name] = int(ident)
    strings = ({int(i): str(v) for i, v in conn.execute("SELECT id, value FROM StringIds")}
               if "StringIds" in tables else {})
    start = None
    if "TARGET_INFO_SESSION_START_TIME" in tables:
        row = conn.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
        start = int(row[0]) if row and row[0] is not None else None
    return {"tables": tables, "columns": columns, "capacity": capacity, "meta": meta, "types": types,
            "strings": strings, "session_start": start}


NVTX_COLUMNS = ("row_id", "start", "end", "unterminated", "text", "name", "style", "global_tid",
                "end_global_tid", "domain_id", "pid")
NO_ID = -1   # end_global_tid / domain_id where the export has NULL (a range ended on its own thread)


def _nvtx(con: Any, probe: dict[str, Any]) -> tuple[Columns, Columns]:
    """NVTX ranges named and closed exactly as ``nsys stats`` (nvtxsum / nvtx_sum) does: the
    message is coalesce(StringIds via textId, text); the domain comes from the NvtxDomainCreate
    row with the same domainId in the same process (the earliest per thread that created it).
    And the marks (``MARK_COLUMNS``, by time), which ``nsys stats``' range reports leave out."""
    cols = probe["columns"]["NVTX_EVENTS"]
    types = probe["types"]
    pushpop = [types[t] for t in PUSHPOP_TYPES]
    startend = [types[t] for t in STARTEND_TYPES]
    create = types["NvtxDomainCreate"]
    mark = types["NvtxMark"]
    wanted = ",".join(str(t) for t in (*pushpop, *startend, create, mark))
    opt = {c: (c if c in cols else "NULL") for c in ("textId", "endGlobalTid", "domainId")}
    table = f"{database.CATALOG}.NVTX_EVENTS"
    raw = database.fetch(con, f"""
        SELECT rowid AS row_id, start, coalesce("end", -1) AS "end", "end" IS NULL AS unterminated,
               eventType AS event_type, text, coalesce({opt['textId']}, -1) AS text_id, globalTid AS global_tid,
               coalesce({opt['endGlobalTid']}, {NO_ID}) AS end_global_tid,
               coalesce({opt['domainId']}, {NO_ID}) AS domain_id, {opt['domainId']} IS NULL AS domain_null
        FROM {table} WHERE eventType IN ({wanted}) ORDER BY rowid""")
    for flag in ("unterminated", "domain_null"):   # 0/1 through sqlite3
        raw[flag] = raw[flag].astype(bool)
    message = _messages(raw["text"], raw["text_id"], probe["strings"])
    is_mark = raw["event_type"] == mark
    tid = raw["global_tid"][is_mark].astype(np.int64)
    marks = Columns({"start": raw["start"][is_mark].astype(np.int64), "text": _shared(message[is_mark]),
                     "global_tid": tid, "pid": (tid >> 24) & 0xFFFFFF}).sorted_by("start")
    is_range = np.isin(raw["event_type"], pushpop + startend)
    if not is_range.any():
        return Columns.empty_of(NVTX_COLUMNS, {"text": object, "name": object, "style": object,
                                               "unterminated": bool}), marks
    domain = _domain_names(raw, message, create, "domainId" in cols)
    ranges = {k: v[is_range] for k, v in raw.items() if k not in ("text", "text_id")}
    del raw
    unterminated = ranges["unterminated"]
    end = ranges["end"].astype(np.int64)
    if unterminated.any():   # the largest NVTX timestamp: read only where a range needs it
        end[unterminated] = database.fetch(con, f'SELECT greatest(max(start), max("end")) AS m FROM {table}')["m"][0]
    text = _shared(message[is_range])
    global_tid = ranges["global_tid"].astype(np.int64)
    domain_id = np.where(ranges["domain_null"], NO_ID, ranges["domain_id"]).astype(np.int64)
    rows = Columns({
        "row_id": ranges["row_id"].astype(np.int64), "start": ranges["start"].astype(np.int64), "end": end,
        "unterminated": unterminated, "text": text, "name": text,
        "style": np.array(["PushPop", "StartEnd"], dtype=object)[np.isin(ranges["event_type"], startend).astype(np.int8)],
        "global_tid": global_tid, "end_global_tid": ranges["end_global_tid"].astype(np.int64),
        "domain_id": domain_id, "pid": (global_tid >> 24) & 0xFFFFFF,
    })
    return _with_domains(rows, domain), marks


def _messages(text: np.ndarray, text_id: np.ndarray, strings: dict[int, str]) -> np.ndarray:
    """coalesce(StringIds.value via textId, text) per row, as an object array (None where both
    are missing)."""
    out = np.asarray(text, dtype=object).copy()
    ids = np.asarray(text_id, dtype=np.int64)
    has = np.flatnonzero(ids >= 0)
    if has.size:
        distinct, inverse = np.unique(ids[has], return_inverse=True)    # a lookup per distinct id
        values = [strings.get(int(i)) for i in distinct]
        inverse = inverse.reshape(-1)
        found = np.array([v is not None for v in values], dtype=bool)[inverse]
        out[has[found]] = np.array(values, dtype=object)[inverse[found]]
    return out


def _domain_names(raw: dict[str, np.ndarray], message: np.ndarray, create: int, has_domains: bool) -> Columns:
    """One row per (domainId, creating thread): the name of its earliest NvtxDomainCreate row,
    with the pid bits it is matched on, ordered like SQLite's GROUP BY."""
    if not has_domains:
        return Columns.empty_of(("domain_id", "pid_bits", "domain"), {"domain": object})
    rows = (raw["event_type"] == create) & ~raw["domain_null"]
    d = Columns({"domain_id": raw["domain_id"].astype(np.int64)[rows],
                 "global_tid": raw["global_tid"].astype(np.int64)[rows],
                 "start": raw["start"].astype(np.int64)[rows], "domain": message[rows]})
    d = d.sorted_by("domain_id", "global_tid", "start")
    d = d.take(run_starts(d["domain_id"]) | run_starts(d["global_tid"]))    # the earliest per thread
    d = d.take(np.array([not _missing(v) for v in d["domain"]], dtype=bool))  # SQL: d.name IS NULL
    return Columns({"domain_id": d["domain_id"], "pid_bits": d["global_tid"] & PID_BITS, "domain": d["domain"]})


def _with_domains(rows: Columns, domains: Columns) -> Columns:
    """``name`` = ``domain:text`` where the range's domain was created in its process, else
    ``text`` (a domain created on several threads of one process names the range once per thread,
    as nsys's join does: the range's row repeats)."""
    if domains.empty:
        return rows
    # the domain rows as runs of one (domain, pid bits) key each, in their order
    d_key, p_key = domains["domain_id"], domains["pid_bits"]
    order = np.lexsort((p_key, d_key))
    d_key, p_key, names = d_key[order], p_key[order], domains["domain"][order]
    first = np.flatnonzero(run_starts(d_key) | run_starts(p_key))
    count = np.diff(np.r_[first, d_key.size])
    key = np.full(len(rows), -1, dtype=np.int64)           # each range's run, -1 for none
    r_dom, r_pid = rows["domain_id"], rows["global_tid"] & PID_BITS
    for k, at in enumerate(first):                          # distinct domains, not ranges
        key[(r_dom == d_key[at]) & (r_pid == p_key[at])] = k
    repeat = np.where(key >= 0, count[np.maximum(key, 0)], 1)
    if (repeat != 1).any():
        out_rows = np.repeat(np.arange(len(rows)), repeat)
        rows, key = rows.take(out_rows), key[out_rows]
        nth = np.arange(out_rows.size) - np.repeat(np.cumsum(repeat) - repeat, repeat)
    else:
        nth = np.zeros(len(rows), dtype=np.int64)
    named = np.flatnonzero(key >= 0)
    name = rows["text"].copy()
    prefix = names[first[key[named]] + nth[named]]
    name[named] = [f"{d}:{t}" for d, t in zip(prefix, rows["text"][named])]
    return rows.assign(name=_shared(name))


def _missing(value: Any) -> bool:
    """A NULL text as sqlite3 (None) or a column reader (NaN) gives it."""
    return value is None or (isinstance(value, float) and value != value)


def _shared(values: np.ndarray) -> np.ndarray:
    """``values`` (an object array of strings, None or NaN where NULL) with equal strings as one
    object and NULL as "": a range name repeats once per step, and at 10^6 ranges one object per
    row is tens of MB."""
    codes, distinct = factorize(values)
    return np.array(["" if _missing(v) else v for v in distinct] + [""], dtype=object)[codes]


def _memory_events(trace: Trace) -> Columns | None:
    cols = trace._columns(MEMORY_USAGE_TABLE)
    if MEMORY_USAGE_TABLE not in trace.tables or not {"start", "bytes", "memoryOperationType"} <= cols:
        return None
    gpid = "globalPid" if "globalPid" in cols else "0"
    dev = "deviceId" if "deviceId" in cols else "0"
    return Columns(database.fetch(trace._con, (
        f"SELECT start, {gpid} AS global_pid, {dev} AS device_id, bytes, memoryOperationType AS op "
        f"FROM {database.CATALOG}.{MEMORY_USAGE_TABLE} ORDER BY rowid")))

"""Reading nsys SQLite exports of several versions, and refusing unusable files clearly.

Broken inputs are made from the committed real exports (a truncated copy, a copy with the NVTX
table or its ranges removed, renumbered enums) so that the schema stays nsys's own."""
from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from perfgate.analysis.ranges import range_stats
from perfgate.errors import TraceError
from perfgate.system.nsys import stats_csv
from perfgate.trace.export import load_trace
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
CPU = TRACES / "cpu-train-loop" / "trace.sqlite"
H100 = TRACES / "toy-h100" / "trace.sqlite"


def _copy(tmp_path: Path, src: Path = CPU) -> Path:
    dst = tmp_path / "trace.sqlite"
    shutil.copyfile(src, dst)
    return dst


def test_a_2022_4_export_reads_its_version_from_export_meta_data() -> None:
    t = load_trace(CPU)
    assert (t.nsys_version, t.schema_version) == ("2022.4.2.1", "3.0.0")
    assert len(t.nvtx) == 72 and set(t.nvtx["name"]) == {"step", "data_load", "h2d", "forward", "backward", "optimizer"}
    assert not t.has_gpu and t.runtime.empty


def test_a_2025_export_reads_gpu_ops_and_api_calls_of_every_kind() -> None:
    t = load_trace(H100)
    assert (t.nsys_version, t.schema_version) == ("2025.3.2.0", "3.20.3")
    assert t.gpu_ops["kind"].value_counts().to_dict() == {"kernel": 1600, "memset": 244, "memcpy": 87, "graph": 0}
    assert len(t.runtime) == 5469
    assert (t.runtime["global_pid"] == t.runtime["global_tid"] & -0x1000000).all()
    assert set(t.gpu_ops["pid"]) == {1444}


def test_the_export_is_opened_read_only(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    path.chmod(0o444)
    before = path.read_bytes()
    assert len(load_trace(path).nvtx) == 72
    assert path.read_bytes() == before and not (tmp_path / "trace.sqlite-journal").exists()


def test_event_types_are_resolved_by_name_from_the_enum_table(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:  # renumber push/pop ranges as a future schema might
        conn.execute("UPDATE ENUM_NSYS_EVENT_TYPE SET id = 1059 WHERE name = 'NvtxPushPopRange'")
        conn.execute("UPDATE NVTX_EVENTS SET eventType = 1059 WHERE eventType = 59")
    assert range_stats(load_trace(path).nvtx) == range_stats(load_trace(CPU).nvtx)


def test_registered_strings_and_domains_are_named_exactly_as_nsys_stats_names_them(tmp_path: Path, nsys_path: str) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO StringIds (id, value) VALUES (900001, 'forward_registered')")
        conn.execute("UPDATE NVTX_EVENTS SET textId = 900001, text = NULL WHERE text = 'forward'")
        tid = conn.execute("SELECT globalTid FROM NVTX_EVENTS LIMIT 1").fetchone()[0]
        conn.execute("INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId) "
                     "VALUES (1, 75, 'MyDomain', ?, 7)", (tid,))
        conn.execute("UPDATE NVTX_EVENTS SET domainId = 7 WHERE text = 'h2d'")
    got = range_stats(load_trace(path).nvtx)
    assert "forward_registered" in got and "MyDomain:h2d" in got
    want = stats_csv(Path(nsys_path), "nvtx_sum", path)
    assert {r: (got[r].count, got[r].total_ns) for r in got} == {
        str(r["Range"]).removeprefix(":"): (int(r["Instances"]), int(r["Total Time (ns)"])) for _, r in want.iterrows()}


def test_a_file_that_is_not_sqlite_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "report.sqlite"
    path.write_text("Time (%),Total Time (ns)\n")
    with pytest.raises(TraceError, match=r"report\.sqlite: not an SQLite file"):
        load_trace(path)


def test_a_truncated_export_is_refused_as_truncated_or_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "cut.sqlite"
    path.write_bytes(CPU.read_bytes()[:300_000])
    with pytest.raises(TraceError, match=r"cut\.sqlite: unreadable SQLite export \(truncated or corrupt"):
        load_trace(path)


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such trace file"):
        load_trace(tmp_path / "nope.sqlite")


def test_an_export_without_nvtx_says_nvtx_was_not_traced(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE NVTX_EVENTS")
    with pytest.raises(TraceError, match=r"trace\.sqlite: no NVTX_EVENTS table.*--trace=nvtx"):
        load_trace(path)


def test_an_export_whose_nvtx_table_holds_no_ranges_is_refused(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM NVTX_EVENTS WHERE eventType IN (59, 60)")
    with pytest.raises(TraceError, match="holds no push/pop or start/end ranges"):
        load_trace(path)


def test_the_pypi_nvtx_package_capture_on_2022_4_is_refused_as_rangeless(tmp_path: Path) -> None:
    """nsys 2022.4 records the ``nvtx`` package's ranges of a CPU process as nothing but one domain
    creation (eventType 76): the committed 2022.4 export with its ranges replaced by that one row."""
    path = _copy(tmp_path)
    with sqlite3.connect(path) as conn:
        tid, start = conn.execute("SELECT globalTid, min(start) FROM NVTX_EVENTS").fetchone()
        conn.execute("DELETE FROM NVTX_EVENTS")
        conn.execute("INSERT INTO NVTX_EVENTS (start, eventType, globalTid, domainId) VALUES (?, 76, ?, 0)",
                     (start, tid))
    with pytest.raises(TraceError, match="holds no push/pop or start/end ranges"):
        load_trace(path)


def test_narrow_gpu_op_columns_widen_where_a_value_does_not_fit(tmp_path: Path) -> None:
    """Correlation ids and byte counts are read as int32 and widened to int64 where a value needs
    it; the values and the launch join are those of the export."""
    path = _copy(tmp_path, H100)
    with sqlite3.connect(path) as conn:
        rowid, corr = conn.execute("SELECT rowid, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
        big = corr + (1 << 33)
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = ? WHERE rowid = ?", (big, rowid))
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = ? WHERE correlationId = ?", (big, corr))
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = ? WHERE rowid = "
                     "(SELECT min(rowid) FROM CUPTI_ACTIVITY_KIND_MEMCPY)", (3 << 30,))
    t = load_trace(path)
    ops, _ = t.gpu()
    assert ops.correlation_id.dtype == np.int64 and ops.bytes.dtype == np.int64
    assert ops.correlation_id[0] == big and ops.api_start[0] >= 0          # still joined to its call
    assert (3 << 30) in ops.bytes.tolist()
    assert load_trace(H100).ops.correlation_id.dtype == np.int32            # where every id fits


def test_an_op_whose_global_pid_differs_above_the_pid_is_not_joined(tmp_path: Path) -> None:
    """The launch join compares the whole globalPid: an op whose bits above the pid differ from its
    call's (another host or VM) stays unjoined, and ``global_pid`` gives its own value back."""
    path = _copy(tmp_path, H100)
    with sqlite3.connect(path) as conn:
        rowid, gpid = conn.execute("SELECT rowid, globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
        conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = ? WHERE rowid = ?", (gpid + (1 << 56), rowid))
    ops, _ = load_trace(path).gpu()
    assert ops.pid_rest.strides != (0,)                                   # held per op here
    assert ops.global_pid[0] == gpid + (1 << 56) and ops.global_pid[1] == gpid
    assert ops.api_start[0] == -1 and (ops.api_start[1:] >= 0).mean() > 0.9
    assert load_trace(H100).ops.pid_rest.strides == (0,)                  # one value, held once

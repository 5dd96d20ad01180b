"""perfgate.trace.columns (the analysis's tables without pandas) against pandas as the oracle, the sqlite3
integer reader against the row reader, and ``perfgate analyze`` importing no pandas."""
from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from perfgate.analysis.gpu_work import peak_memory
from perfgate.analysis.steps import _most_frequent
from perfgate.errors import TraceError
from perfgate.trace import database as columnar
from perfgate.trace.columns import (
    Columns, descending_order, factorize, first_seen, grouped_cummax, previous_max, run_starts,
)
from layout import REPO

ROOT = REPO
TRACES = ROOT / "tests" / "fixtures" / "traces"


def test_factorize_numbers_values_in_first_seen_order_as_pandas_does() -> None:
    rng = np.random.default_rng(3)
    words = np.array([f"phase{k}" for k in rng.integers(0, 9, size=300)], dtype=object)
    ints = rng.integers(-5, 40, size=300)
    for values in (words, ints):
        codes, distinct = factorize(values)
        want_codes, want = pd.factorize(values)
        assert codes.tolist() == want_codes.tolist() and distinct == list(want)
    assert first_seen(ints).tolist() == pd.unique(ints).tolist()


def test_descending_order_breaks_ties_as_pandas_sort_values_does() -> None:
    rng = np.random.default_rng(5)
    for size in (5, 17, 64, 400):                 # insertion sort below 17 elements, quicksort above
        totals = rng.integers(0, 6, size=size)    # many ties
        want = pd.Series(totals).sort_values(ascending=False).index.to_numpy()
        assert descending_order(totals).tolist() == want.tolist()


def test_most_frequent_lists_names_as_value_counts_does() -> None:
    rng = np.random.default_rng(11)
    names = np.array([f"r{k}" for k in rng.integers(0, 12, size=200)], dtype=object)
    want = pd.Series(names).value_counts()
    assert _most_frequent(names) == list(zip(want.index.tolist(), want.tolist()))


def test_running_maxima_restart_per_group_on_either_path() -> None:
    rng = np.random.default_rng(2)
    groups = np.sort(rng.integers(0, 7, size=120))
    starts = run_starts(groups)
    assert starts.tolist() == np.r_[True, groups[1:] != groups[:-1]].tolist()
    for values in (rng.integers(0, 1000, size=120),                        # lifted: one accumulate
                   rng.integers(-2**62, 2**62, size=120, dtype=np.int64)):  # too wide to lift: per group
        want = pd.Series(values).groupby(groups).cummax()
        assert grouped_cummax(values, starts).tolist() == want.tolist()
        shifted = want.groupby(groups).shift(1).to_numpy()
        got = previous_max(values, starts)
        assert np.array_equal(got, shifted, equal_nan=True)


def test_peak_memory_is_the_largest_running_total_of_one_process_and_device() -> None:
    rng = np.random.default_rng(9)
    n = 300
    events = Columns({"start": rng.integers(0, 50, size=n), "global_pid": rng.integers(1, 3, size=n),
                      "device_id": rng.integers(0, 2, size=n), "bytes": rng.integers(1, 1000, size=n),
                      "op": rng.integers(0, 2, size=n)})
    ev = events.frame().sort_values("start", kind="stable")
    signed = np.where(ev["op"] == 0, 1, -1) * ev["bytes"]
    want = int(max(signed.groupby([ev["global_pid"], ev["device_id"]]).cumsum().max(), 0))
    assert peak_memory(events) == want


def test_columns_select_sort_and_assign_without_touching_the_table() -> None:
    t = Columns({"pid": np.array([2, 1, 2, 1]), "start": np.array([5, 9, 1, 3]), "name": np.array(list("abcd"), dtype=object)})
    s = t.sorted_by("pid", "start")
    assert s["name"].tolist() == ["d", "b", "c", "a"] and t["name"].tolist() == ["a", "b", "c", "d"]
    assert t.take(t["pid"] == 2).assign(phase="x")["phase"].tolist() == ["x", "x"]
    assert len(Columns.concat([t, t])) == 8 and t.frame().shape == (4, 3)
    with pytest.raises(ValueError, match="different lengths"):
        Columns({"a": np.zeros(2), "b": np.zeros(3)})


def test_the_sqlite3_integer_reader_gives_the_rows_the_row_reader_gives() -> None:
    path = TRACES / "gpu-transformer" / "trace.sqlite"
    con = columnar.SqliteConnection(path)
    exprs = {"start": "start", "end": '"end"', "corr": "coalesce(correlationId, -1)", "name": "coalesce(nameId, -1)"}
    got = list(columnar.stream_integers(con, "CUPTI_ACTIVITY_KIND_RUNTIME", exprs, rows=5000))
    assert len(got) > 2                                      # several chunks
    want = columnar.fetch(con, 'SELECT start, "end", coalesce(correlationId, -1) AS corr, coalesce(nameId, -1) AS name '
                               f"FROM {columnar.CATALOG}.CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY rowid")
    for k in exprs:
        assert np.concatenate([c[k] for c in got]).tolist() == want[k].tolist()


@pytest.mark.parametrize("value, problem", [("'12abc'", "not an integer"), ("NULL", "NULL or non-integer")])
def test_the_integer_reader_refuses_a_column_that_is_not_integers(tmp_path: Path, value: str, problem: str) -> None:
    path = tmp_path / "t.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE T (start INTEGER, x)")
        db.executemany("INSERT INTO T VALUES (?, ?)", [(1, 1), (2, 2)])
        db.execute(f"INSERT INTO T VALUES (3, {value})")
    con = columnar.SqliteConnection(path)
    with pytest.raises(TraceError, match=f"T: column x .*{problem}"):
        list(columnar.stream_integers(con, "T", {"start": "start", "x": "x"}))


def test_perfgate_analyze_imports_no_pandas() -> None:
    """pandas takes longer to import than the whole analysis of a capture: not on this path."""
    trace = TRACES / "gpu-transformer" / "trace.sqlite"
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "perfgate", "analyze", str(trace), "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"diagnosis": {' in done.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert "numpy" in imported and not imported & {"pandas", "scipy"}


def test_read_ahead_gives_what_the_analysis_would_read_itself(tmp_path: Path) -> None:
    from perfgate.trace import read_ahead

    path = TRACES / "gpu-transformer" / "trace.sqlite"
    read_ahead.start_reading(path)
    exprs = read_ahead.call_columns({"nameId"})
    ahead = read_ahead.take(path, read_ahead.RUNTIME_TABLE, exprs)
    con = read_ahead.attach(path)
    assert ahead is not None and ahead == list(read_ahead.concat_chunks(con, read_ahead.RUNTIME_TABLE, exprs))
    assert read_ahead.take(path, read_ahead.RUNTIME_TABLE, exprs) is None        # taken once
    kernels = read_ahead.op_columns({"start", "end", "correlationId", "globalPid", "deviceId", "shortName"})
    assert kernels is not None and kernels["name_id"] == "coalesce(shortName, -1)"
    assert read_ahead.take(path, read_ahead.GPU_OP_TABLES["kernel"], kernels) is None   # other columns: not read
    big = TRACES / "gpu-ddp-2proc" / "trace.sqlite"                 # over SQLITE3_BELOW_BYTES: DuckDB reads it
    read_ahead.start_reading(big)
    assert read_ahead.take(big, read_ahead.RUNTIME_TABLE, exprs) is None
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(path.read_bytes()[:50_000])                  # truncated: start says nothing, load_trace does
    read_ahead.start_reading(broken)
    with pytest.raises(TraceError, match="broken.sqlite"):
        from perfgate.trace.export import load_trace

        load_trace(broken).gpu()

"""Without duckdb (a GPU runner with no package index), exports are read through Python's sqlite3:
``perfgate analyze`` must print exactly what it prints with DuckDB."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from layout import REPO

ROOT = REPO
TRACES = ROOT / "tests" / "fixtures" / "traces"
NO_DUCKDB = ("import runpy, sys; sys.modules['duckdb'] = None; sys.argv = ['perfgate'] + sys.argv[1:]; "
             "runpy.run_module('perfgate', run_name='__main__')")
# DuckDB whatever the export's size (small exports are otherwise read through sqlite3 too)
WITH_DUCKDB = ("import runpy, sys; import perfgate.trace.database as c; c.SQLITE3_BELOW_BYTES = 0; "
               "sys.argv = ['perfgate'] + sys.argv[1:]; runpy.run_module('perfgate', run_name='__main__')")


def _analyze(prefix: list[str], trace: Path) -> str:
    out = subprocess.run([*prefix, "analyze", str(trace), "--format", "json", "--warmup-steps", "3"],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout


@pytest.mark.parametrize("name", ["gpu-lightning-loop", "gpu-ddp-2proc", "cpu-train-loop"])
def test_sqlite3_reader_gives_the_same_analysis_as_duckdb(name: str) -> None:
    trace = TRACES / name / "trace.sqlite"
    with_duckdb = _analyze([sys.executable, "-c", WITH_DUCKDB], trace)
    without = _analyze([sys.executable, "-c", NO_DUCKDB], trace)
    assert '"steps"' in with_duckdb and without == with_duckdb


def test_without_duckdb_the_reader_is_sqlite3(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.trace import database as columnar

    monkeypatch.setitem(sys.modules, "duckdb", None)
    con = columnar.connect(TRACES / "cpu-train-loop" / "trace.sqlite")
    assert isinstance(con, columnar.SqliteConnection)
    n = columnar.fetch(con, f"SELECT count(*) AS n FROM {columnar.CATALOG}.NVTX_EVENTS")["n"][0]
    assert n == 72   # sqlite3 itself: SELECT count(*) FROM NVTX_EVENTS


def test_small_exports_are_read_through_sqlite3(monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.trace import database as columnar

    trace = TRACES / "cpu-train-loop" / "trace.sqlite"          # 3 MB: below the size
    assert isinstance(columnar.connect(trace), columnar.SqliteConnection)
    pytest.importorskip("duckdb")
    monkeypatch.setattr(columnar, "SQLITE3_BELOW_BYTES", 0)
    assert not isinstance(columnar.connect(trace), columnar.SqliteConnection)

"""Locating nsys, its version and report names, SQLite export and stats CSVs, with the real nsys."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

from layout import TESTS
from nsys_run import run_supervised
from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.errors import ConfigError, NsysNotFoundError
from perfgate.system import nsys as nsys_mod
from perfgate.system.nsys import (
    export_sqlite, find_nsys, nsys_version, resolve_report_name, stats_csv, stats_report_names,
)

CPU = TESTS / "fixtures" / "traces" / "cpu-train-loop" / "trace.sqlite"
SCRIPT = """
import time
""" + NVTX + """for i in range(4):
    nvtx.range_push("train_step")
    nvtx.range_push("forward"); time.sleep(0.003); nvtx.range_pop()
    nvtx.range_pop()
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module) -> Path:
    """A real .nsys-rep (no --export), captured once for this module."""
    d = tmp_path_factory.mktemp("rep")
    (d / "w.py").write_text(SCRIPT)
    run_supervised([nsys_path, "profile", "--trace=nvtx", "--sample=none", "--cpuctxsw=none",
                    "-o", str(d / "w"), "-f", "true", sys.executable, str(d / "w.py")],
                   check=True, timeout=300)
    return d / "w.nsys-rep"


def test_an_explicit_path_wins_over_path_and_env(nsys_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERFGATE_NSYS", "/nonexistent/nsys")
    assert find_nsys(nsys_path) == Path(nsys_path)


def test_the_env_variable_may_name_the_folder_holding_nsys(nsys_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path(os.path.realpath(nsys_path))
    monkeypatch.setenv("PERFGATE_NSYS", str(real.parent))
    assert find_nsys() == real.parent / "nsys"


def test_a_bad_explicit_path_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(NsysNotFoundError, match=r"^nsys not found: option names .*missing, which is not an executable"):
        find_nsys(str(tmp_path / "missing"))


def test_not_found_lists_every_place_searched(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PERFGATE_NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(nsys_mod, "SEARCH_GLOBS", (str(tmp_path / "cuda*/bin/nsys"),))
    with pytest.raises(NsysNotFoundError, match=r"looked in \$PATH, .*cuda\*/bin/nsys"):
        find_nsys()


def test_version_and_report_names_come_from_the_real_nsys(nsys_path: str) -> None:
    exe = Path(nsys_path)
    version = nsys_version(exe)
    assert version.split(".")[0].isdigit() and len(version.split(".")[0]) == 4
    names = stats_report_names(exe)
    assert {"nvtxsum", "nvtx_sum"} & names
    assert resolve_report_name(exe, "nvtx_sum") in {"nvtx_sum", "nvtxsum"}
    assert resolve_report_name(exe, "cuda_gpu_kern_sum") in {"cuda_gpu_kern_sum", "gpukernsum"}
    with pytest.raises(ConfigError, match="no stats report 'no_such_report'"):
        resolve_report_name(exe, "no_such_report")


def test_stats_csv_reads_the_nvtx_summary_under_either_name(nsys_path: str) -> None:
    df = stats_csv(Path(nsys_path), "nvtx_sum", CPU)
    rows = df.assign(r=df["Range"].str.removeprefix(":")).set_index("r")
    assert rows.loc["step", "Instances"] == 12 and rows.loc["data_load", "Instances"] == 12


def test_a_report_is_exported_to_sqlite_and_analyzed(report: Path, nsys_path: str) -> None:
    out = export_sqlite(report, Path(nsys_path))
    assert out == report.with_suffix(".sqlite") and out.read_bytes()[:15] == b"SQLite format 3"
    a = analyze_trace(report, AnalysisOptions(skip_steps=1))
    assert (a.steps.range_name, a.steps.count, list(a.phases)) == ("train_step", 2, ["forward", "between_steps"])
    assert a.phases["forward"].cpu_median_ms >= 3.0

"""How fast analyze_trace is compared with ``nsys stats`` on the same export.

Run: ``python -m pytest benchmarks/bench_analyze.py --benchmark-only -s``.

The large case is a scaled real trace: the toy H100 export's NVTX, CUDA API and GPU tables are
replicated with SQL ``INSERT ... SELECT`` (timestamps shifted by one trace span per copy,
correlation ids offset per copy) until it holds >= 1,000,000 GPU operations."""
from __future__ import annotations

import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import tracemalloc
from pathlib import Path

import pytest

from perfgate.analysis import AnalysisOptions, analyze_trace
from perfgate.system.nsys import resolve_report_name

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from fixture_files import unpack  # noqa: E402  (the committed exports are stored as .sqlite.xz)

unpack()
H100 = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "traces" / "toy-h100" / "trace.sqlite"
GPU_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
TARGET_OPS = 1_000_000


def build_scaled_export(src: Path, dst: Path, target_ops: int = TARGET_OPS, every_table: bool = False) -> int:
    """Copy ``src`` and replicate its event tables until there are >= target_ops GPU ops: NVTX, CUDA
    API and GPU tables, or with ``every_table`` each table of timed events (OS runtime calls, CUDA
    synchronisation, nsys's own overhead too: the rows a real capture has per GPU operation)."""
    shutil.copyfile(src, dst)
    with sqlite3.connect(dst) as conn:
        timed = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
                 if {"start", "end"} <= {r[1] for r in conn.execute(f"PRAGMA table_info({t})")}]
        ops = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in GPU_TABLES)
        copies = -(-target_ops // ops)
        lo, hi = conn.execute("SELECT min(start), max(\"end\") FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
        span = hi - lo + 1_000_000
        corr = conn.execute("SELECT max(correlationId) + 1 FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()[0]
        conn.execute("CREATE TEMP TABLE k(i INTEGER)")
        conn.executemany("INSERT INTO k VALUES (?)", [(i,) for i in range(1, copies)])
        tables = timed if every_table else [t for t in ("NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", *GPU_TABLES)
                                            if t in timed]
        for table in tables:
            cols = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            expr = []
            for c in cols:
                if c in ("start", "end"):
                    expr.append(f'"{c}" + k.i * {span}')
                elif c == "correlationId":
                    expr.append(f"correlationId + k.i * {corr}")
                else:
                    expr.append(f'"{c}"')
            quoted = ", ".join(f'"{c}"' for c in cols)
            # copy by copy, each in the table's order: a thread's calls stay in start order, as nsys writes them
            conn.execute(f"INSERT INTO {table} ({quoted}) SELECT {', '.join(expr)} FROM k, {table} "
                         f"ORDER BY k.i, {table}.rowid")
        total = sum(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in GPU_TABLES)
    return total


@pytest.fixture(scope="session")
def nsys_path() -> str:
    path = shutil.which("nsys")
    if path is None:
        pytest.skip("nsys not on PATH")
    return path


@pytest.fixture(scope="module")
def large(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("large") / "scaled.sqlite"
    n = build_scaled_export(H100, path)
    assert n >= TARGET_OPS
    print(f"\nscaled export: {n} GPU ops, {path.stat().st_size / 2**20:.0f} MiB")
    return path


def _analyze_with_memory(path: Path) -> tuple[object, int]:
    tracemalloc.start()
    a = analyze_trace(path, AnalysisOptions(skip_steps=5))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return a, peak


def test_analyze_toy_h100(benchmark) -> None:
    a = benchmark(analyze_trace, H100)
    assert a.steps.count == 35


def test_analyze_scaled_export_of_a_million_gpu_ops(benchmark, large: Path) -> None:
    a = benchmark.pedantic(analyze_trace, args=(large, AnalysisOptions(skip_steps=5)), rounds=3, iterations=1)
    _, peak = _analyze_with_memory(large)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    benchmark.extra_info.update(peak_python_mb=peak / 2**20, max_rss_mb=rss)
    print(f"\nanalyze_trace peak traced memory {peak / 2**20:.0f} MiB, process max RSS {rss:.0f} MiB")
    assert a.steps.count > 10_000 and a.gpu.kernels_per_step == pytest.approx(40)


ALL_REPORTS = ("nvtx_sum", "nvtx_gpu_proj_trace", "cuda_gpu_kern_sum")
# nsys 2022.4's nvtxgpuproj did not finish within 15 minutes on the scaled export (its R-tree
# range join over 2.8 M API calls), so the scaled comparison runs the two summary reports only.
SCALED_REPORTS = ("nvtx_sum", "cuda_gpu_kern_sum")


def _nsys_stats(nsys: str, path: Path, out: Path, reports: tuple[str, ...] = ALL_REPORTS) -> None:
    names = [resolve_report_name(Path(nsys), r) for r in reports]
    out = Path(tempfile.mkdtemp(dir=out)) / "o"  # a fresh prefix: nsys stats skips existing outputs
    subprocess.run([nsys, "stats", "-q", "-r", ",".join(names), "-f", "csv", "-o", str(out), str(path)],
                   check=True, capture_output=True)


def test_nsys_stats_toy_h100(benchmark, nsys_path: str, tmp_path: Path) -> None:
    benchmark.pedantic(_nsys_stats, args=(nsys_path, H100, tmp_path), rounds=3, iterations=1)


def test_nsys_stats_scaled_export(benchmark, nsys_path: str, large: Path, tmp_path: Path) -> None:
    benchmark.pedantic(_nsys_stats, args=(nsys_path, large, tmp_path, SCALED_REPORTS),
                       rounds=1, iterations=1)

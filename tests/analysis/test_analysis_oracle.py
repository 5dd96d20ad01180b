"""perfgate's numbers equal nsys's own reports on every committed capture.

Parametrized over tests/fixtures/traces/*/: each directory holds trace.sqlite and the CSVs
``nsys stats`` printed for it (named <report>.csv); whichever CSVs exist are checked."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from perfgate.analysis.projection import project_ranges, projection_summary
from perfgate.analysis.ranges import range_stats
from perfgate.trace.export import load_trace
from layout import TESTS

TRACES = TESTS / "fixtures" / "traces"
CASES = sorted(p for p in TRACES.iterdir() if (p / "trace.sqlite").is_file())


def _with(*names: str) -> list[Path]:
    """The captures that hold one of these ``nsys stats`` CSVs (the others have nothing to check)."""
    return [c for c in CASES if any((c / f"{name}.csv").is_file() for name in names)]


def _csv(case: Path, *names: str) -> pd.DataFrame | None:
    for name in names:
        if (case / f"{name}.csv").is_file():
            return pd.read_csv(case / f"{name}.csv", keep_default_na=False)
    return None


def test_there_are_committed_captures_of_both_a_cpu_and_a_gpu_trace() -> None:
    names = {c.name for c in CASES}
    assert len(CASES) >= 3 and any("cpu" in n for n in names) and any("h100" in n for n in names)


@pytest.mark.parametrize("case", _with("nvtx_sum", "nvtxsum"), ids=lambda p: p.name)
def test_range_counts_and_totals_equal_nsys_nvtx_sum(case: Path) -> None:
    expected = _csv(case, "nvtx_sum", "nvtxsum")
    assert expected is not None
    names = expected["Range"].astype(str).str.removeprefix(":")
    want = (expected.assign(key=names).groupby("key")
            .agg(count=("Instances", "sum"), total=("Total Time (ns)", "sum")))
    got = range_stats(load_trace(case / "trace.sqlite").nvtx)
    assert set(got) == set(want.index)
    for name, row in want.iterrows():
        assert (got[name].count, got[name].total_ns) == (int(row["count"]), int(row["total"])), name


@pytest.mark.parametrize("case", _with("nvtx_gpu_proj_sum", "nvtx_gpu_proj_trace", "nvtxgpuproj"),
                         ids=lambda p: p.name)
def test_thread_projection_equals_nsys_nvtx_gpu_projection(case: Path) -> None:
    summary = _csv(case, "nvtx_gpu_proj_sum")
    trace_csv = _csv(case, "nvtx_gpu_proj_trace", "nvtxgpuproj")
    trace = load_trace(case / "trace.sqlite")
    got = projection_summary(project_ranges(trace.nvtx, trace.gpu()[0]))   # ops joined to their launches
    got = got.assign(name=got["name"].str.removeprefix(":")).set_index(["name", "style"])
    if summary is not None:
        want = summary.assign(name=summary["Range"].str.removeprefix(":")).set_index(["name", "Style"])
        want = want[["Total Proj Time (ns)", "Total Range Time (ns)", "Range Instances", "Total GPU Ops"]]
        assert sorted(got.index) == sorted(want.index)
        for key, row in want.iterrows():
            assert tuple(int(v) for v in got.loc[key, ["total_proj_ns", "total_range_ns", "instances",
                                                         "total_gpu_ops"]]) == tuple(int(v) for v in row), key
    if trace_csv is not None:
        t = trace_csv.assign(name=trace_csv["Name"].str.removeprefix(":"))
        want = t.groupby(["name", "Style"]).agg(
            proj=("Projected Duration (ns)", "sum"), dur=("Orig Duration (ns)", "sum"),
            n=("Name", "size"), ops=("NumGPUOps", "sum"))
        assert sorted(got.index) == sorted(want.index)
        for key, row in want.iterrows():
            assert tuple(int(v) for v in got.loc[key, ["total_proj_ns", "total_range_ns", "instances",
                                                         "total_gpu_ops"]]) == tuple(int(v) for v in row), key


@pytest.mark.parametrize("case", _with("cuda_gpu_kern_sum", "gpukernsum"), ids=lambda p: p.name)
def test_kernel_count_and_time_equal_nsys_kernel_summary(case: Path) -> None:
    expected = _csv(case, "cuda_gpu_kern_sum", "gpukernsum")
    assert expected is not None
    ops = load_trace(case / "trace.sqlite").gpu_ops
    kernels = ops[ops["kind"] == "kernel"]
    assert len(kernels) == int(expected["Instances"].sum())
    assert int((kernels["end"] - kernels["start"]).sum()) == int(expected["Total Time (ns)"].sum())

"""Per-range cost of perfgate.nvtx without nsys attached (pytest-benchmark).

    python -m pytest benchmarks/bench_nvtx.py --benchmark-only

Each benchmark round opens and closes 100 ranges; divide the time by 100 for one range.
The goal: well under a microsecond per range, i.e. nothing measurable next to a training step.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from perfgate import nvtx

RANGES_PER_ROUND = 100


@pytest.fixture(params=["torch", "noop"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    chosen = nvtx.choose_backend({}) if request.param == "torch" else nvtx.NOOP
    if chosen.name != request.param:
        pytest.skip(f"the {request.param} NVTX backend is not available here")
    nvtx.select(chosen)
    yield chosen.name
    nvtx.select()


def _context_ranges() -> None:
    for _ in range(RANGES_PER_ROUND):
        with nvtx.range("forward"):
            pass


def _push_pop() -> None:
    push, pop = nvtx.push, nvtx.pop
    for _ in range(RANGES_PER_ROUND):
        push("forward")
        pop()


def _empty_loop() -> None:
    for _ in range(RANGES_PER_ROUND):
        pass


@pytest.mark.parametrize("body", [_context_ranges, _push_pop], ids=["range", "push_pop"])
def test_range_cost_without_nsys(benchmark, backend: str, body: Callable[[], None]) -> None:
    benchmark.group = "nvtx: 100 ranges"
    benchmark(body)
    assert nvtx.backend() == backend


def test_empty_loop_for_reference(benchmark) -> None:
    benchmark.group = "nvtx: 100 ranges"
    benchmark(_empty_loop)

"""Per-call cost of autostep's wrappers and hooks without nsys (pytest-benchmark).

    python -m pytest benchmarks/bench_autostep.py --benchmark-only

Each wrapper is built around a no-op stand-in of the function it wraps, so a round measures the
wrapper alone: the thread-local checks, ``torch.compiler.is_compiling()``, one NVTX push and pop.
Compare with the ``bare`` rows (the stand-in called directly). Needs a torch with NVTX.
"""
from __future__ import annotations

import types
from collections.abc import Callable

import pytest

from perfgate.capture.autostep import install as autostep

CALLS_PER_ROUND = 100


def _wrappers() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """name -> (bare call, wrapped call)."""
    pytest.importorskip("torch")
    inst = autostep._Installation(None)
    if inst.ranges("perfgate/probe") is None:
        pytest.skip("torch has no NVTX binding")
    autograd = types.SimpleNamespace(__name__="torch.autograd", backward=lambda *a, **k: None)
    bare_backward = autograd.backward
    autostep._patch_autograd(inst, autograd)

    class Iter:
        def __next__(self) -> None:
            return None

    bare_it = Iter()
    bare_next = Iter.__next__
    autostep._patch_dataloader(inst, types.SimpleNamespace(__name__="torch.utils.data.dataloader",
                                                           _BaseDataLoaderIter=Iter))
    hooks: dict[str, Callable[..., object]] = {}
    handle = types.SimpleNamespace(remove=lambda: None)
    optim = types.SimpleNamespace(
        __name__="torch.optim.optimizer", _global_optimizer_pre_hooks={},
        register_optimizer_step_pre_hook=lambda h: hooks.__setitem__("pre", h) or handle,
        register_optimizer_step_post_hook=lambda h: hooks.__setitem__("post", h) or handle,
    )
    autostep._patch_optimizer(inst, optim)
    pre, post = hooks["pre"], hooks["post"]

    def noop_hook(optimizer: object, args: object, kwargs: object) -> None:
        return None

    return {
        "backward": (lambda: bare_backward(1, None, False, False, inputs=None),
                     lambda: autograd.backward(1, None, False, False, inputs=None)),
        "data_load": (lambda: bare_next(bare_it), lambda: next(bare_it)),
        "optimizer": (lambda: (noop_hook(None, (), {}), noop_hook(None, (), {})),
                      lambda: (pre(None, (), {}), post(None, (), {}))),
    }


@pytest.mark.parametrize("variant", ["bare", "autostep"])
@pytest.mark.parametrize("hook", ["backward", "data_load", "optimizer"])
def test_wrapper_cost_without_nsys(benchmark, hook: str, variant: str) -> None:
    bare, wrapped = _wrappers()[hook]
    call = wrapped if variant == "autostep" else bare

    def body() -> None:
        for _ in range(CALLS_PER_ROUND):
            call()

    benchmark.group = f"autostep {hook}: {CALLS_PER_ROUND} calls"
    benchmark(body)

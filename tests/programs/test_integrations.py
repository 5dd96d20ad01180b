"""perfgate.integrations: the Hugging Face and Lightning callbacks' NVTX ranges, recorded from real
(tiny, CPU) Trainer runs with perfgate.nvtx's push/pop replaced by a recorder.

Each run records one list of events: the callback's ``push NAME``/``pop`` and markers of the
work itself (``forward``, ``backward`` when autograd reaches the loss, ``optimizer.step`` when
the optimizer's step has finished, ``data`` per sample loaded), so a range that opens or closes
on the wrong side of the work fails the exact comparison."""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from perfgate import nvtx

DATA = "data"


def _require(module: str) -> ModuleType:
    """Import ``module``, or skip (fail under PERFGATE_REQUIRE_REAL=1, as tests/conftest.py)."""
    try:
        return importlib.import_module(module)
    except Exception as exc:  # pragma: no cover - depends on machine
        if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
            pytest.fail(f"{module} is required in CI (PERFGATE_REQUIRE_REAL=1) but missing: {exc}", pytrace=False)
        pytest.skip(f"{module} not available ({exc})")


@pytest.fixture
def events(monkeypatch) -> list[str]:
    """What the callbacks push and pop through perfgate.nvtx, in order (plus the tests' markers)."""
    recorded: list[str] = []
    monkeypatch.setattr(nvtx, "push", lambda name: recorded.append(f"push {name}"))
    monkeypatch.setattr(nvtx, "pop", lambda: recorded.append("pop"))
    return recorded


def _without_data(recorded: list[str]) -> list[str]:
    return [e for e in recorded if e != DATA]


def _open_at_each_load(recorded: list[str]) -> list[tuple[str, ...]]:
    """The callback's open ranges when each sample was loaded; asserts pops never outnumber pushes."""
    stack: list[str] = []
    seen: list[tuple[str, ...]] = []
    for event in recorded:
        if event.startswith("push "):
            stack.append(event[5:])
        elif event == "pop":
            assert stack, f"pop with nothing open in {recorded}"
            stack.pop()
        elif event == DATA:
            seen.append(tuple(stack))
    return seen


def _balanced(recorded: list[str]) -> bool:
    return sum(e.startswith("push ") for e in recorded) == recorded.count("pop")


def _markers(recorded: list[str]) -> dict[str, Callable[..., Any]]:
    return {
        "forward": lambda: recorded.append("forward"),
        "backward": lambda grad: recorded.append("backward"),
        "step": lambda *args: recorded.append("optimizer.step"),
        "data": lambda: recorded.append(DATA),
    }


# --------------------------------------------------------------------------- Hugging Face


def _hf_train(recorded: list[str], tmp_path: Path, *, steps: int = 2, accumulation: int = 1,
              fail_on_forward: int | None = None, callback: Any = None, phases: bool = True) -> Any:
    """Run a tiny ``Trainer`` on the CPU with the callback; returns the callback."""
    torch = _require("torch")
    transformers = _require("transformers")
    from perfgate.integrations.hf import PerfgateCallback

    mark = _markers(recorded)

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)
            self.calls = 0

        def forward(self, x: Any, labels: Any) -> dict[str, Any]:
            self.calls += 1
            mark["forward"]()
            if self.calls == fail_on_forward:
                raise RuntimeError("boom in forward")
            loss = torch.nn.functional.mse_loss(self.linear(x), labels)
            loss.register_hook(mark["backward"])
            return {"loss": loss}

    class Samples(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int) -> dict[str, Any]:
            mark["data"]()
            generator = torch.Generator().manual_seed(index)
            return {"x": torch.randn(4, generator=generator), "labels": torch.randn(1, generator=generator)}

    torch.manual_seed(0)
    model = Tiny()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    optimizer.register_step_post_hook(mark["step"])
    callback = callback or PerfgateCallback(phases=phases)
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=steps, per_device_train_batch_size=2,
        gradient_accumulation_steps=accumulation, use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0, seed=0,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Samples(), callbacks=[callback],
                                   optimizers=(optimizer, None))
    trainer.train()
    return callback


HF_STEP = ["push step", "push forward_backward", "forward", "backward", "pop",
           "push optimizer", "optimizer.step", "pop", "pop"]


def test_hf_callback_nests_step_and_phases_around_each_optimizer_step(events, tmp_path) -> None:
    callback = _hf_train(events, tmp_path, steps=2)
    assert _without_data(events) == HF_STEP * 2
    assert callback.open_ranges == ()
    assert all(open_ranges == () for open_ranges in _open_at_each_load(events))   # loading: between steps


def test_hf_callback_gives_one_step_per_optimizer_step_under_gradient_accumulation(events, tmp_path) -> None:
    _hf_train(events, tmp_path, steps=2, accumulation=2)
    one_step = ["push step", "push forward_backward", "forward", "backward", "forward", "backward", "pop",
                "push optimizer", "optimizer.step", "pop", "pop"]
    assert _without_data(events) == one_step * 2
    assert all(open_ranges == () for open_ranges in _open_at_each_load(events))


def test_hf_callback_without_phases_emits_step_ranges_only(events, tmp_path) -> None:
    _hf_train(events, tmp_path, steps=2, phases=False)
    assert _without_data(events) == ["push step", "forward", "backward", "optimizer.step", "pop"] * 2


def test_hf_callback_closes_what_an_exception_left_open_when_training_restarts(events, tmp_path) -> None:
    from perfgate.integrations.hf import PerfgateCallback

    callback = PerfgateCallback()
    with pytest.raises(RuntimeError, match="boom"):
        _hf_train(events, tmp_path, steps=2, fail_on_forward=2, callback=callback)
    # Trainer has no exception hook: what the failed step opened stays open...
    assert _without_data(events) == HF_STEP + ["push step", "push forward_backward", "forward"]
    assert callback.open_ranges == ("step", "forward_backward")
    events.clear()
    _hf_train(events, tmp_path, steps=1, callback=callback)      # ...until a retry (auto_find_batch_size)
    assert _without_data(events) == ["pop", "pop"] + HF_STEP
    assert callback.open_ranges == ()


def test_hf_callback_close_pops_only_what_it_opened(events, tmp_path) -> None:
    from perfgate.integrations.hf import PerfgateCallback

    callback = PerfgateCallback()
    with pytest.raises(RuntimeError, match="boom"):
        _hf_train(events, tmp_path, steps=1, fail_on_forward=1, callback=callback)
    events.clear()
    callback.close()
    callback.close()
    assert events == ["pop", "pop"]


# --------------------------------------------------------------------------- Lightning


def _lightning_fit(recorded: list[str], *, steps: int = 2, accumulation: int = 1,
                   fail_on_batch: int | None = None) -> Any:
    """Fit a tiny LightningModule on the CPU with the callback; returns the callback."""
    torch = _require("torch")
    try:
        pl = importlib.import_module("lightning.pytorch")
    except ImportError:
        pl = _require("pytorch_lightning")
    from perfgate.integrations.lightning import PerfgateCallback

    mark = _markers(recorded)

    class Samples(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, index: int) -> tuple[Any, Any]:
            mark["data"]()
            generator = torch.Generator().manual_seed(index)
            return torch.randn(4, generator=generator), torch.randn(1, generator=generator)

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            mark["forward"]()
            if batch_idx == fail_on_batch:
                raise RuntimeError("boom in training_step")
            x, y = batch
            loss = torch.nn.functional.mse_loss(self.linear(x), y)
            loss.register_hook(mark["backward"])
            return loss

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.01)
            optimizer.register_step_post_hook(mark["step"])
            return optimizer

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(Samples(), batch_size=2)

    torch.manual_seed(0)
    callback = PerfgateCallback()
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         accumulate_grad_batches=accumulation, callbacks=[callback])
    try:
        trainer.fit(Tiny())
    finally:
        recorded.append(f"open after fit: {callback.open_ranges}")
    return callback


LIGHTNING_STEP = ["push step", "push forward", "forward", "pop", "push backward", "backward", "pop",
                  "push optimizer", "optimizer.step", "pop", "pop"]


def test_lightning_callback_nests_step_and_phases_around_each_batch(events) -> None:
    _lightning_fit(events, steps=2)
    assert _without_data(events) == LIGHTNING_STEP * 2 + ["open after fit: ()"]
    assert all(open_ranges == () for open_ranges in _open_at_each_load(events))


def test_lightning_callback_gives_one_step_per_optimizer_step_under_gradient_accumulation(events) -> None:
    _lightning_fit(events, steps=2, accumulation=2)
    micro_batch = ["push forward", "forward", "pop", "push backward", "backward", "pop"]
    one_step = (["push step", *micro_batch, "push data_load", "pop", *micro_batch,
                 "push optimizer", "optimizer.step", "pop", "pop"])
    assert _without_data(events) == one_step * 2 + ["open after fit: ()"]
    # the first micro-batch of a step loads between steps, the second inside its data_load range
    assert _open_at_each_load(events) == [()] * 2 + [("step", "data_load")] * 2 + [()] * 2 + [("step", "data_load")] * 2


def test_lightning_callback_closes_its_ranges_on_an_exception(events) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        _lightning_fit(events, steps=3, fail_on_batch=1)
    assert _without_data(events) == LIGHTNING_STEP + ["push step", "push forward", "forward", "pop", "pop",
                                                      "open after fit: ()"]


# --------------------------------------------------------------------------- optional imports


def _python(code: str, repo_root: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=env, capture_output=True, text=True,
                          timeout=120)


def test_importing_perfgate_integrations_imports_no_framework(repo_root) -> None:
    done = _python(
        "import sys, perfgate, perfgate.nvtx, perfgate.integrations, perfgate.integrations._ranges\n"
        "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'transformers', 'lightning', "
        "'pytorch_lightning', 'lightning_fabric', 'accelerate'})\n"
        "print('HEAVY', heavy)\n",
        repo_root,
    )
    assert done.returncode == 0, done.stderr
    assert "HEAVY []" in done.stdout, done.stdout


@pytest.mark.parametrize(("module", "hidden", "message"), [
    ("perfgate.integrations.hf", ["transformers"],
     "perfgate.integrations.hf needs transformers: pip install 'perfgate[hf]'"),
    ("perfgate.integrations.lightning", ["lightning", "lightning.pytorch", "pytorch_lightning"],
     "perfgate.integrations.lightning needs lightning (or pytorch_lightning): pip install 'perfgate[lightning]'"),
])
def test_an_integration_without_its_framework_says_what_to_install(module, hidden, message, repo_root) -> None:
    done = _python(
        "import sys\n"
        f"for name in {hidden!r}:\n"
        "    sys.modules[name] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as exc:\n"
        "    print('IMPORTERROR', exc)\n",
        repo_root,
    )
    assert done.returncode == 0, done.stderr
    assert f"IMPORTERROR {message}\n" in done.stdout, done.stdout

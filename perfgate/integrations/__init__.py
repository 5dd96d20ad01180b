"""NVTX step and phase ranges for training frameworks, as callbacks.

    from perfgate.integrations.hf import PerfgateCallback         # transformers.Trainer
    trainer = Trainer(..., callbacks=[PerfgateCallback()])

    from perfgate.integrations.lightning import PerfgateCallback  # lightning.pytorch.Trainer
    trainer = Trainer(..., callbacks=[PerfgateCallback()])

Each callback emits, on the training thread, one ``step`` range per optimizer step and phase
ranges inside it as far as the framework's hooks allow (``forward``/``backward``/``optimizer``
for Lightning, ``forward_backward``/``optimizer`` for Hugging Face), through :mod:`perfgate.nvtx`.
Data loading happens before the framework's step hook, so perfgate counts it in the phase
``between_steps`` (the time between one step range's end and the next one's start).

Importing this package imports neither transformers nor lightning: each submodule imports its
framework, and raises ImportError naming the extra to install when it is missing.
"""
from __future__ import annotations

__all__ = ["PHASES_HF", "PHASES_LIGHTNING", "STEP_RANGE"]

STEP_RANGE = "step"
"""The range of one optimizer step (perfgate's default step pattern matches it)."""

PHASES_HF: tuple[str, ...] = ("forward_backward", "optimizer")
"""Phase ranges :class:`perfgate.integrations.hf.PerfgateCallback` emits inside ``step``."""

PHASES_LIGHTNING: tuple[str, ...] = ("forward", "backward", "optimizer", "data_load")
"""Phase ranges :class:`perfgate.integrations.lightning.PerfgateCallback` emits inside ``step``
(``data_load`` only between the micro-batches of one step under gradient accumulation)."""

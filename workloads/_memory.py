"""GPU memory in the self-report, and two knobs that change memory and energy as pull requests do.

- :func:`gpu_memory_report`: the ``"gpu_memory"`` object of the ``PERFGATE_SELF_REPORT`` line,
  the torch allocator's peaks over the measured steps (:func:`reset_peaks` when they begin):
  ``{"max_allocated_bytes", "max_reserved_bytes", "device", "window": "measured steps"}``; None on
  the CPU (absent, not zero).
- ``--retain-outputs N``: the model outputs of the last N steps are kept alive (a list the loop
  appends to at the end of each step, as code that collects predictions for logging does), so they
  are held through the next step's forward and backward, where the allocator's peak is: memory at
  the peak grows by N outputs (transformer_lm's GPU preset: logits of 32 x 512 x 32000 fp32 values,
  1.95 GiB each) while the step's work stays the same. (Appending right after the forward pass
  instead drops the oldest output before the backward pass: with N = 1, the peak does not move.)
- ``--extra-matmuls N``: N extra 2048 x 2048 fp32 matrix products per step inside the forward phase,
  results dropped (work a change adds by mistake): more energy per sample, and more step time.
"""
from __future__ import annotations

import argparse
from collections import deque
from typing import Any

import torch

EXTRA_MATMUL_SIZE = 2048


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--retain-outputs", type=int, metavar="N",
                        help="keep the model outputs of the last N steps alive (more peak memory, same work)")
    parser.add_argument("--extra-matmuls", type=int, metavar="N",
                        help=f"N extra {EXTRA_MATMUL_SIZE}x{EXTRA_MATMUL_SIZE} matmuls per step in forward "
                             "(more GPU work: energy)")


def reset_peaks(device: torch.device) -> None:
    """Start the allocator's peak statistics afresh (at the first measured step)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


def gpu_memory_report(device: torch.device) -> dict[str, Any] | None:
    """The allocator's peaks since :func:`reset_peaks` (None on the CPU)."""
    if device.type != "cuda":
        return None
    torch.cuda.synchronize(device)
    return {"max_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "max_reserved_bytes": int(torch.cuda.max_memory_reserved(device)),
            "device": str(device), "window": "measured steps"}


class StepExtras:
    """What the two knobs do inside the training loop: ``after_forward(outputs)`` and
    ``end_step()`` every step."""

    def __init__(self, extra: dict[str, Any], device: torch.device) -> None:
        retain = int(extra.get("retain_outputs") or 0)
        if retain < 0 or int(extra.get("extra_matmuls") or 0) < 0:
            raise ValueError("--retain-outputs and --extra-matmuls must be >= 0")
        self.kept: deque[Any] = deque(maxlen=retain) if retain else deque(maxlen=0)
        self._this_step: Any = None
        self.matmuls = int(extra.get("extra_matmuls") or 0)
        self._a = torch.randn(EXTRA_MATMUL_SIZE, EXTRA_MATMUL_SIZE, device=device) if self.matmuls else None

    def after_forward(self, outputs: Any) -> None:
        if self.kept.maxlen:
            self._this_step = outputs.detach() if isinstance(outputs, torch.Tensor) else outputs
        if self._a is not None:
            for _ in range(self.matmuls):
                torch.mm(self._a, self._a)

    def end_step(self) -> None:
        """The step's outputs join the kept ones (the oldest leaves only now, after the backward pass)."""
        if self._this_step is not None:
            self.kept.append(self._this_step)
            self._this_step = None

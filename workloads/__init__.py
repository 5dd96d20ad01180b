"""perfgate's instrumented PyTorch training workloads (see workloads/README.md).

Each is a plain script: ``python -m workloads.<name> --help``. They import torch, torchvision
and ``perfgate.nvtx`` only (``hf_trainer`` and ``lightning_loop`` also import their framework,
inside ``main``), so they run with or without perfgate's gate and nsys.
"""
from __future__ import annotations

WORKLOADS: tuple[str, ...] = ("resnet_cifar", "resnet_imagefolder", "transformer_lm", "ddp")
"""Module names under ``workloads``; ``ddp`` runs under ``torchrun`` (or alone, world size 1)."""

USER_LOOPS: tuple[str, ...] = ("plain_loop", "seed003_loop", "hf_trainer", "lightning_loop")
"""Loops written as users write them (data loading outside the step range, or no NVTX at all);
their own knobs (workloads/_userloop.py), not the common ones of ``WORKLOADS``."""

INFERENCE: tuple[str, ...] = ("resnet_infer",)
"""Inference workloads (seed 003's second half): their own loop and knobs, no optimizer."""

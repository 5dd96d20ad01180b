"""perfgate's instrumented PyTorch training workloads (see workloads/README.md).

Each is a plain script: ``python -m workloads.<name> --help``. They import torch, torchvision
and ``perfgate.nvtx`` only, so they run with or without perfgate's gate and nsys.
"""
from __future__ import annotations

WORKLOADS: tuple[str, ...] = ("resnet_cifar", "resnet_imagefolder", "transformer_lm", "ddp")
"""Module names under ``workloads``; ``ddp`` runs under ``torchrun`` (or alone, world size 1)."""

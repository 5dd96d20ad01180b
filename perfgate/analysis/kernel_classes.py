"""Kernel-name classes (precision, Triton, elementwise) and each class's time and launches over a
set of kernels: what the diagnosis's precision and compile rules read, from the analysis's top
kernels or, in the analysis pass, from every kernel of the measured window (TraceFacts)."""
from __future__ import annotations

import re

from perfgate.records.model import KernelStat

# Kernel-name classes. Half/low precision first: a name matching it is never counted as fp32.
HALF_PRECISION_RE = re.compile(
    r"h884|h1688|h16816|hmma|f16|fp16|bf16|half|e4m3|e5m2|fp8|i8816|imma", re.IGNORECASE)
MATMUL_RE = re.compile(
    r"gemm|conv|fprop|dgrad|wgrad|xmma|cutlass|winograd|matmul",
    re.IGNORECASE)
TRITON_RE = re.compile(r"triton", re.IGNORECASE)
ELEMENTWISE_RE = re.compile(r"elementwise|reduce_kernel|vectorized|unrolled|pointwise", re.IGNORECASE)


def is_half_precision(name: str) -> bool:
    return HALF_PRECISION_RE.search(name) is not None


def is_fp32_matmul(name: str) -> bool:
    """A GEMM/convolution kernel whose name shows no half/low-precision type (fp32 or TF32)."""
    return MATMUL_RE.search(name) is not None and not is_half_precision(name)


def is_half_matmul(name: str) -> bool:
    return MATMUL_RE.search(name) is not None and is_half_precision(name)


def is_triton(name: str) -> bool:
    return TRITON_RE.search(name) is not None


def is_elementwise(name: str) -> bool:
    return ELEMENTWISE_RE.search(name) is not None and not is_triton(name)


def kernel_class_ms(kernels: tuple[KernelStat, ...]) -> dict[str, float]:
    """Total ms of ``kernels`` by class: fp32_matmul, half_matmul, triton, elementwise, all."""
    out = {"fp32_matmul": 0.0, "half_matmul": 0.0, "triton": 0.0, "elementwise": 0.0, "all": 0.0}
    for k in kernels:
        out["all"] += k.total_ms
        if is_half_matmul(k.name):
            out["half_matmul"] += k.total_ms
        elif is_fp32_matmul(k.name):
            out["fp32_matmul"] += k.total_ms
        if is_triton(k.name):
            out["triton"] += k.total_ms
        if is_elementwise(k.name):
            out["elementwise"] += k.total_ms
    return out


def kernel_class_counts(kernels: tuple[KernelStat, ...]) -> dict[str, int]:
    """Kernel launch counts of ``kernels`` by class: triton, elementwise, half, all."""
    out = {"triton": 0, "elementwise": 0, "half": 0, "all": 0}
    for k in kernels:
        out["all"] += k.count
        out["triton"] += k.count if is_triton(k.name) else 0
        out["elementwise"] += k.count if is_elementwise(k.name) else 0
        out["half"] += k.count if is_half_precision(k.name) else 0
    return out

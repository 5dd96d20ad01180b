"""Seed 003's inference half: a torchvision ResNet (random weights, nothing downloaded) in eval mode
under torch.no_grad(), eager or torch.compile'd, one NVTX range per batch.

The input batch is made once on the device (as the seed's benchmark does), so a batch is the
model's work alone: one ``batch N`` range per measured batch (``warmup N`` before them) holding
``forward`` (the model call) and ``sync`` (waiting for the output: the batch's latency ends when
its result is ready). Variants (pyproject: ``resnet_infer`` and ``resnet_infer[compiled]``):
``--mode eager`` and ``--mode compile`` (torch.compile; on CUDA mode ``reduce-overhead``, whose
CUDA graphs replay a whole batch as one launch; on the CPU the ``eager`` backend by default:
Dynamo captures the graph but no code is generated, so the CPU preset runs in seconds).
``--lost-compile`` is the change a pull request makes by mistake: the compile call is skipped
and the model runs eagerly although ``--mode compile`` asks for it (kernels per batch jump; the
gate names them).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch
import torchvision

from perfgate import nvtx
from workloads._common import resolve_device
from workloads._memory import gpu_memory_report, reset_peaks

SELF_REPORT_PREFIX = "PERFGATE_SELF_REPORT"
MODELS = ("resnet18", "resnet50")
COMPILE_MODES = ("reduce-overhead", "default", "max-autotune", "max-autotune-no-cudagraphs")
PRESETS: dict[str, dict[str, Any]] = {
    "gpu": {"batch_size": 32, "steps": 60, "warmup_steps": 20, "image_size": 224, "model": "resnet50",
            "compile_mode": "reduce-overhead", "compile_backend": "inductor", "threads": None},
    "cpu": {"batch_size": 2, "steps": 8, "warmup_steps": 3, "image_size": 32, "model": "resnet18",
            "compile_mode": "default", "compile_backend": "eager", "threads": 1},
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m workloads.resnet_infer", description=__doc__.split("\n\n")[0],
                                epilog="Precedence: explicit flags > --size preset. See workloads/README.md.")
    add = p.add_argument
    add("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available")
    add("--size", choices=("auto", "cpu", "gpu"), default="auto", help="preset: gpu (ResNet-50, batch 32 "
        "at 224 px) or cpu (ResNet-18, batch 2 at 32 px); auto picks by device")
    add("--steps", type=int, help="measured batches")
    add("--warmup-steps", type=int, help="batches before them (compilation and CUDA graph capture happen here)")
    add("--batch-size", type=int)
    add("--image-size", type=int)
    add("--model", choices=MODELS)
    add("--mode", choices=("eager", "compile"), default="eager", help="eager, or torch.compile the model")
    add("--compile-mode", choices=COMPILE_MODES, help="torch.compile mode (gpu preset: reduce-overhead, "
        "i.e. CUDA graphs; 'default' keeps fusion and loses the graphs)")
    add("--compile-backend", help="torch.compile backend (gpu preset: inductor; cpu preset: eager)")
    add("--lost-compile", action="store_true", default=None,
        help="the regression: skip the compile call although --mode compile (runs eagerly)")
    add("--threads", type=int, help="torch intra-op threads (cpu preset: 1)")
    add("--seed", type=int, default=0)
    return p


def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Preset values overridden by explicit flags, plus the device and size."""
    device = resolve_device(args.device)
    if device == "cuda" and not torch.cuda.is_available():
        build_parser().error("--device cuda: torch sees no CUDA device on this machine")
    size = args.size if args.size != "auto" else ("gpu" if device == "cuda" else "cpu")
    knobs = {"lost_compile": False, **PRESETS[size]}     # a preset may set it (a pull request's edit)
    knobs.update({k: v for k, v in vars(args).items() if v is not None and k not in ("device", "size")})
    for key in ("steps", "batch_size", "image_size"):
        if knobs[key] < 1:
            build_parser().error(f"--{key.replace('_', '-')} must be >= 1, got {knobs[key]}")
    if knobs["warmup_steps"] < 0:
        build_parser().error("--warmup-steps must be >= 0")
    return {**knobs, "device": device, "size": size}


def make_model(knobs: dict[str, Any], device: torch.device) -> tuple[Any, bool]:
    """The eval-mode model and whether it is compiled (False under --lost-compile)."""
    model = getattr(torchvision.models, knobs["model"])(weights=None).eval().to(device)
    if knobs["mode"] != "compile" or knobs["lost_compile"]:
        return model, False
    return torch.compile(model, mode=knobs["compile_mode"], backend=knobs["compile_backend"]), True


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    at = q * (len(ordered) - 1)
    low = int(at)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (at - low)


def run(knobs: dict[str, Any]) -> dict[str, Any]:
    """Warm-up and measured batches; the self-report's fields."""
    torch.manual_seed(knobs["seed"])
    if knobs["threads"]:
        torch.set_num_threads(knobs["threads"])
    device = torch.device(knobs["device"])
    on_cuda = device.type == "cuda"
    if on_cuda:
        torch.backends.cudnn.benchmark = True          # as the seed: autotuned during warm-up
    model, compiled = make_model(knobs, device)
    inputs = torch.randn(knobs["batch_size"], 3, knobs["image_size"], knobs["image_size"], device=device)
    latency_s: list[float] = []
    graphs = compiled and on_cuda and "reduce-overhead" in knobs["compile_mode"]
    window_start_ns = 0
    with torch.no_grad():
        for index in range(knobs["warmup_steps"] + knobs["steps"]):
            measured = index >= knobs["warmup_steps"]
            if index == knobs["warmup_steps"]:
                reset_peaks(device)
                window_start_ns = time.time_ns()
            began = time.perf_counter()
            name = f"batch {index - knobs['warmup_steps'] + 1}" if measured else f"warmup {index + 1}"
            with nvtx.range(name):
                with nvtx.range("forward"):
                    if graphs:
                        torch.compiler.cudagraph_mark_step_begin()   # each batch: a new CUDA graph replay
                    outputs = model(inputs)
                with nvtx.range("sync"):
                    if on_cuda:
                        torch.cuda.synchronize(device)
                    checksum = float(outputs[0, 0])       # the result is ready (and read) here
            if measured:
                latency_s.append(time.perf_counter() - began)
    window_unix_ns = [window_start_ns, time.time_ns()]
    ms = [s * 1e3 for s in latency_s]
    report: dict[str, Any] = {
        "workload": "resnet_infer", "device": knobs["device"], "steps": len(ms),
        "warmup_steps": knobs["warmup_steps"], "batch_size": knobs["batch_size"], "world_size": 1,
        "step_ms_median": statistics.median(ms), "step_ms_mean": statistics.fmean(ms),
        "samples_per_s": knobs["batch_size"] * len(ms) / (sum(ms) / 1e3),
        "latency_ms_p50": percentile(ms, 0.50), "latency_ms_p99": percentile(ms, 0.99),
        "mode": knobs["mode"], "compiled": compiled, "checksum": checksum, "window_unix_ns": window_unix_ns,
        "knobs": {k: v for k, v in knobs.items()},
    }
    memory = gpu_memory_report(device)
    if memory:
        report["gpu_memory"] = memory
    return report


def main(argv: Sequence[str] | None = None) -> int:
    knobs = resolve(build_parser().parse_args(argv))
    report = run(knobs)
    print(f"[resnet_infer] {knobs['model']} {knobs['mode']}{' (compile lost)' if knobs['lost_compile'] else ''} "
          f"on {report['device']}: batch {report['batch_size']}, {report['steps']} batches after "
          f"{report['warmup_steps']} warm-up: p50 {report['latency_ms_p50']:.2f} ms, p99 "
          f"{report['latency_ms_p99']:.2f} ms, {report['samples_per_s']:.1f} samples/s", flush=True)
    print(f"{SELF_REPORT_PREFIX} {json.dumps(report, sort_keys=True, default=str)}", flush=True)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What every workload shares: its knobs, the instrumented training loop and the self-report.

A workload module describes itself with a :class:`Workload` (size presets, extra knobs, a
``build`` function giving model, data and optimizer) and calls :func:`main`. The loop emits,
per measured iteration, one ``step`` NVTX range holding ``data_load``, ``h2d``, ``forward``,
``backward`` and ``optimizer``; warm-up iterations carry the same phases inside a
``warmup_step`` range, so a trace holds exactly ``--steps`` ``step`` ranges per process.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, RandomSampler, Sampler

from perfgate import nvtx
from workloads import _memory
from workloads.ladder import MAX_RUNG, rung_knobs

STEP_RANGE = "step"
WARMUP_RANGE = "warmup_step"
PHASES: tuple[str, ...] = ("data_load", "h2d", "forward", "backward", "optimizer")
SELF_REPORT_PREFIX = "PERFGATE_SELF_REPORT"

COMMON_DEFAULTS: dict[str, Any] = {
    "seed": 0,
    "workers": 0,
    "pin_memory": False,
    "non_blocking": False,
    "amp": False,
    "compile": False,
    "channels_last": False,
    "overlap_copy": False,
    "cudnn_benchmark": False,
    "deterministic": False,
    "profile_range": False,
    "slow_phase": None,
    "slow_ms": 0.0,
    "slow_gpu_ms": 0.0,
    "slow_data_ms": 0.0,
    "slow_rank": None,
    "sync_phase": None,
    "ladder_rung": None,
    "threads": None,
}
SIZE_DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"threads": 1},   # shared 2-core CI runners: one intra-op thread keeps step times stable
    "gpu": {},
}

_COMMON_KEYS = frozenset(COMMON_DEFAULTS) | {"device", "size", "steps", "warmup_steps", "batch_size"}


@dataclass(frozen=True)
class Knobs:
    """A workload's resolved configuration: defaults < size preset < ladder rung < explicit flags."""

    workload: str
    device: str                       # "cpu" or "cuda" (resolved from --device auto)
    size: str                         # "cpu" or "gpu" (resolved from --size auto)
    steps: int
    warmup_steps: int
    batch_size: int
    seed: int
    workers: int
    pin_memory: bool
    non_blocking: bool
    amp: bool
    compile: bool
    channels_last: bool
    overlap_copy: bool
    cudnn_benchmark: bool
    deterministic: bool
    profile_range: bool
    slow_phase: str | None
    slow_ms: float
    slow_gpu_ms: float
    slow_data_ms: float
    slow_rank: int | None
    sync_phase: str | None
    ladder_rung: int | None
    threads: int | None
    extra: dict[str, Any] = field(default_factory=dict)   # the workload's own knobs (image_size, d_model...)

    def as_dict(self) -> dict[str, Any]:
        fields = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return {**fields, **self.extra}


@dataclass(frozen=True)
class Parts:
    """What a workload's ``build`` returns; the loop moves the model and builds the loader."""

    model: nn.Module
    dataset: Dataset
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor]
    make_optimizer: Callable[[Iterable[nn.Parameter]], torch.optim.Optimizer]
    image_input: bool = True          # --channels-last applies to the input batch
    samples_with_replacement: bool = False  # dataset smaller than the run: sample with replacement


@dataclass(frozen=True)
class Workload:
    """A workload's description, given to :func:`main`."""

    name: str
    description: str
    presets: dict[str, dict[str, Any]]                       # "cpu"/"gpu" -> knob defaults
    build: Callable[[Knobs, int], Parts]                      # (knobs, samples needed per process)
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None


@dataclass(frozen=True)
class Dist:
    """Where this process sits in a distributed run (world size 1 outside one)."""

    world_size: int = 1
    rank: int = 0
    local_rank: int = 0
    wrap: Callable[[nn.Module], nn.Module] | None = None     # e.g. DistributedDataParallel
    make_sampler: Callable[[Dataset], Sampler] | None = None
    micro_steps: int = 1                                      # gradient accumulation: batches per step
    # the context each micro-step's data, forward and backward run in (DDP's no_sync for all but the last)
    micro_step: Callable[[nn.Module, int], AbstractContextManager[Any]] | None = None


@dataclass(frozen=True)
class RunResult:
    """Host-timed result of the measured steps of one process."""

    knobs: Knobs
    world_size: int
    step_s: tuple[float, ...]
    last_loss: float
    gpu_memory: dict[str, Any] | None = None      # workloads/_memory.py (cuda only)
    window_unix_ns: tuple[int, int] | None = None  # wall clock of the measured steps (energy clock check)

    def self_report(self) -> dict[str, Any]:
        """The fields of the ``PERFGATE_SELF_REPORT`` line (docs/ARCHITECTURE.md), plus ``knobs``."""
        total_s = sum(self.step_s)
        samples = self.knobs.batch_size * self.world_size * len(self.step_s)
        return {
            "workload": self.knobs.workload,
            "device": self.knobs.device,
            "steps": len(self.step_s),
            "warmup_steps": self.knobs.warmup_steps,
            "batch_size": self.knobs.batch_size,
            "world_size": self.world_size,
            "step_ms_median": statistics.median(self.step_s) * 1e3,
            "step_ms_mean": statistics.fmean(self.step_s) * 1e3,
            "samples_per_s": samples / total_s if total_s > 0 else 0.0,
            "ladder_rung": self.knobs.ladder_rung,
            "knobs": self.knobs.as_dict(),
            **({"gpu_memory": self.gpu_memory} if self.gpu_memory else {}),
            **({"window_unix_ns": list(self.window_unix_ns)} if self.window_unix_ns else {}),
        }


# --------------------------------------------------------------------------- knobs


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def build_parser(workload: Workload) -> argparse.ArgumentParser:
    """The workload's command line: the common knobs, then its own. Every default is None so
    that :func:`resolve_knobs` can tell an explicit flag from a preset."""
    parser = argparse.ArgumentParser(
        prog=f"python -m workloads.{workload.name}",
        description=workload.description,
        epilog="Knob precedence: explicit flags > --ladder-rung > --size preset > defaults. "
        "See workloads/README.md.",
    )
    flag = argparse.BooleanOptionalAction
    add = parser.add_argument
    add("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available")
    add("--size", choices=("auto", "cpu", "gpu"), default="auto",
        help="size preset: gpu keeps a GPU busy, cpu finishes in seconds; auto picks by device")
    add("--steps", type=_positive_int, help="measured steps")
    add("--warmup-steps", type=_non_negative_int, help="unmeasured steps before them")
    add("--batch-size", type=_positive_int, help="per process")
    add("--seed", type=int)
    add("--workers", type=_non_negative_int, help="DataLoader num_workers")
    add("--pin-memory", action=flag, help="DataLoader pin_memory (cuda only)")
    add("--non-blocking", action=flag, help="copy batches with non_blocking=True")
    add("--amp", action=flag, help="autocast: fp16 on cuda, bf16 on cpu")
    add("--compile", action=flag, help="torch.compile the model")
    add("--channels-last", action=flag, help="channels_last memory format (image workloads)")
    add("--overlap-copy", action=flag,
        help="copy the next batch on a side CUDA stream while this one computes (no-op on cpu)")
    add("--cudnn-benchmark", action=flag, help="cudnn.benchmark autotuning (off: stable algorithms)")
    add("--deterministic", action=flag, help="torch.use_deterministic_algorithms (warn only)")
    add("--profile-range", action=flag,
        help="torch.cuda.profiler.start()/stop() around the measured steps (nsys --capture-range=cudaProfilerApi)")
    add("--slow-phase", choices=PHASES, help="sleep --slow-ms inside this phase's range every step")
    add("--slow-ms", type=_non_negative_float, help="milliseconds for --slow-phase")
    add("--slow-gpu-ms", type=_non_negative_float,
        help="GPU milliseconds (a spinning kernel) launched inside --slow-phase every step: slows a "
             "GPU-bound step where a CPU sleep would hide behind the queued GPU work (cpu: a sleep)")
    add("--slow-data-ms", type=_non_negative_float, metavar="MS",
        help="each batch costs MS more to load: a sleep of MS / batch size per sample in the dataset, "
             "so it runs where the transform runs (the DataLoader workers), as a heavier transform would")
    add("--slow-rank", type=int, metavar="RANK",
        help="apply --slow-phase only on this distributed rank (a straggler; default: every rank)")
    add("--sync-phase", choices=PHASES, help="an extra device synchronization inside this phase (cuda)")
    add("--threads", type=_positive_int, help="torch intra-op threads (cpu preset: 1; default: torch's)")
    add("--ladder-rung", type=int, choices=range(MAX_RUNG + 1), metavar="{0..7}",
        help="seed 003's optimization ladder (workloads/ladder.py); explicit flags override it")
    _memory.add_arguments(parser)
    if workload.add_arguments is not None:
        workload.add_arguments(parser)
    return parser


def resolve_device(requested: str) -> str:
    """``cpu`` or ``cuda``; ``auto`` is cuda when torch sees a GPU."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def resolve_knobs(workload: Workload, args: argparse.Namespace,
                  parser: argparse.ArgumentParser | None = None) -> Knobs:
    """Layer defaults < size preset < ladder rung < explicit flags into :class:`Knobs`."""
    def fail(message: str) -> None:
        if parser is not None:
            parser.error(message)
        raise ValueError(message)

    device = resolve_device(args.device)
    if device == "cuda" and not torch.cuda.is_available():
        fail("--device cuda: torch sees no CUDA device on this machine")
    size = args.size if args.size != "auto" else ("gpu" if device == "cuda" else "cpu")
    values: dict[str, Any] = {**COMMON_DEFAULTS, **SIZE_DEFAULTS[size], **workload.presets[size]}
    if args.ladder_rung is not None:
        values.update(rung_knobs(args.ladder_rung))
    values.update({k: v for k, v in vars(args).items() if v is not None and k not in ("device", "size")})
    if (values["slow_ms"] or values["slow_gpu_ms"]) and values["slow_phase"] is None:
        fail("--slow-ms and --slow-gpu-ms need --slow-phase PHASE")
    if values["slow_phase"] is not None and not (values["slow_ms"] or values["slow_gpu_ms"]):
        fail("--slow-phase needs --slow-ms or --slow-gpu-ms MS greater than 0")
    if values["slow_rank"] is not None and values["slow_phase"] is None:
        fail("--slow-rank needs --slow-phase PHASE")
    common = {k: values.pop(k) for k in list(values) if k in _COMMON_KEYS}
    return Knobs(workload=workload.name, device=device, size=size, extra=values, **common)


# --------------------------------------------------------------------------- loop


def make_loader(dataset: Dataset, knobs: Knobs, samples: int, dist: Dist,
                with_replacement: bool) -> DataLoader:
    """A DataLoader that yields at least ``samples`` samples without running out."""
    generator = torch.Generator().manual_seed(knobs.seed)
    if dist.make_sampler is not None:
        sampler: Sampler = dist.make_sampler(dataset)
    else:
        sampler = RandomSampler(dataset, replacement=with_replacement, num_samples=samples, generator=generator)
    return DataLoader(
        dataset,
        batch_size=knobs.batch_size,
        sampler=sampler,
        num_workers=knobs.workers,
        pin_memory=knobs.pin_memory and knobs.device == "cuda",
        drop_last=True,
        generator=generator,
    )


class _SlowItems(Dataset):
    """``dataset`` with ``sleep_s`` more per item (``--slow-data-ms``)."""

    def __init__(self, dataset: Dataset, sleep_s: float) -> None:
        self.dataset, self.sleep_s = dataset, sleep_s

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, index: int) -> Any:
        item = self.dataset[index]
        time.sleep(self.sleep_s)
        return item


def _to_device(batch: Sequence[torch.Tensor], device: torch.device, knobs: Knobs,
               image_input: bool) -> tuple[torch.Tensor, torch.Tensor]:
    inputs, targets = batch[0], batch[1]
    inputs = inputs.to(device, non_blocking=knobs.non_blocking)
    targets = targets.to(device, non_blocking=knobs.non_blocking)
    if knobs.channels_last and image_input and inputs.dim() == 4:
        inputs = inputs.contiguous(memory_format=torch.channels_last)
    return inputs, targets


def _cycles_per_ms(device: Any) -> float:
    """GPU clock cycles per millisecond of ``torch.cuda._sleep``, timed with CUDA events."""
    torch.cuda._sleep(1_000_000)            # warm up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(20_000_000)
    end.record()
    end.synchronize()
    return 20_000_000 / max(start.elapsed_time(end), 1e-3)


class _OverlapCopier:
    """Seed 003's optimization 7: copy batch i+1 on a side stream while batch i computes."""

    def __init__(self, device: torch.device, knobs: Knobs, image_input: bool) -> None:
        self.device, self.knobs, self.image_input = device, knobs, image_input
        self.stream = torch.cuda.Stream(device=device)
        self.pending: tuple[torch.Tensor, torch.Tensor] | None = None

    def submit(self, batch: Sequence[torch.Tensor]) -> None:
        with torch.cuda.stream(self.stream):
            self.pending = _to_device(batch, self.device, self.knobs, self.image_input)

    def take(self) -> tuple[torch.Tensor, torch.Tensor]:
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        assert self.pending is not None
        for tensor in self.pending:
            tensor.record_stream(current)
        taken, self.pending = self.pending, None
        return taken


def _configure_torch(knobs: Knobs) -> None:
    torch.manual_seed(knobs.seed)
    if knobs.threads is not None:
        torch.set_num_threads(knobs.threads)
    if knobs.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=True)
        torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = knobs.cudnn_benchmark


def _notes(knobs: Knobs, image_input: bool) -> list[str]:
    notes = []
    if knobs.device == "cpu":
        for name in ("overlap_copy", "profile_range", "pin_memory"):
            if getattr(knobs, name):
                notes.append(f"--{name.replace('_', '-')} has no effect on cpu")
        if knobs.sync_phase is not None:
            notes.append("--sync-phase has no device to synchronize on cpu")
    if knobs.channels_last and not image_input:
        notes.append(f"--channels-last does not apply to {knobs.workload}")
    return notes


def train(workload: Workload, knobs: Knobs, dist: Dist | None = None) -> RunResult:
    """Build the workload, run warm-up and measured steps, return host-timed step durations."""
    dist = dist or Dist()
    _configure_torch(knobs)
    total_steps = knobs.warmup_steps + knobs.steps
    samples = knobs.batch_size * (total_steps * dist.micro_steps + 2)   # +2: the overlap copier reads ahead
    parts = workload.build(knobs, samples)
    for note in _notes(knobs, parts.image_input):
        if dist.rank == 0:
            print(f"[{knobs.workload}] note: {note}", flush=True)

    device = torch.device(knobs.device, dist.local_rank) if knobs.device == "cuda" else torch.device("cpu")
    model = parts.model.to(device)
    if knobs.channels_last and parts.image_input:
        model = model.to(memory_format=torch.channels_last)
    if dist.wrap is not None:
        model = dist.wrap(model)
    optimizer = parts.make_optimizer(model.parameters())
    if knobs.compile:
        model = torch.compile(model)
    model.train()
    dataset = _SlowItems(parts.dataset, knobs.slow_data_ms / 1e3 / knobs.batch_size) if knobs.slow_data_ms \
        else parts.dataset
    loader = make_loader(dataset, knobs, samples, dist, parts.samples_with_replacement)
    batches: Iterator[Any] = iter(loader)
    on_cuda = device.type == "cuda"
    extras = _memory.StepExtras(knobs.extra, device)     # --retain-outputs, --extra-matmuls
    copier = _OverlapCopier(device, knobs, parts.image_input) if knobs.overlap_copy and on_cuda else None
    autocast = torch.autocast(device_type=device.type, dtype=torch.float16 if on_cuda else torch.bfloat16,
                              enabled=knobs.amp)

    gpu_cycles = _cycles_per_ms(device) * knobs.slow_gpu_ms if knobs.slow_gpu_ms and on_cuda else 0

    def extra(phase: str) -> None:
        if phase == knobs.slow_phase and knobs.slow_rank in (None, dist.rank):
            time.sleep((knobs.slow_ms + (0.0 if on_cuda else knobs.slow_gpu_ms)) / 1e3)
            if gpu_cycles:
                torch.cuda._sleep(int(gpu_cycles))
        if phase == knobs.sync_phase and on_cuda:
            torch.cuda.synchronize(device)

    step_s: list[float] = []
    loss_value = math.nan
    window_start_ns = 0
    for index in range(total_steps):
        measured = index >= knobs.warmup_steps
        if index == knobs.warmup_steps and knobs.profile_range and on_cuda:
            torch.cuda.synchronize(device)
            torch.cuda.profiler.start()
        if index == knobs.warmup_steps:
            _memory.reset_peaks(device)                  # the self-report's peaks: measured steps
            window_start_ns = time.time_ns()
        began = time.perf_counter()
        with nvtx.range(STEP_RANGE if measured else WARMUP_RANGE):
            for micro in range(dist.micro_steps):   # one, or the micro-batches of gradient accumulation
                with dist.micro_step(model, micro) if dist.micro_step is not None else nullcontext():
                    with nvtx.range("data_load"):
                        if copier is not None and copier.pending is None:
                            copier.submit(next(batches))   # first step: its own batch, then the next one
                        batch = next(batches)
                        extra("data_load")
                    with nvtx.range("h2d"):
                        if copier is not None:
                            inputs, targets = copier.take()
                            copier.submit(batch)
                        else:
                            inputs, targets = _to_device(batch, device, knobs, parts.image_input)
                        extra("h2d")
                    with nvtx.range("forward"):
                        with autocast:
                            outputs = model(inputs)
                            loss = parts.loss_fn(outputs, targets)
                            if dist.micro_steps > 1:
                                loss = loss / dist.micro_steps
                        extras.after_forward(outputs)
                        extra("forward")
                    with nvtx.range("backward"):
                        loss.backward()
                        extra("backward")
            with nvtx.range("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                extra("optimizer")
            extras.end_step()
            loss_value = loss.item()                      # as real loops log it: bounds run-ahead
        if measured:
            step_s.append(time.perf_counter() - began)
    if knobs.profile_range and on_cuda:
        torch.cuda.synchronize(device)
        torch.cuda.profiler.stop()
    window = (window_start_ns, time.time_ns()) if step_s else None
    return RunResult(knobs=knobs, world_size=dist.world_size, step_s=tuple(step_s), last_loss=loss_value,
                     gpu_memory=_memory.gpu_memory_report(device), window_unix_ns=window)


def print_self_report(result: RunResult, extra: dict[str, Any] | None = None) -> None:
    """The human line, then the one ``PERFGATE_SELF_REPORT {json}`` line (with ``extra``'s fields)."""
    report = {**result.self_report(), **(extra or {})}
    print(
        f"[{report['workload']}] {report['steps']} steps on {report['device']} "
        f"(world size {report['world_size']}, batch {report['batch_size']}, "
        f"{report['warmup_steps']} warm-up): median {report['step_ms_median']:.2f} ms/step, "
        f"mean {report['step_ms_mean']:.2f} ms/step, {report['samples_per_s']:.1f} samples/s, "
        f"last loss {result.last_loss:.4f}",
        flush=True,
    )
    print(f"{SELF_REPORT_PREFIX} {json.dumps(report, sort_keys=True, default=str)}", flush=True)


def parse_knobs(workload: Workload, argv: Sequence[str] | None) -> Knobs:
    parser = build_parser(workload)
    return resolve_knobs(workload, parser.parse_args(argv), parser)


def main(workload: Workload, argv: Sequence[str] | None = None) -> int:
    """Single-process entry point of a workload: parse, train, report; 0 on success."""
    knobs = parse_knobs(workload, argv)
    print_self_report(train(workload, knobs))
    sys.stdout.flush()
    return 0


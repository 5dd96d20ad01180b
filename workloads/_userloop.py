"""What the user-loop workloads share: their knobs, a synthetic image dataset, the iteration clock
and the self-report.

The user-loop workloads (``plain_loop``, ``seed003_loop``, ``hf_trainer``, ``lightning_loop``)
are written the way people write training code, not through :mod:`workloads._common`'s
instrumented loop: data loading happens outside their step ranges (or they have no NVTX at all),
and warm-up iterations emit the same ranges as measured ones (perfgate skips the first
``warmup_steps`` step ranges of each process; pyproject.toml sets that number per workload).

Timing is the loop's own: the host time (``time.perf_counter``) from the start of one iteration
to the start of the next (the last one: until the next batch is there, or until the loop has
finished it where the loop stops before loading one); only the iterations after the warm-up ones
count.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import Dataset

from workloads._common import _non_negative_float, _non_negative_int, _positive_int, resolve_device

SELF_REPORT_PREFIX = "PERFGATE_SELF_REPORT"

COMMON_DEFAULTS: dict[str, Any] = {"seed": 0, "workers": 0, "slow_data_ms": 0.0, "threads": None}
SIZE_DEFAULTS: dict[str, dict[str, Any]] = {
    "cpu": {"threads": 1},   # shared 2-core CI runners: one intra-op thread keeps step times stable
    "gpu": {},
}
_COMMON_KEYS = frozenset(COMMON_DEFAULTS) | {"steps", "warmup_steps", "batch_size"}


@dataclass(frozen=True)
class Options:
    """A user loop's resolved configuration: defaults < size preset < explicit flags."""

    workload: str
    device: str                     # "cpu" or "cuda" (resolved from --device auto)
    size: str                       # "cpu" or "gpu" (resolved from --size auto)
    steps: int
    warmup_steps: int
    batch_size: int
    seed: int
    workers: int
    slow_data_ms: float
    threads: int | None
    extra: dict[str, Any] = field(default_factory=dict)   # the workload's own knobs

    @property
    def total_steps(self) -> int:
        return self.warmup_steps + self.steps

    @property
    def sample_sleep_s(self) -> float:
        """Extra seconds per sample in ``__getitem__``: one batch costs ``--slow-data-ms`` more."""
        return self.slow_data_ms / 1e3 / self.batch_size

    def as_dict(self) -> dict[str, Any]:
        fields = {k: v for k, v in self.__dict__.items() if k != "extra"}
        return {**fields, **self.extra}


def build_parser(name: str, description: str,
                 add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> argparse.ArgumentParser:
    """The common knobs of the user loops, then the workload's own. Defaults are None so that
    :func:`parse_options` can tell an explicit flag from a preset."""
    parser = argparse.ArgumentParser(prog=f"python -m workloads.{name}", description=description,
                                     epilog="Knob precedence: explicit flags > --size preset > defaults. "
                                     "See workloads/README.md.")
    add = parser.add_argument
    add("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda when available")
    add("--size", choices=("auto", "cpu", "gpu"), default="auto",
        help="size preset: gpu keeps a GPU busy, cpu finishes in seconds; auto picks by device")
    add("--steps", type=_positive_int, help="measured iterations")
    add("--warmup-steps", type=_non_negative_int,
        help="iterations before them, with the same NVTX ranges (perfgate skips them by warmup_steps)")
    add("--batch-size", type=_positive_int)
    add("--seed", type=int)
    add("--workers", type=_non_negative_int, help="DataLoader num_workers")
    add("--slow-data-ms", type=_non_negative_float, metavar="MS",
        help="a slower dataset: __getitem__ sleeps so that loading one batch costs MS ms more")
    add("--threads", type=_positive_int, help="torch intra-op threads (cpu preset: 1; default: torch's)")
    if add_arguments is not None:
        add_arguments(parser)
    return parser


def parse_options(name: str, description: str, presets: dict[str, dict[str, Any]],
                  argv: Sequence[str] | None,
                  add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> Options:
    """Parse ``argv`` and layer defaults < ``presets[size]`` < explicit flags into :class:`Options`."""
    parser = build_parser(name, description, add_arguments)
    args = parser.parse_args(argv)
    device = resolve_device(args.device)
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device on this machine")
    size = args.size if args.size != "auto" else ("gpu" if device == "cuda" else "cpu")
    values: dict[str, Any] = {**COMMON_DEFAULTS, **SIZE_DEFAULTS[size], **presets[size]}
    values.update({k: v for k, v in vars(args).items() if v is not None and k not in ("device", "size")})
    common = {k: values.pop(k) for k in list(values) if k in _COMMON_KEYS}
    return Options(workload=name, device=device, size=size, extra=values, **common)


def configure_torch(options: Options) -> None:
    """Seed torch and set its intra-op threads."""
    torch.manual_seed(options.seed)
    if options.threads is not None:
        torch.set_num_threads(options.threads)


class SyntheticImages(Dataset):
    """``count`` random RGB images with labels, each generated from its index and the seed.

    Per item: a uint8 image from a seeded generator, converted to float and normalized, flipped
    at random (real CPU work, as an image pipeline's ``ToTensor``/``Normalize``/flip), then the
    ``--slow-data-ms`` share of this sample."""

    def __init__(self, count: int, image_size: int, classes: int, seed: int, sleep_s: float = 0.0) -> None:
        self.count, self.image_size, self.classes = count, image_size, classes
        self.seed, self.sleep_s = seed, sleep_s

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        size = self.image_size
        image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=generator)
        label = int(torch.randint(0, self.classes, (1,), generator=generator))
        tensor = image.float().div_(255.0).sub_(0.5).div_(0.5)
        if torch.rand(1, generator=generator).item() < 0.5:
            tensor = tensor.flip(-1)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return tensor, label


class IterationClock:
    """Host time at the start of every iteration. Iteration i lasts until iteration i+1 starts;
    the last one until :meth:`stop` (called when the loop has finished it)."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.stopped: float | None = None

    def tick(self) -> None:
        self.starts.append(time.perf_counter())

    def stop(self, sync_cuda: bool = False) -> None:
        if sync_cuda:
            torch.cuda.synchronize()
        self.stopped = time.perf_counter()

    def periods_s(self, skip: int) -> list[float]:
        """Durations of the iterations after the first ``skip``."""
        ends = self.starts[1:] + ([self.stopped] if self.stopped is not None else [])
        return [end - start for start, end in zip(self.starts, ends)][skip:]


def self_report(options: Options, periods_s: Sequence[float], device: str | None = None,
                world_size: int = 1) -> dict[str, Any]:
    """The fields of the ``PERFGATE_SELF_REPORT`` line (docs/ARCHITECTURE.md), plus ``knobs``."""
    total_s = sum(periods_s)
    samples = options.batch_size * world_size * len(periods_s)
    return {
        "workload": options.workload,
        "device": device or options.device,
        "steps": len(periods_s),
        "warmup_steps": options.warmup_steps,
        "batch_size": options.batch_size,
        "world_size": world_size,
        "step_ms_median": statistics.median(periods_s) * 1e3 if periods_s else 0.0,
        "step_ms_mean": statistics.fmean(periods_s) * 1e3 if periods_s else 0.0,
        "samples_per_s": samples / total_s if total_s > 0 else 0.0,
        "knobs": options.as_dict(),
    }


def print_self_report(options: Options, periods_s: Sequence[float], last_loss: float | None = None,
                      device: str | None = None, world_size: int = 1) -> None:
    """The human line, then the one ``PERFGATE_SELF_REPORT {json}`` line."""
    report = self_report(options, periods_s, device, world_size)
    loss = f", last loss {last_loss:.4f}" if last_loss is not None else ""
    print(
        f"[{report['workload']}] {report['steps']} steps on {report['device']} "
        f"(world size {report['world_size']}, batch {report['batch_size']}, "
        f"{report['warmup_steps']} warm-up): median {report['step_ms_median']:.2f} ms/step, "
        f"mean {report['step_ms_mean']:.2f} ms/step, {report['samples_per_s']:.1f} samples/s{loss}",
        flush=True,
    )
    print(f"{SELF_REPORT_PREFIX} {json.dumps(report, sort_keys=True, default=str)}", flush=True)

"""Seed 002's job: ResNet-50 under DistributedDataParallel with a DistributedSampler over
synthetic images, one process per GPU (NCCL), or per CPU process (gloo).

    torchrun --nproc-per-node=2 --standalone -m workloads.ddp     # two processes
    python -m workloads.ddp                                        # world size 1, no torchrun
    ... -m workloads.ddp --bucket-cap-mb 1                         # many small all-reduces per step
    ... -m workloads.ddp --no-sync-steps 4                         # accumulate 4 micro-batches per step
    ... -m workloads.ddp --backend gloo                            # gloo on CUDA: ranks may share a GPU

Every rank emits the NVTX ranges; rank 0 prints the self-report (its own host-timed steps,
samples/s counted over all ranks).
"""
from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from typing import Any

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

from perfgate import nvtx
from workloads._common import Dist, Knobs, Parts, Workload, _positive_int, parse_knobs, print_self_report, train

NUM_CLASSES = 1000


class SyntheticImages(Dataset):
    """Seed 002's SyntheticDataset: a fresh randn image and a random label per item, here
    seeded by (seed, index) so every run sees the same data."""

    def __init__(self, count: int, image_size: int, seed: int) -> None:
        self.count, self.image_size, self.seed = count, image_size, seed

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = torch.randn(3, self.image_size, self.image_size, generator=generator)
        label = int(torch.randint(0, NUM_CLASSES, (1,), generator=generator))
        return image, label


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--image-size", type=int, help="synthetic image size (seed: 224)")
    add("--bucket-cap-mb", type=_positive_float, metavar="MB",
        help="DistributedDataParallel's bucket_cap_mb (its default: 25): smaller buckets, more all-reduces per step")
    accumulation = parser.add_mutually_exclusive_group()
    accumulation.add_argument(
        "--no-sync-steps", type=_positive_int, metavar="N",
        help="gradient accumulation: N micro-batches per step, the first N-1 inside DDP's no_sync() "
             "(the gradients are all-reduced once per step)")
    accumulation.add_argument(
        "--accumulate", type=_positive_int, metavar="N",
        help="N micro-batches per step, each all-reduced (accumulation without no_sync: N times the all-reduces)")
    add("--backend", choices=("nccl", "gloo"),
        help="process group backend (default: nccl on cuda, gloo on cpu). gloo on cuda all-reduces through "
             "the host and lets several ranks share one GPU (rank r on GPU r mod the GPU count), where NCCL "
             "needs a GPU per rank")
    add("--allreduce-ranges", action="store_true", default=None,
        help="an NVTX range 'allreduce' around each bucket's all-reduce (a DDP comm hook doing what DDP's "
             "default does): the buckets show in a CPU (gloo) trace, where no NCCL kernel does")


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _allreduce_in_range(calls, bucket):
    """DDP's default all-reduce of one bucket (average over ranks), inside an NVTX range, counted.
    Unannotated: DDP checks a hook's annotations, and this module's are strings (``annotations``)."""
    calls[0] += 1
    with nvtx.range("allreduce"):
        return default_hooks.allreduce_hook(dist.group.WORLD, bucket)


class _Ddp:
    """Wraps the model in DistributedDataParallel with the knobs' bucket size and comm hook, and says
    what it did (the all-reduces the hook saw in the last step) for the self-report."""

    def __init__(self, knobs: Knobs, device_ids: list[int] | None) -> None:
        self.knobs, self.device_ids = knobs, device_ids
        self.model: DistributedDataParallel | None = None
        self.calls = [0]              # all-reduces the comm hook ran (with --allreduce-ranges)
        self.step_marks: list[int] = []
        self.micro_steps = knobs.extra.get("no_sync_steps") or knobs.extra.get("accumulate") or 1
        self.no_sync = knobs.extra.get("no_sync_steps") is not None

    def wrap(self, model: nn.Module) -> nn.Module:
        cap = self.knobs.extra.get("bucket_cap_mb")
        self.model = DistributedDataParallel(model, device_ids=self.device_ids,
                                             **({"bucket_cap_mb": cap} if cap is not None else {}))
        if self.knobs.extra.get("allreduce_ranges"):
            self.model.register_comm_hook(self.calls, _allreduce_in_range)
        return self.model

    def micro_step(self, model: nn.Module, index: int) -> AbstractContextManager[Any]:
        """DDP's no_sync() for every micro-step but the last (with --no-sync-steps)."""
        if index == 0:                # a step begins: the hook's count so far
            self.step_marks.append(self.calls[0])
        if self.no_sync and index < self.micro_steps - 1 and self.model is not None:
            return self.model.no_sync()
        return nullcontext()

    def report(self) -> dict[str, Any]:
        """``ddp`` in the self-report: the knobs, and the all-reduces of the last step (steady
        state: DDP rebuilds its buckets after the first iteration) when the hook counted them."""
        counted = self.knobs.extra.get("allreduce_ranges") and self.step_marks
        return {"ddp": {"bucket_cap_mb": self.knobs.extra.get("bucket_cap_mb") or 25.0,
                        "micro_steps": self.micro_steps, "no_sync": self.no_sync,
                        "allreduce_calls_last_step": self.calls[0] - self.step_marks[-1] if counted else None}}


def _world() -> tuple[int, int, int]:
    """(world size, rank, local rank) from torchrun's environment; (1, 0, 0) without it."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    return 1, 0, 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_process_group(device: str, backend: str | None = None) -> tuple[int, int, int]:
    """Join torchrun's group, or make a group of one; NCCL on cuda, gloo on cpu unless ``backend``
    says. Returns (world size, rank, the local rank's device index: its GPU on cuda)."""
    world_size, rank, local_rank = _world()
    backend = backend or ("nccl" if device == "cuda" else "gloo")
    if device == "cuda":
        local_rank %= torch.cuda.device_count()     # ranks sharing a GPU (gloo)
        torch.cuda.set_device(local_rank)
    if "MASTER_ADDR" in os.environ and "RANK" in os.environ:
        dist.init_process_group(backend=backend)
    else:
        dist.init_process_group(backend=backend, init_method=f"tcp://127.0.0.1:{_free_port()}",
                                world_size=1, rank=0)
    return world_size, rank, local_rank


def _build_for(world_size: int) -> Callable[[Knobs, int], Parts]:
    """The build function for ``world_size`` ranks: the dataset covers every rank's samples."""
    def build(knobs: Knobs, samples: int) -> Parts:
        return Parts(
            model=torchvision.models.resnet50(weights=None, num_classes=NUM_CLASSES),
            dataset=SyntheticImages(samples * world_size, knobs.extra["image_size"], knobs.seed),
            loss_fn=nn.CrossEntropyLoss(),
            make_optimizer=lambda params: torch.optim.SGD(params, lr=1e-3),
        )
    return build


PRESETS = {
    "gpu": {"batch_size": 64, "steps": 60, "warmup_steps": 10, "image_size": 224,
            "workers": 2, "pin_memory": True},
    "cpu": {"batch_size": 2, "steps": 8, "warmup_steps": 2, "image_size": 64},
}

WORKLOAD = Workload(name="ddp", description=__doc__.split("\n\n")[0], presets=PRESETS,
                    build=_build_for(1), add_arguments=_add_arguments)


def main(argv: Sequence[str] | None = None) -> int:
    knobs = parse_knobs(WORKLOAD, argv)
    world_size, rank, local_rank = init_process_group(knobs.device, knobs.extra.get("backend"))
    try:
        ddp = _Ddp(knobs, [local_rank] if knobs.device == "cuda" else None)
        placement = Dist(
            world_size=world_size,
            rank=rank,
            local_rank=local_rank,
            wrap=ddp.wrap,
            make_sampler=lambda dataset: DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                                            shuffle=True, seed=knobs.seed, drop_last=True),
            micro_steps=ddp.micro_steps,
            micro_step=ddp.micro_step,
        )
        result = train(replace(WORKLOAD, build=_build_for(world_size)), knobs, placement)
        if rank == 0:
            print_self_report(result, ddp.report())
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

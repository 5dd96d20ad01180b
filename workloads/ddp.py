"""Seed 002's job: ResNet-50 under DistributedDataParallel with a DistributedSampler over
synthetic images, one process per GPU (NCCL), or per CPU process (gloo).

    torchrun --nproc-per-node=2 --standalone -m workloads.ddp     # two processes
    python -m workloads.ddp                                        # world size 1, no torchrun

Every rank emits the NVTX ranges; rank 0 prints the self-report (its own host-timed steps,
samples/s counted over all ranks).
"""
from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
import torch.distributed as dist
import torchvision
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import Dataset
from torch.utils.data.distributed import DistributedSampler

from workloads._common import Dist, Knobs, Parts, Workload, parse_knobs, print_self_report, train

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
    parser.add_argument("--image-size", type=int, help="synthetic image size (seed: 224)")


def _world() -> tuple[int, int, int]:
    """(world size, rank, local rank) from torchrun's environment; (1, 0, 0) without it."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", 0))
    return 1, 0, 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def init_process_group(device: str) -> tuple[int, int, int]:
    """Join torchrun's group, or make a group of one; NCCL on cuda, gloo on cpu."""
    world_size, rank, local_rank = _world()
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
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
    world_size, rank, local_rank = init_process_group(knobs.device)
    try:
        device_ids = [local_rank] if knobs.device == "cuda" else None
        placement = Dist(
            world_size=world_size,
            rank=rank,
            local_rank=local_rank,
            wrap=lambda model: DistributedDataParallel(model, device_ids=device_ids),
            make_sampler=lambda dataset: DistributedSampler(dataset, num_replicas=world_size, rank=rank,
                                                            shuffle=True, seed=knobs.seed, drop_last=True),
        )
        result = train(replace(WORKLOAD, build=_build_for(world_size)), knobs, placement)
        if rank == 0:
            print_self_report(result)
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Seed 003's job: torchvision ResNet-18 on CIFAR-10-sized images resized to 224, SGD.

The data are 32x32 random uint8 images with labels 0..9, generated from ``--seed`` (no
download). Each item goes through the seed's transform, Resize(--image-size) + ToTensor +
Normalize, in the DataLoader, so data loading is real CPU work as with CIFAR-10.
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
import torchvision
from PIL import Image
from torch import nn
from torch.utils.data import Dataset
from torchvision import transforms

from workloads._common import Knobs, Parts, Workload, main as common_main

NUM_CLASSES = 10


class SyntheticCifar(Dataset):
    """``count`` deterministic 32x32 RGB uint8 images, transformed per item like seed 003."""

    def __init__(self, count: int, image_size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 256, (count, 32, 32, 3), dtype=torch.uint8, generator=generator).numpy()
        self.labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator).tolist()
        self.transform = transforms.Compose([
            transforms.Resize(image_size),
            transforms.ToTensor(),
            transforms.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
        ])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.transform(Image.fromarray(self.images[index])), self.labels[index]


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-size", type=int, help="Resize target (seed: 224)")


def build(knobs: Knobs, samples: int) -> Parts:
    model = torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES)
    return Parts(
        model=model,
        dataset=SyntheticCifar(samples, knobs.extra["image_size"], knobs.seed),
        loss_fn=nn.CrossEntropyLoss(),
        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.001, momentum=0.9),
    )


WORKLOAD = Workload(
    name="resnet_cifar",
    description=__doc__.split("\n\n")[0],
    presets={
        "gpu": {"batch_size": 256, "steps": 60, "warmup_steps": 10, "image_size": 224,
                "workers": 8, "pin_memory": True, "non_blocking": True},
        "cpu": {"batch_size": 4, "steps": 12, "warmup_steps": 2, "image_size": 64},
    },
    build=build,
    add_arguments=_add_arguments,
)


def main(argv: Sequence[str] | None = None) -> int:
    return common_main(WORKLOAD, argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Seed 000's job: torchvision ResNet-50 (200 classes) on an ImageFolder of JPEG files, SGD.

The folder imitates Tiny ImageNet (200 classes, 64x64 JPEGs). It is generated once, from
``--seed``, into ``--data-dir`` (default ``~/.cache/perfgate/imagefolder-<images>``) and reused;
a ``--data-dir`` that already holds class folders is used as it is, so a real ImageFolder works
too. Items go through the seed's train transforms (RandomResizedCrop, RandomHorizontalFlip,
ToTensor, Normalize): data loading is real JPEG decoding and augmentation.
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torchvision
from PIL import Image
from torch import nn
from torchvision import transforms

from workloads._common import Knobs, Parts, Workload, main as common_main

NUM_CLASSES = 200
SOURCE_SIZE = 64                      # Tiny ImageNet's image size
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def default_data_dir(images: int) -> Path:
    """``$XDG_CACHE_HOME/perfgate/imagefolder-<images>`` (``~/.cache`` when unset)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "perfgate" / f"imagefolder-{images}"


def _smooth_image(rng: np.random.Generator) -> Image.Image:
    """A photo-like image: coarse random colour fields, upsampled, with fine noise (JPEG sizes
    like natural images, unlike white noise)."""
    coarse = Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
    base = np.asarray(coarse.resize((SOURCE_SIZE, SOURCE_SIZE), Image.BICUBIC), dtype=np.int16)
    noise = rng.integers(-12, 13, base.shape, dtype=np.int16)
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def ensure_image_folder(root: Path, images: int, seed: int) -> Path:
    """``root/train/<class>/*.JPEG`` with ``images`` files over up to 200 classes; generated
    into a temporary sibling and renamed into place, so a half-written folder is never used."""
    train = root / "train"
    if train.is_dir() and any(train.iterdir()):
        return train
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{root.name}-", dir=root.parent))
    try:
        rng = np.random.default_rng(seed)
        classes = min(NUM_CLASSES, images)
        for index in range(images):
            folder = staging / "train" / f"n{index % classes:04d}"
            folder.mkdir(parents=True, exist_ok=True)
            _smooth_image(rng).save(folder / f"img_{index:06d}.JPEG", quality=90)
        if root.exists() and not any(root.iterdir()):
            root.rmdir()
        try:
            os.replace(staging, root)
        except OSError:
            if not (train.is_dir() and any(train.iterdir())):   # lost a race: keep the winner's
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return train


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-size", type=int, help="RandomResizedCrop size (seed: 224)")
    parser.add_argument("--images", type=int, help="number of JPEG files to generate")
    parser.add_argument("--data-dir", type=Path,
                        help="ImageFolder root (holding train/); default ~/.cache/perfgate/imagefolder-<images>")


def build(knobs: Knobs, samples: int) -> Parts:
    images = knobs.extra["images"]
    root = knobs.extra.get("data_dir") or default_data_dir(images)
    train = ensure_image_folder(Path(root), images, knobs.seed)
    dataset = torchvision.datasets.ImageFolder(
        str(train),
        transform=transforms.Compose([
            transforms.RandomResizedCrop(knobs.extra["image_size"]),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(IMAGENET_MEAN, IMAGENET_STD),
        ]),
    )
    return Parts(
        model=torchvision.models.resnet50(weights=None, num_classes=NUM_CLASSES),
        dataset=dataset,
        loss_fn=nn.CrossEntropyLoss(),
        make_optimizer=lambda params: torch.optim.SGD(params, lr=1e-2, momentum=0.9, weight_decay=5e-4),
        samples_with_replacement=True,
    )


WORKLOAD = Workload(
    name="resnet_imagefolder",
    description=__doc__.split("\n\n")[0],
    presets={
        "gpu": {"batch_size": 64, "steps": 60, "warmup_steps": 10, "image_size": 224, "images": 10000,
                "workers": 8, "pin_memory": True, "non_blocking": True},
        "cpu": {"batch_size": 2, "steps": 8, "warmup_steps": 2, "image_size": 64, "images": 400},
    },
    build=build,
    add_arguments=_add_arguments,
)


def main(argv: Sequence[str] | None = None) -> int:
    return common_main(WORKLOAD, argv)


if __name__ == "__main__":
    raise SystemExit(main())

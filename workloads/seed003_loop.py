"""Seed 003's training loop as the seed writes it: ResNet-18 on CIFAR-10-sized images, SGD, with
``__next__ N`` and ``batch N`` NVTX ranges pushed and popped by hand.

``dl = iter(train_loader)``; per batch, ``next(dl)`` inside ``__next__ N``, then ``batch N``
holding the seed's ``train()``: ``copy data N``, ``forward N``, ``backward N`` (zero_grad,
backward and optimizer.step). No ``loss.item()``: the seed has none. ``Total Elapsed Time``
(a start/end range, as the seed's) spans the measured batches. perfgate's default step pattern
matches ``batch N``; the numbers are folded off the phase names.

Images are 32x32 random uint8 images made per index from ``--seed`` (no download), through the
seed's transform ``Resize(--image-size)`` + ``ToTensor`` + ``Normalize`` in the DataLoader.
"""
from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import torch
import torch.nn
import torch.optim
import torch.utils.data
import torchvision.models
import torchvision.transforms as T
from PIL import Image

from workloads._userloop import IterationClock, configure_torch, parse_options, print_self_report

NAME = "seed003_loop"
NUM_CLASSES = 10
PRESETS = {
    # the seed's baseline: batch 32, no workers, 224 px (about 20-60 ms an iteration on an H100)
    "gpu": {"batch_size": 32, "steps": 60, "warmup_steps": 3, "image_size": 224},
    "cpu": {"batch_size": 8, "steps": 10, "warmup_steps": 3, "image_size": 32},
}


class RandomCifar(torch.utils.data.Dataset):
    """CIFAR-10's shape: ``count`` 32x32 RGB uint8 images made per index, labels 0..9."""

    def __init__(self, count: int, seed: int, transform: T.Compose, sleep_s: float = 0.0) -> None:
        self.count, self.seed, self.transform, self.sleep_s = count, seed, transform, sleep_s

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        pixels = torch.randint(0, 256, (32, 32, 3), dtype=torch.uint8, generator=generator)
        label = int(torch.randint(0, NUM_CLASSES, (1,), generator=generator))
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return self.transform(Image.fromarray(pixels.numpy())), label


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-size", type=int, help="Resize target (seed: 224; 32: no resize)")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(NAME, __doc__.split("\n\n")[0], PRESETS, argv, _add_arguments)
    configure_torch(options)

    # The seed imports the `nvtx` PyPI package (nvtx.push_range/pop_range). nsys 2022.4, the CI
    # machine's, records no ranges from that package in a process without CUDA, so this uses
    # torch's own binding, which nsys records everywhere: same push/pop ranges, same names.
    nvtx = torch.cuda.nvtx

    image_size = options.extra["image_size"]
    steps = [T.Resize(image_size)] if image_size != 32 else []
    transform = T.Compose([*steps, T.ToTensor(), T.Normalize((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))])
    train_set = RandomCifar(options.batch_size * options.total_steps, options.seed, transform,
                            options.sample_sleep_s)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=options.batch_size, shuffle=True,
                                               num_workers=options.workers)
    device = torch.device("cuda:0" if options.device == "cuda" else "cpu")
    model = torchvision.models.resnet18(weights=None, num_classes=NUM_CLASSES).to(device)
    criterion = torch.nn.CrossEntropyLoss().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    model.train()

    def train(data: Sequence[torch.Tensor], batch_idx: int) -> None:
        # Data transmission
        nvtx.range_push("copy data " + str(batch_idx))
        inputs, labels = data[0].to(device=device), data[1].to(device=device)
        nvtx.range_pop()
        # Forward propagation
        nvtx.range_push("forward " + str(batch_idx))
        outputs = model(inputs)
        loss = criterion(outputs, labels)
        nvtx.range_pop()
        # Backward propagation
        nvtx.range_push("backward " + str(batch_idx))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        nvtx.range_pop()

    clock = IterationClock()
    total_batches = options.total_steps
    # enumerate(train_loader) cannot put NVTX around data loading: the seed iterates by hand.
    dl = iter(train_loader)
    batch_idx = 0
    while True:
        try:
            # Total elapsed time of the measured batches.
            if batch_idx == options.warmup_steps:
                tet = nvtx.range_start(f"Total Elapsed Time({options.steps} batchs)")
            if batch_idx >= total_batches:
                nvtx.range_end(tet)
                break
            # Data loading.
            nvtx.range_push("__next__ " + str(batch_idx))
            batch_data = next(dl)
            nvtx.range_pop()
            # Batch processing, including data transmission and computing.
            clock.tick()
            nvtx.range_push("batch " + str(batch_idx))
            train(batch_data, batch_idx)
            nvtx.range_pop()
            batch_idx += 1
        except StopIteration:
            nvtx.range_pop()
            break
    clock.stop(sync_cuda=device.type == "cuda")      # the seed does not wait for the GPU: the clock does

    print_self_report(options, clock.periods_s(options.warmup_steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

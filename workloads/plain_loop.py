"""The training loop most people write: ``for inputs, targets in loader:`` with a ``step`` NVTX
range inside the body, a small CNN on images, SGD.

Data loading happens in the ``for`` statement, before the body: outside the ``step`` range
(perfgate counts it in ``between_steps``). Inside ``step``: ``h2d``, ``forward``, ``backward``,
``optimizer``, then ``loss.item()`` as a loop that logs its loss does. Warm-up iterations emit the
same ranges as measured ones. The loop stops once the batch after the last one has arrived, so
each iteration's self-reported time runs from its start to the next one's, loading included.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.data import DataLoader

from perfgate import nvtx
from workloads._userloop import IterationClock, SyntheticImages, configure_torch, parse_options, print_self_report

NAME = "plain_loop"
NUM_CLASSES = 10
PRESETS = {
    "gpu": {"batch_size": 256, "steps": 60, "warmup_steps": 3, "workers": 8, "image_size": 64, "width": 192},
    "cpu": {"batch_size": 16, "steps": 12, "warmup_steps": 3, "image_size": 32, "width": 16},
}


class SmallCNN(nn.Module):
    """Three conv-BN-ReLU blocks (``width``, 2x, 4x channels), global average pool, linear."""

    def __init__(self, width: int, classes: int = NUM_CLASSES) -> None:
        super().__init__()

        def block(cin: int, cout: int) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.features = nn.Sequential(
            *block(3, width), nn.MaxPool2d(2),
            *block(width, 2 * width), nn.MaxPool2d(2),
            *block(2 * width, 4 * width),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.classifier = nn.Linear(4 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--image-size", type=int, help="image side in pixels")
    parser.add_argument("--width", type=int, help="channels of the first conv block")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(NAME, __doc__.split("\n\n")[0], PRESETS, argv, _add_arguments)
    configure_torch(options)
    device = torch.device(options.device)

    # one batch more than the loop trains on: the last iteration's period ends when the next batch is there
    dataset = SyntheticImages(options.batch_size * (options.total_steps + 1), options.extra["image_size"],
                              NUM_CLASSES, options.seed, options.sample_sleep_s)
    loader = DataLoader(dataset, batch_size=options.batch_size, shuffle=True, drop_last=True,
                        num_workers=options.workers, pin_memory=device.type == "cuda")
    model = SmallCNN(options.extra["width"]).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    model.train()
    clock = IterationClock()
    running_loss = math.nan
    for index, (inputs, targets) in enumerate(loader):   # data loading: here, outside the step range
        clock.tick()
        if index == options.total_steps:
            break
        with nvtx.range("step"):
            with nvtx.range("h2d"):
                inputs = inputs.to(device, non_blocking=True)
                targets = targets.to(device, non_blocking=True)
            with nvtx.range("forward"):
                outputs = model(inputs)
                loss = criterion(outputs, targets)
            with nvtx.range("backward"):
                loss.backward()
            with nvtx.range("optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            running_loss = loss.item()

    print_self_report(options, clock.periods_s(options.warmup_steps), running_loss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

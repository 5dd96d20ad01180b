"""Train a small MLP on synthetic data: a training script as people write it.

No NVTX, no perfgate import: under ``perfgate run`` / ``pytest --perfgate`` perfgate's autostep
hooks mark each DataLoader batch, backward and optimizer step, and one iteration is measured from
one optimizer step to the next. Runs on a GPU when there is one, else on the CPU.

    python -m workloads.train_mlp                      # plain run, prints the time per step
    EXAMPLE_SLOW_DATA_MS=20 python -m workloads.train_mlp   # every batch takes 20 ms longer to load
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    """Random feature vectors with labels; ``slow_s`` per batch mimics a slower input pipeline."""

    def __init__(self, samples: int, features: int, classes: int) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(samples, features, generator=generator)
        self.y = torch.randint(0, classes, (samples,), generator=generator)

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]], slow_s: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    if slow_s:
        time.sleep(slow_s)   # the injected regression: a data pipeline that got slower
    xs, ys = zip(*batch)
    return torch.stack(xs), torch.stack(ys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--features", type=int, default=256)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--slow-data-ms", type=float, default=float(os.environ.get("EXAMPLE_SLOW_DATA_MS", 0)),
                        help="extra time to load each batch (default $EXAMPLE_SLOW_DATA_MS or 0)")
    args = parser.parse_args()

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dataset = Synthetic(args.steps * args.batch_size, args.features, classes=10)
    slow_s = args.slow_data_ms / 1000
    loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True, num_workers=args.workers,
                        collate_fn=lambda batch: collate(batch, slow_s), pin_memory=device.type == "cuda")
    model = nn.Sequential(nn.Linear(args.features, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                          nn.Linear(512, 10)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    start = time.perf_counter()
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    print(f"{args.steps} steps, {1000 * (time.perf_counter() - start) / args.steps:.2f} ms/step, last loss {loss.item():.3f}")


if __name__ == "__main__":
    main()

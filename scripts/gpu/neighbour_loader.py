"""Another program beside a gate: a DataLoader with ``--workers`` worker processes (``pt_data_worker``)
iterating a slow dataset on the CPU until it is stopped, as another job on a shared runner would.
nsys lists every process of the machine in a capture's PROCESSES table, this one's workers too.

    setsid python3 scripts/gpu/neighbour_loader.py --workers 2 & ... ; kill -- -$!

Prints ``READY`` once its workers have delivered a batch.
"""
from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __len__(self) -> int:
        return 10 ** 9

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(0.05)
        return torch.zeros(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    workers = parser.parse_args().workers
    batches = iter(DataLoader(Slow(), batch_size=1, num_workers=workers))
    next(batches)
    print("READY", flush=True)
    while True:
        next(batches)


if __name__ == "__main__":
    main()

"""A PyTorch Lightning script: a LightningModule (small CNN, SGD) fit by ``Trainer(max_steps=...)``.

No NVTX of its own: perfgate finds the iterations by itself (its optimizer hook). With
``--perfgate-callback`` the Trainer gets :class:`perfgate.integrations.lightning.PerfgateCallback`:
one ``step`` range per optimizer step holding ``forward``, ``backward`` and ``optimizer``. The
self-reported iteration time comes from a callback of this script's own, from one
``on_train_batch_start`` to the next. Uses ``lightning`` (else ``pytorch_lightning``).
"""
from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader

from workloads._userloop import IterationClock, SyntheticImages, configure_torch, parse_options, print_self_report
from workloads.plain_loop import SmallCNN

NAME = "lightning_loop"
NUM_CLASSES = 10
PRESETS = {
    "gpu": {"batch_size": 256, "steps": 60, "warmup_steps": 3, "workers": 8, "image_size": 64, "width": 192},
    "cpu": {"batch_size": 16, "steps": 10, "warmup_steps": 3, "image_size": 32, "width": 16},
}


def _import_lightning() -> Any:
    """``lightning.pytorch``, else ``pytorch_lightning``."""
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    return pl


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--perfgate-callback", action="store_true",
                        help="add perfgate.integrations.lightning.PerfgateCallback (NVTX step and phase ranges)")
    parser.add_argument("--image-size", type=int, help="image side in pixels")
    parser.add_argument("--width", type=int, help="channels of the first conv block")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(NAME, __doc__.split("\n\n")[0], PRESETS, argv, _add_arguments)
    configure_torch(options)
    pl = _import_lightning()

    class ImageClassifier(pl.LightningModule):
        def __init__(self, width: int, lr: float = 0.01) -> None:
            super().__init__()
            self.model = SmallCNN(width, NUM_CLASSES)
            self.lr = lr
            self.last_loss: torch.Tensor | None = None

        def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
            images, labels = batch
            loss = F.cross_entropy(self.model(images), labels)
            self.last_loss = loss.detach()
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)

    class IterationTimes(pl.Callback):
        """Host time from one ``on_train_batch_start`` to the next (the last: to its batch end)."""

        def __init__(self, clock: IterationClock) -> None:
            self.clock = clock

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self.clock.tick()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if trainer.global_step >= trainer.max_steps:
                self.clock.stop(sync_cuda=pl_module.device.type == "cuda")

    dataset = SyntheticImages(options.batch_size * options.total_steps, options.extra["image_size"],
                              NUM_CLASSES, options.seed, options.sample_sleep_s)
    loader = DataLoader(dataset, batch_size=options.batch_size, shuffle=True, drop_last=True,
                        num_workers=options.workers, pin_memory=options.device == "cuda",
                        persistent_workers=options.workers > 0)

    clock = IterationClock()
    callbacks: list[Any] = [IterationTimes(clock)]
    if options.extra["perfgate_callback"]:
        from perfgate.integrations.lightning import PerfgateCallback

        callbacks.append(PerfgateCallback())
    trainer = pl.Trainer(
        max_steps=options.total_steps,
        accelerator="gpu" if options.device == "cuda" else "cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )
    module = ImageClassifier(options.extra["width"])
    trainer.fit(module, train_dataloaders=loader)

    last_loss = None if module.last_loss is None else float(module.last_loss)
    print_self_report(options, clock.periods_s(options.warmup_steps), last_loss)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

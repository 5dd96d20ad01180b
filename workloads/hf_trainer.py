"""A Hugging Face ``Trainer`` script: a tiny GPT-2 built from a config, trained on random tokens.

No NVTX of its own: perfgate finds the iterations by itself (its optimizer hook). With
``--perfgate-callback`` the Trainer gets :class:`perfgate.integrations.hf.PerfgateCallback`:
one ``step`` range per optimizer step holding ``forward_backward`` and ``optimizer``. The
self-reported iteration time comes from a small callback of this script's own, from one
``on_step_begin`` to the next. Nothing is downloaded (``HF_HUB_OFFLINE=1``; the model comes
from a ``GPT2Config``, the data from a seeded generator).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from workloads._userloop import IterationClock, configure_torch, parse_options, print_self_report

NAME = "hf_trainer"
PRESETS = {
    "gpu": {"batch_size": 128, "steps": 60, "warmup_steps": 3, "workers": 4,
            "seq_len": 128, "vocab": 5000, "d_model": 256, "heads": 4, "layers": 4},
    "cpu": {"batch_size": 4, "steps": 10, "warmup_steps": 3,
            "seq_len": 64, "vocab": 1000, "d_model": 128, "heads": 2, "layers": 2},
}


class RandomTokenDataset(Dataset):
    """``count`` sequences of ``seq_len`` token ids made per index from the seed; each item is
    ``{"input_ids", "labels"}`` (the model shifts the labels), after the ``--slow-data-ms`` share."""

    def __init__(self, count: int, seq_len: int, vocab: int, seed: int, sleep_s: float = 0.0) -> None:
        self.count, self.seq_len, self.vocab, self.seed, self.sleep_s = count, seq_len, vocab, seed, sleep_s

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        input_ids = torch.randint(0, self.vocab, (self.seq_len,), generator=generator)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        return {"input_ids": input_ids, "labels": input_ids.clone()}


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--perfgate-callback", action="store_true",
                        help="add perfgate.integrations.hf.PerfgateCallback (NVTX step and phase ranges)")
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--vocab", type=int)
    parser.add_argument("--d-model", type=int, help="GPT-2 n_embd")
    parser.add_argument("--heads", type=int, help="GPT-2 n_head")
    parser.add_argument("--layers", type=int, help="GPT-2 n_layer")


def main(argv: Sequence[str] | None = None) -> int:
    options = parse_options(NAME, __doc__.split("\n\n")[0], PRESETS, argv, _add_arguments)
    configure_torch(options)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")                 # before transformers is imported
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

    class IterationTimes(TrainerCallback):
        """Host time from one ``on_step_begin`` to the next (the last step: to its on_step_end)."""

        def __init__(self, clock: IterationClock, sync_cuda: bool) -> None:
            self.clock, self.sync_cuda = clock, sync_cuda

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.clock.tick()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            if state.global_step >= state.max_steps:
                self.clock.stop(sync_cuda=self.sync_cuda)

    extra = options.extra
    config = GPT2Config(vocab_size=extra["vocab"], n_positions=extra["seq_len"], n_embd=extra["d_model"],
                        n_head=extra["heads"], n_layer=extra["layers"],
                        bos_token_id=extra["vocab"] - 1, eos_token_id=extra["vocab"] - 1)
    model = GPT2LMHeadModel(config)
    train_dataset = RandomTokenDataset(options.batch_size * options.total_steps, extra["seq_len"],
                                       extra["vocab"], options.seed, options.sample_sleep_s)

    clock = IterationClock()
    callbacks: list[Any] = [IterationTimes(clock, sync_cuda=options.device == "cuda")]
    if extra["perfgate_callback"]:
        from perfgate.integrations.hf import PerfgateCallback

        callbacks.append(PerfgateCallback())

    with tempfile.TemporaryDirectory(prefix="perfgate-hf-") as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            max_steps=options.total_steps,
            per_device_train_batch_size=options.batch_size,
            learning_rate=3e-4,
            dataloader_num_workers=options.workers,
            dataloader_pin_memory=options.device == "cuda",
            use_cpu=options.device == "cpu",
            seed=options.seed,
            report_to=[],
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
        )
        trainer = Trainer(model=model, args=args, train_dataset=train_dataset, callbacks=callbacks)
        trainer.train()

    print_self_report(options, clock.periods_s(options.warmup_steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

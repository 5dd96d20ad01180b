"""A small decoder-only language model (pre-norm nn.TransformerEncoderLayer blocks with a
causal mask, tied embeddings) trained with AdamW on random token batches."""
from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import Dataset

from workloads._common import Knobs, Parts, Workload, main as common_main


class RandomTokens(Dataset):
    """``count`` deterministic sequences of ``seq_len + 1`` token ids; items are (input, next tokens)."""

    def __init__(self, count: int, seq_len: int, vocab: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (count, seq_len + 1), generator=generator)

    def __len__(self) -> int:
        return self.tokens.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        row = self.tokens[index]
        return row[:-1], row[1:]


class DecoderLM(nn.Module):
    """Token + position embeddings, ``layers`` causal pre-norm blocks, final norm, tied head."""

    def __init__(self, vocab: int, seq_len: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        block = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)
        self.head.weight = self.embed.weight
        nn.init.normal_(self.embed.weight, std=0.02)
        nn.init.normal_(self.position.weight, std=0.02)
        self.register_buffer("causal_mask", nn.Transformer.generate_square_subsequent_mask(seq_len),
                             persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        length = tokens.shape[1]
        positions = torch.arange(length, device=tokens.device)
        hidden = self.embed(tokens) + self.position(positions)
        hidden = self.blocks(hidden, mask=self.causal_mask[:length, :length], is_causal=True)
        return self.head(self.norm(hidden))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--vocab", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--layers", type=int)


def build(knobs: Knobs, samples: int) -> Parts:
    extra = knobs.extra
    model = DecoderLM(extra["vocab"], extra["seq_len"], extra["d_model"], extra["heads"], extra["layers"])
    return Parts(
        model=model,
        dataset=RandomTokens(samples, extra["seq_len"], extra["vocab"], knobs.seed),
        loss_fn=lm_loss,
        make_optimizer=lambda params: torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1),
        image_input=False,
    )


WORKLOAD = Workload(
    name="transformer_lm",
    description=__doc__.split("\n\n")[0],
    presets={
        "gpu": {"batch_size": 32, "steps": 60, "warmup_steps": 10, "seq_len": 512, "vocab": 32000,
                "d_model": 512, "heads": 8, "layers": 8, "workers": 2, "pin_memory": True, "non_blocking": True},
        "cpu": {"batch_size": 4, "steps": 12, "warmup_steps": 2, "seq_len": 64, "vocab": 512,
                "d_model": 64, "heads": 2, "layers": 2},
    },
    build=build,
    add_arguments=_add_arguments,
)


def main(argv: Sequence[str] | None = None) -> int:
    return common_main(WORKLOAD, argv)


if __name__ == "__main__":
    raise SystemExit(main())

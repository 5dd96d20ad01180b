"""The training script of the diagnosis corpus: every case is a small edit of this file that a pull
request could make (tests/corpus/cases.py). Written the way users write one, after seed 002: a
``for step, (source, targets) in enumerate(loader)`` loop, NVTX ranges ``Step N Start``,
``Optimizer Zero Grad``, ``Forward Pass``, ``Loss Computation``, ``Backward Pass``,
``Optimizer Step``, the copies to the GPU at the top of the step with no range of their own, data
loading outside the step range, bf16 autocast, fused AdamW, no per-step synchronisation.

    python3 tests/corpus/train.py [--steps 30] [--device cuda|cpu]
"""
import argparse
import time

import torch
import torch.cuda.nvtx as nvtx
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

FEATURES, DIM, HIDDEN, LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 2048, 6, 8, 1024, 256, 64


class Frames(Dataset):
    """Synthetic feature frames and their token labels, made on the CPU per sample."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(SEQ, FEATURES, generator=g)
        x = (x - x.mean(0)) / (x.std(0) + 1e-5)
        y = torch.randint(0, VOCAB, (SEQ,), generator=g)
        return x, y


class Block(nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(DIM)
        self.attn = nn.MultiheadAttention(DIM, HEADS, dropout=dropout, batch_first=True)
        self.norm2 = nn.LayerNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, DIM), nn.Dropout(dropout))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class Net(nn.Module):
    def __init__(self, layers=LAYERS, dropout=0.0):
        super().__init__()
        self.embed = nn.Linear(FEATURES, DIM)
        self.blocks = nn.ModuleList([Block(dropout) for _ in range(layers)])
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    torch.manual_seed(0)
    device = torch.device(args.device)
    model = Net().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    loader = DataLoader(Frames(BATCH * args.steps), batch_size=BATCH, shuffle=True, num_workers=4,
                        pin_memory=True, persistent_workers=True, drop_last=True)
    model.train()
    start = time.perf_counter()
    for step, (source, targets) in enumerate(loader):
        nvtx.range_push(f"Step {step} Start")
        source = source.to(device, non_blocking=True)
        targets = targets.to(device, non_blocking=True)
        nvtx.range_push("Optimizer Zero Grad")
        optimizer.zero_grad(set_to_none=True)
        nvtx.range_pop()
        nvtx.range_push("Forward Pass")
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            output = model(source)
        nvtx.range_pop()
        nvtx.range_push("Loss Computation")
        loss = F.cross_entropy(output.float().view(-1, VOCAB), targets.view(-1))
        nvtx.range_pop()
        nvtx.range_push("Backward Pass")
        loss.backward()
        nvtx.range_pop()
        nvtx.range_push("Optimizer Step")
        optimizer.step()
        nvtx.range_pop()
        nvtx.range_pop()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(f"{args.steps} steps in {elapsed:.2f} s ({elapsed / args.steps * 1e3:.1f} ms/step), last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()

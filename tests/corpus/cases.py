"""The diagnosis corpus: realistic pull-request edits of tests/corpus/train.py, one mechanism each.

A case is the script before (``base_edits`` applied to train.py, usually none: the shared base) and
after (``head_edits`` applied on top), and its truth: the mechanism the change works through and a
regular expression that the diagnosis's first reason must match to name it (searched,
case-insensitive). scripts/gpu/diagnosis-corpus.sh captures every side on the GPU machine into
tests/fixtures/corpus/<side>/; tests/diagnosis/test_diagnosis_corpus.py checks the verdicts and first reasons.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(__file__).with_name("train.py")

Edit = tuple[str, str]   # (text in the script, its replacement); the text must occur exactly once


@dataclass(frozen=True)
class Case:
    name: str
    mechanism: str
    change: str                      # what the pull request did, in a reviewer's words
    head_edits: tuple[Edit, ...]
    truth: str                       # regex the first reason must match
    base_edits: tuple[Edit, ...] = ()
    # whether the edit made this script slower on the H100 (seen there, one launch per side): an
    # edit that did not is kept, and the gate must not call it a regression; None: one launch per
    # side does not decide it (each of the step statistics below says another thing), neither
    # verdict is asserted
    regresses: bool | None = True
    # the capture of the unedited script the case compares with when it has no base edits: the
    # one taken in the same session on the GPU machine as its head
    shared_base: str = "base"
    # whether the first reason names the mechanism: False where the run came out faster than its base
    # on the H100 for another reason (a launch-bound step's host time), and the mechanism is named
    # among the differences that went the other way
    first: bool = True

    @property
    def base_side(self) -> str:
        """Name of the capture the case's baseline is (its ``shared_base`` unless it has edits)."""
        return f"{self.name}-base" if self.base_edits else self.shared_base

    @property
    def head_side(self) -> str:
        return self.name


NON_BLOCKING = ('source = source.to(device, non_blocking=True)\n        targets = targets.to(device, non_blocking=True)',
                'source = source.to(device)\n        targets = targets.to(device)')

CASES: tuple[Case, ...] = (
    Case("dropout", "kernels added in forward and backward", "dropout 0.1 in every block",
         (("def __init__(self, layers=LAYERS, dropout=0.0):", "def __init__(self, layers=LAYERS, dropout=0.1):"),),
         r"dropout"),
    Case("amp_off", "a kernel family changing precision", "bf16 autocast removed from the forward pass",
         (("        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):\n            output = model(source)",
           "        output = model(source)"),),
         r"precision|fp32|tf32|bf16|half|mixed"),
    Case("more_layers", "more layers", "6 -> 9 transformer blocks",
         (("LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 2048, 6,", "LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 2048, 9,"),),
         r"^more layers: .*normalization kernels \d+ -> \d+.*more parameters to update\): a deeper model"),
    Case("wider_mlp", "larger shapes", "MLP hidden size 2048 -> 4096",
         (("FEATURES, DIM, HIDDEN, LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 2048,",
           "FEATURES, DIM, HIDDEN, LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 4096,"),),
         r"^wider layers: .* take x1\.\d+ as long.*more parameters to update"),
    Case("optimizer_loop", "optimizer implementation", "AdamW's fused kernel replaced by the per-parameter loop",
         (('fused=device.type == "cuda")', 'foreach=False)'),),
         r"optimizer"),
    Case("loss_item", "a host sync added inside a phase", "loss logged with loss.item() every step",
         (('        loss = F.cross_entropy(output.float().view(-1, VOCAB), targets.view(-1))\n',
           '        loss = F.cross_entropy(output.float().view(-1, VOCAB), targets.view(-1))\n'
           '        if not torch.isfinite(loss).item():\n            raise RuntimeError("loss is not finite")\n'),),
         r"sync|item|wait"),
    Case("accuracy_on_host", "a device-to-host copy added", "per-step accuracy computed on the CPU",
         (('        nvtx.range_push("Backward Pass")',
           '        accuracy = (output.argmax(-1).cpu() == targets.cpu()).float().mean()\n'
           '        nvtx.range_push("Backward Pass")'),),
         r"device-to-host|D2H|sync|copy"),
    Case("fp64_round_trip", "a dtype round trip", "inputs normalised in float64 on the GPU",
         (('        nvtx.range_push("Optimizer Zero Grad")',
           '        source = ((source.double() - source.double().mean()) / source.double().std()).float()\n'
           '        nvtx.range_push("Optimizer Zero Grad")'),),
         r"fp64|double|float64|dtype|precision"),
    Case("slow_transform", "input pipeline: transform cost", "a per-sample augmentation (sorting noise) in the dataset",
         (("        x = (x - x.mean(0)) / (x.std(0) + 1e-5)\n",
           "        x = (x - x.mean(0)) / (x.std(0) + 1e-5)\n"
           "        for _ in range(40):\n            x = x + 0.01 * torch.sort(torch.randn(SEQ, FEATURES, generator=g), dim=0).values\n"),),
         r"data|loader|__next__|between.steps|input"),
    Case("workers_off", "input pipeline: workers", "DataLoader workers 4 -> 0",
         (("num_workers=4,", "num_workers=0,"), ("persistent_workers=True, ", "")),
         r"data|loader|__next__|between.steps|worker"),
    Case("pin_off", "input pipeline: pinning", "pin_memory dropped from the DataLoader",
         (("pin_memory=True, ", ""),),
         r"pageable|pin", regresses=False),   # 4 MB per batch: pinned or not made no difference
    Case("blocking_copy", "a copy that stopped overlapping", "non_blocking dropped from the copies to the GPU",
         (NON_BLOCKING,),
         r"non.?blocking|overlap|synchron|copy|h2d|H2D"),
    Case("compile_lost", "compile lost", "torch.compile removed (the base compiles the model)",
         (("    model = torch.compile(model)\n", ""),),
         r"compile|fus|kernels|launch",
         base_edits=(("    model = Net().to(device)\n", "    model = Net().to(device)\n    model = torch.compile(model)\n"),),
         # compiled, this model was not clearly faster (a launch-bound step): 14 steps a side, the
         # step's median 21.30 -> 20.44 ms, its mean 27.33 -> 24.84, the median of 2-iteration
         # means (the gate's step_time_ms) 19.63 -> 20.64 (+5.2 %), forward and backward GPU time
         # +62 % and +69 %: the corpus does not decide this one (compile_removed, another session,
         # came out 37 % slower)
         regresses=None),
    Case("grad_clip", "kernels added in the optimizer step", "gradient clipping added before the optimizer step",
         (('        nvtx.range_push("Optimizer Step")\n        optimizer.step()',
           '        nvtx.range_push("Optimizer Step")\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        optimizer.step()'),),
         r"optimizer|clip|norm"),
    Case("checkpointing", "recomputation in backward", "activation checkpointing of every block",
         (("        for block in self.blocks:\n            x = block(x)",
           "        for block in self.blocks:\n            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)"),
          ("import torch.nn as nn\n", "import torch.nn as nn\nimport torch.utils.checkpoint\n")),
         r"backward|recompute|checkpoint"),
)

# Issue 29: edits whose mechanism is a known kernel family changing (perfgate/diagnosis/mechanisms.py),
# captured in one session with their own copy of the unedited script (``base2``).
AUTOCAST = ("        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):\n            output = model(source)",
            "        output = model(source)")
SEEDED = "    torch.manual_seed(0)\n"
HAND_ATTENTION = (
    "        h = self.norm1(x)\n"
    "        b, s, _ = h.shape\n"
    "        q, k, v = F.linear(h, self.attn.in_proj_weight, self.attn.in_proj_bias).chunk(3, dim=-1)\n"
    "        q, k, v = (t.view(b, s, HEADS, DIM // HEADS).transpose(1, 2) for t in (q, k, v))\n"
    "        weights = torch.softmax(q @ k.transpose(-2, -1) / (DIM // HEADS) ** 0.5, dim=-1)\n"
    "        x = x + self.attn.out_proj((weights @ v).transpose(1, 2).reshape(b, s, DIM))\n")
TANH_GELU = (
    "@torch.compile\n"
    "def gelu_tanh(x):\n"
    "    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x * x * x)))\n\n\n"
    "class TanhGelu(nn.Module):\n"
    "    def forward(self, x):\n"
    "        return gelu_tanh(x)\n\n\n"
    "class Block(nn.Module):\n")
MANUAL_NORM = (
    "class ManualLayerNorm(nn.Module):\n"
    "    def __init__(self, dim, eps=1e-5):\n"
    "        super().__init__()\n"
    "        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim)), eps\n\n"
    "    def forward(self, x):\n"
    "        mean = x.mean(-1, keepdim=True)\n"
    "        var = ((x - mean) ** 2).mean(-1, keepdim=True)\n"
    "        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias\n\n\n"
    "class Block(nn.Module):\n")
CONV_FRONT = (("        self.embed = nn.Linear(FEATURES, DIM)",
               "        self.embed = nn.Sequential(nn.Conv1d(FEATURES, DIM, 5, padding=2), nn.GELU(),\n"
               "                                   nn.Conv1d(DIM, DIM, 5, padding=2, groups=8), nn.GELU(),\n"
               "                                   nn.Conv1d(DIM, DIM, 3, padding=2, dilation=2))"),
              ("        x = self.embed(x)\n", "        x = self.embed(x.transpose(1, 2)).transpose(1, 2)\n"),
              (SEEDED, SEEDED + "    torch.backends.cudnn.benchmark = True\n"))

MECHANISM_CASES: tuple[Case, ...] = (
    Case("attention_math", "attention path", "attention written by hand (softmax(QK^T)V) instead of the fused kernel",
         (("        h = self.norm1(x)\n        x = x + self.attn(h, h, h, need_weights=False)[0]\n", HAND_ATTENTION),),
         r"attention.*(math|unfused|hand)", shared_base="base2"),
    Case("attention_weights", "attention path", "attention weights returned (need_weights=True) for logging",
         (("need_weights=False", "need_weights=True"),),
         r"attention.*(math|unfused|hand|weights)", shared_base="base2", regresses=False),
    Case("tf32_off", "TF32 off", "TF32 matmuls turned off in an fp32 model",
         (("    torch.backends.cuda.matmul.allow_tf32 = True\n", ""),),
         r"tf32", base_edits=(AUTOCAST, (SEEDED, SEEDED + "    torch.backends.cuda.matmul.allow_tf32 = True\n"))),
    Case("compile_removed", "compile removed", "torch.compile removed from a fused tanh-GELU",
         (("@torch.compile\n", ""),),
         r"compile|triton", base_edits=(("class Block(nn.Module):\n", TANH_GELU), ("nn.GELU()", "TanhGelu()"))),
    Case("cuda_graphs_lost", "CUDA graphs lost", "torch.compile's mode=\"reduce-overhead\" dropped",
         (('torch.compile(model, mode="reduce-overhead")', "torch.compile(model)"),),
         r"cuda graph", base_edits=(("    model = Net().to(device)\n",
                                    '    model = Net().to(device)\n    model = torch.compile(model, mode="reduce-overhead")\n'),)),
    Case("fused_adam_off", "fused optimizer off", "AdamW's fused=True replaced by the foreach default",
         (('fused=device.type == "cuda")', "foreach=True)"),),
         r"optimizer.*(fused|foreach)", shared_base="base2", regresses=False, first=False),
    Case("cudnn_benchmark_off", "cuDNN benchmark off", "torch.backends.cudnn.benchmark removed (a convolutional front end)",
         (("    torch.backends.cudnn.benchmark = True\n", ""),),
         r"cudnn|convolution", base_edits=CONV_FRONT, regresses=False),
    Case("custom_layernorm", "a kernel replaced by a slower custom one", "nn.LayerNorm replaced by a hand-written one",
         (("class Block(nn.Module):\n", MANUAL_NORM), ("self.norm1 = nn.LayerNorm(DIM)", "self.norm1 = ManualLayerNorm(DIM)"),
          ("self.norm2 = nn.LayerNorm(DIM)", "self.norm2 = ManualLayerNorm(DIM)")),
         r"layer.?norm", shared_base="base2"),
)
CASES = CASES + MECHANISM_CASES
# Edits written but not captured yet (scripts/gpu/mechanism-corpus.sh base3 mlp_fp32): their scripts
# are made with the others; the tests read CASES only. mlp_fp32's first capture failed (norm2 took
# bf16 input beside fp32 weights outside autocast); fixed here, not yet run on the GPU machine.
PENDING: tuple[Case, ...] = (
    Case("mlp_fp32", "bf16 -> fp32", "the MLP kept in fp32 (autocast disabled around it)",
         (("        return x + self.mlp(self.norm2(x))",
           "        with torch.autocast(device_type=x.device.type, enabled=False):\n"
           "            return x + self.mlp(self.norm2(x.float()))"),),
         r"(bf16|half).*fp32|precision", shared_base="base3"),
)


def apply(source: str, edits: tuple[Edit, ...], what: str) -> str:
    for old, new in edits:
        if source.count(old) != 1:
            raise ValueError(f"{what}: {old!r} occurs {source.count(old)} times in the script, not once")
        source = source.replace(old, new)
    return source


def sides() -> dict[str, str]:
    """Every capture the corpus needs: side name -> script source."""
    base = SCRIPT.read_text()
    out = {c.shared_base: base for c in (*CASES, *PENDING) if not c.base_edits}
    for case in (*CASES, *PENDING):
        before = apply(base, case.base_edits, f"{case.name} (base)")
        if case.base_edits:
            out[case.base_side] = before
        out[case.head_side] = apply(before, case.head_edits, case.name)
    return out


if __name__ == "__main__":   # write every side's script into a folder: python3 tests/corpus/cases.py DIR
    import sys

    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    for side, text in sides().items():
        (folder / f"{side}.py").write_text(text)
        print(side)

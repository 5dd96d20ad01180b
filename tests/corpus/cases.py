"""The diagnosis corpus: realistic pull-request edits of tests/corpus/train.py, one mechanism each.

A case is the script before (``base_edits`` applied to train.py, usually none: the shared base) and
after (``head_edits`` applied on top), and its truth: the mechanism the change works through and a
regular expression that the diagnosis's first reason must match to name it (searched,
case-insensitive). scripts/gpu/diagnosis-corpus.sh captures every side on the GPU machine into
tests/fixtures/corpus/<side>/; tests/test_diagnosis_corpus.py checks the verdicts and first reasons.
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
    # edit that did not is kept, and the gate must not call it a regression
    regresses: bool = True

    @property
    def base_side(self) -> str:
        """Name of the capture the case's baseline is (shared ``base`` unless it has edits)."""
        return f"{self.name}-base" if self.base_edits else "base"

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
         r"forward|backward|gemm|matrix|more kernels|kernels"),
    Case("wider_mlp", "larger shapes", "MLP hidden size 2048 -> 4096",
         (("FEATURES, DIM, HIDDEN, LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 2048,",
           "FEATURES, DIM, HIDDEN, LAYERS, HEADS, VOCAB, SEQ, BATCH = 64, 512, 4096,"),),
         r"forward|backward|gemm|matrix"),
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
         regresses=False),   # compiled, this model was not faster (a launch-bound step)
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


def apply(source: str, edits: tuple[Edit, ...], what: str) -> str:
    for old, new in edits:
        if source.count(old) != 1:
            raise ValueError(f"{what}: {old!r} occurs {source.count(old)} times in the script, not once")
        source = source.replace(old, new)
    return source


def sides() -> dict[str, str]:
    """Every capture the corpus needs: side name -> script source."""
    base = SCRIPT.read_text()
    out = {"base": base}
    for case in CASES:
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

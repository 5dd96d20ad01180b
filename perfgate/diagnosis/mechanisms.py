"""Mechanisms, not kernel names: a change of kernel family (perfgate.analysis.kernel_families:
attention paths, GEMM and convolution precisions, optimizers, Triton kernels, CUDA graph replays,
...) told as a replacement:

    attention: cuDNN fused attention (12 kernels/step, 1.92 ms) -> unfused math attention (softmax
    +6/step, 0.41 ms): F.scaled_dot_product_attention no longer takes a fused path (...)?

Pure functions on the per-place tables of ``TraceFacts.kernels_by_family``: place -> family ->
kernel name -> [launches, ms] per step."""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from perfgate.analysis.kernel_families import BY_ID, family_of

#: family -> kernel name -> [launches, ms] per step (one place)
Families = Mapping[str, Mapping[str, list[float]]]
MIN_PER_STEP = 0.5                       # launches per step below which a family is absent
CHANGE_SHARE = 0.25                      # a family shrank or grew: by at least this share of its launches
SHOWN = 3


def families_from_names(kernels: Mapping[str, list[float]], place: str | None = None) -> dict[str, dict[str, list[float]]]:
    """Per-family tables of one place from short names alone (facts recorded before the families
    were: a baseline's); kernels of no known family are left out."""
    out: dict[str, dict[str, list[float]]] = {}
    for name, (count, ms) in kernels.items():
        family = family_of(name, place)
        if family is not None:
            out.setdefault(family, {})[name] = [count, ms]
    return out


def merged(tables: list[Families]) -> dict[str, dict[str, list[float]]]:
    """Several places' tables added up (the model's phases, told as one change)."""
    out: dict[str, dict[str, list[float]]] = {}
    for table in tables:
        for family, names in table.items():
            into = out.setdefault(family, {})
            for name, (count, ms) in names.items():
                c, m = into.get(name, [0.0, 0.0])
                into[name] = [c + count, m + ms]
    return out


# ----------------------------------------------------------------------------- replacements


@dataclass(frozen=True)
class Replacement:
    """A change of mechanism: ``kind`` (attention, precision, compile, graphs, optimizer,
    convolution, library), the sentence a reason leads with, the likely edit (``cause``) and the
    kernels that disappeared and appeared (name, launches per step, ms per step)."""

    kind: str
    text: str
    cause: str
    gone: tuple[tuple[str, float, float], ...]
    new: tuple[tuple[str, float, float], ...]
    summary: str = ""                    # the change without the guess: "attention: A -> B"

    def evidence(self) -> str:
        """``gone: a -6/step, b -6/step; new: c +6/step`` (the kernels beside each other)."""
        def names(items: tuple[tuple[str, float, float], ...], sign: str) -> str:
            shown = ", ".join(f"{n} {sign}{abs(c):.0f}/step" for n, c, _ in items[:SHOWN])
            return shown + (f" and {len(items) - SHOWN} more" if len(items) > SHOWN else "")
        parts = ([f"gone: {names(self.gone, '-')}"] if self.gone else []) + (
            [f"new: {names(self.new, '+')}"] if self.new else [])
        return "; ".join(parts)


def _sum(table: Families, ids: tuple[str, ...]) -> tuple[float, float]:
    count = sum(v[0] for f in ids for v in table.get(f, {}).values())
    ms = sum(v[1] for f in ids for v in table.get(f, {}).values())
    return count, ms


def _fell(base: Families, cur: Families, ids: tuple[str, ...]) -> bool:
    (b, _), (c, _) = _sum(base, ids), _sum(cur, ids)
    return b >= MIN_PER_STEP and b - c >= max(MIN_PER_STEP, CHANGE_SHARE * b)


def _rose(base: Families, cur: Families, ids: tuple[str, ...]) -> bool:
    (b, _), (c, _) = _sum(base, ids), _sum(cur, ids)
    return c >= MIN_PER_STEP and c - b >= max(MIN_PER_STEP, CHANGE_SHARE * max(b, MIN_PER_STEP))


def _side(table: Families, ids: tuple[str, ...], label: str | None = None) -> str:
    count, ms = _sum(table, ids)
    words = label or " + ".join(dict.fromkeys(BY_ID[f].words for f in ids if table.get(f))) or BY_ID[ids[0]].words
    unit = "replays" if ids == ("graph",) else "kernels"
    return f"{words} ({count:.0f} {unit}/step, {ms:.2f} ms)"


def _math_attention(base: Families, cur: Families) -> str:
    """The unfused attention's side: its softmax, and the GEMMs and elementwise kernels that came
    with it (their launches, and the ms of all three that the step gained)."""
    softmax, ms = _sum(cur, ("softmax",))
    parts = [f"softmax {softmax:.0f}/step"]
    total = ms - _sum(base, ("softmax",))[1]
    for ids, what in ((("matmul.half", "matmul.tf32", "matmul.fp32"), "GEMMs"), (("elementwise",), "elementwise")):
        (b, bm), (c, cm) = _sum(base, ids), _sum(cur, ids)
        if c - b >= MIN_PER_STEP:
            parts.append(f"{c - b:+.0f} {what}/step")
            total += cm - bm
    return f"unfused math attention ({', '.join(parts)}; {total:+.2f} ms)"


def _kernels(base: Families, cur: Families, ids: tuple[str, ...], sign: int) -> tuple[tuple[str, float, float], ...]:
    """Kernels of ``ids`` whose launches fell (sign -1) or rose (+1), largest change first."""
    names: dict[str, tuple[float, float]] = {}
    for f in ids:
        for name in dict.fromkeys([*base.get(f, {}), *cur.get(f, {})]):   # in order: equal changes keep theirs
            b = base.get(f, {}).get(name, [0.0, 0.0])
            c = cur.get(f, {}).get(name, [0.0, 0.0])
            d = (c[0] - b[0], c[1] - b[1])
            if sign * d[0] >= MIN_PER_STEP:
                old = names.get(name, (0.0, 0.0))
                names[name] = (old[0] + d[0], old[1] + d[1])
    return tuple(sorted(((n, c, m) for n, (c, m) in names.items()), key=lambda x: -abs(x[1])))


def _story(kind: str, base: Families, cur: Families, old: tuple[str, ...], new: tuple[str, ...], role: str,
           guess: str, cause: str, labels: tuple[str | None, str | None] = (None, None)) -> Replacement:
    summary = f"{role}: {_side(base, old, labels[0])} -> {_side(cur, new, labels[1])}"
    return Replacement(kind, f"{summary}: {guess}", cause, _kernels(base, cur, old, -1), _kernels(base, cur, new, +1),
                       summary)


ATTENTION = ("attention.cudnn", "attention.flash", "attention.mem_efficient")
PRECISIONS = {"matmul": ("matmul.half", "matmul.tf32", "matmul.fp32"),
              "convolution": ("conv.half", "conv.tf32", "conv.fp32")}
PRECISION_WORDS = {"half": "bf16/fp16", "tf32": "TF32", "fp32": "fp32"}
EAGER = ("elementwise", "softmax", "norm.layer", "norm.batch", "dropout", "matmul.half", "matmul.tf32",
         "matmul.fp32", "attention.cudnn", "attention.flash", "attention.mem_efficient")
LIBRARY = {"norm.layer": "layer norm", "norm.batch": "batch norm", "softmax": "softmax", "dropout": "dropout"}


def replacements(base: Families, cur: Families) -> list[Replacement]:
    """The changes of mechanism between two tables of the same place (or of the model's phases
    together), the most telling first (a precision change moves attention to another path too:
    the precision leads); empty when the families that run did not change."""
    found = [f(base, cur) for f in (_graphs, _precision, _attention, _compile, _optimizer, _convolution, _library)]
    return [r for r in found if r is not None]


def _graphs(base: Families, cur: Families) -> Replacement | None:
    kernels = tuple(f for f in BY_ID if f not in ("graph", "nccl"))
    if _fell(base, cur, ("graph",)) and _rose(base, cur, kernels):
        return _story("graphs", base, cur, ("graph",), kernels, "CUDA graphs",
                      "the work they replayed is launched kernel by kernel: torch.compile's "
                      "mode=\"reduce-overhead\" or a CUDA graph capture dropped?", "CUDA graphs",
                      (None, "kernels launched one by one"))
    if _rose(base, cur, ("graph",)) and _fell(base, cur, kernels):
        return _story("graphs", base, cur, kernels, ("graph",), "CUDA graphs",
                      "the kernels are now replayed as CUDA graphs", "CUDA graphs", ("kernels launched one by one", None))
    return None


def _attention(base: Families, cur: Families) -> Replacement | None:
    for fused in ATTENTION:
        if _fell(base, cur, (fused,)):
            others = tuple(f for f in ATTENTION if f != fused and _rose(base, cur, (f,)))
            if others:
                return _story("attention", base, cur, (fused,), others, "attention",
                              f"F.scaled_dot_product_attention moved from the {BY_ID[fused].words} path "
                              "(a mask, dtype or head dim that path does not take?)", "attention path")
            if _rose(base, cur, ("softmax",)):
                story = _story("attention", base, cur, (fused,), ("softmax",), "attention",
                               "F.scaled_dot_product_attention no longer takes a fused path (a mask, dtype, head "
                               "dim, need_weights=True, or a hand-written attention?)", "attention path")
                summary = f"attention: {_side(base, (fused,))} -> {_math_attention(base, cur)}"
                return replace(story, text=summary + story.text[len(story.summary):], summary=summary)
    for fused in ATTENTION:
        if _rose(base, cur, (fused,)) and _fell(base, cur, ("softmax",)):
            return _story("attention", base, cur, ("softmax",), (fused,), "attention",
                          f"attention now takes the fused {BY_ID[fused].words} path", "attention path")
    return None


#: names that state fp32 work: the fp32 families also take every GEMM or convolution whose name states
#: no type (``gemmSN_TN_kernel``, ``wgrad_alg0_engine``), which says nothing of its precision
STATES_FP32 = re.compile(r"sgemm|f32f32_f32|fp32|float(?!16)", re.IGNORECASE)


def _states_precision(kernels: tuple[tuple[str, float, float], ...], family: str) -> bool:
    """Whether most launches of ``kernels`` (of ``family``; none: nothing to doubt) state its precision
    in their names."""
    if not family.endswith(".fp32"):
        return True
    total = sum(abs(c) for _, c, _ in kernels)
    return total == 0 or sum(abs(c) for n, c, _ in kernels if STATES_FP32.search(n)) >= 0.5 * total


def _precision(base: Families, cur: Families) -> Replacement | None:
    for role, ids in PRECISIONS.items():
        for i, low in enumerate(ids):
            for high in ids[i + 1:]:
                a, b = low.split(".")[1], high.split(".")[1]
                what = "GEMMs" if role == "matmul" else "convolutions"
                if not (_states_precision(_kernels(base, cur, (high,), +1), high)
                        and _states_precision(_kernels(base, cur, (high,), -1), high)):
                    continue      # fp32 only by default: other kernels of no stated type, no precision change
                if _fell(base, cur, (low,)) and _rose(base, cur, (high,)):
                    guess = ("TF32 turned off (torch.backends.cuda.matmul.allow_tf32 / cudnn.allow_tf32, "
                             "set_float32_matmul_precision(\"highest\"))?" if a == "tf32" else
                             "autocast disabled, or a part of the model run in fp32?")
                    return _story("precision", base, cur, (low,), (high,),
                                  f"{what} went from {PRECISION_WORDS[a]} to {PRECISION_WORDS[b]}", guess,
                                  "TF32" if a == "tf32" else "mixed precision")
                if _fell(base, cur, (high,)) and _rose(base, cur, (low,)):
                    return _story("precision", base, cur, (high,), (low,),
                                  f"{what} went from {PRECISION_WORDS[b]} to {PRECISION_WORDS[a]}",
                                  "lower precision turned on (autocast, bf16 weights or TF32)",
                                  "TF32" if a == "tf32" else "mixed precision")
    return None


def _compile(base: Families, cur: Families) -> Replacement | None:
    eager = tuple(f for f in EAGER if _rose(base, cur, (f,)))
    if _fell(base, cur, ("triton",)) and eager:
        return _story("compile", base, cur, ("triton",), eager, "compiled kernels",
                      "torch.compile removed, or the compiled code falls back to eager (a graph break)?", "compile")
    gone = tuple(f for f in EAGER if _fell(base, cur, (f,)))
    if _rose(base, cur, ("triton",)) and gone:
        return _story("compile", base, cur, gone, ("triton",), "compiled kernels",
                      "torch.compile now fuses this code into Triton kernels", "compile")
    return None


def _optimizer(base: Families, cur: Families) -> Replacement | None:
    kinds = ("optimizer.fused", "optimizer.foreach", "optimizer.per_parameter")
    for i, old in enumerate(kinds):
        for new in kinds[i + 1:]:
            if _fell(base, cur, (old,)) and _rose(base, cur, (new,)):
                guess = ("fused=True dropped (foreach, the default, launches a kernel per operation and "
                         "tensor group)?" if new == "optimizer.foreach" else
                         "foreach=False, or an optimizer without a fused/foreach implementation?")
                return _story("optimizer", base, cur, (old,), (new,), "optimizer", guess,
                              "optimizer implementation")
            if _fell(base, cur, (new,)) and _rose(base, cur, (old,)):
                return _story("optimizer", base, cur, (new,), (old,), "optimizer",
                              f"the optimizer now runs {BY_ID[old].words}", "optimizer implementation")
    return None


def _convolution(base: Families, cur: Families) -> Replacement | None:
    ids = ("conv.half", "conv.tf32", "conv.fp32")
    gone, new = _kernels(base, cur, ids, -1), _kernels(base, cur, ids, +1)
    before = sum(v[0] for f in ids for v in base.get(f, {}).values())
    if before < MIN_PER_STEP or not (gone and new) or sum(c for _, c, _ in new) < CHANGE_SHARE * before:
        return None
    changed = sum(c for _, c, _ in new)
    (_, before_ms), (after, after_ms) = _sum(base, ids), _sum(cur, ids)
    summary = (f"convolutions: cuDNN ran other kernels for {changed:.0f} of {after:.0f} convolution kernels/step "
               f"({before_ms:.2f} -> {after_ms:.2f} ms)")
    return Replacement("convolution", f"{summary}: torch.backends.cudnn.benchmark turned off or on, or other "
                       "input shapes or memory layout?", "cuDNN algorithm", gone, new, summary)


def _library(base: Families, cur: Families) -> Replacement | None:
    for family, what in LIBRARY.items():
        if _fell(base, cur, (family,)) and _rose(base, cur, ("elementwise",)):
            return _story("library", base, cur, (family,), ("elementwise",), what,
                          f"PyTorch's {what} kernels replaced by generic ones: a hand-written {what}?",
                          "custom kernel")
    return None

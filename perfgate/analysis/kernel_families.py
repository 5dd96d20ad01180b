"""Kernel families, not kernel names: what PyTorch training launches (attention paths, GEMM and
convolution precisions, cuDNN's convolution kernels, NCCL, fused / foreach / per-parameter
optimizers, Triton kernels, CUDA graph replays, normalization, dropout, the loss, eager elementwise
kernels), matched by name, and the kernels of a trace's measured window by place and family
(``TraceFacts.kernels_by_family``: place -> family -> kernel name -> [launches, ms] per step).
perfgate.diagnosis.mechanisms tells a change of family as a replacement.

Names are matched on a kernel's demangled name where the trace has one (``cutlass::Kernel2<cutlass_80_
simt_sgemm_...>`` says fp32; its short name ``Kernel2`` says nothing), else on its short name. The
patterns were checked on the committed captures of nsys 2025.3.1 (tests/fixtures/corpus,
tests/fixtures/traces) and nsys 2026.2.1 (../shared/fixtures): tests/diagnosis/test_diagnosis_mechanisms.py.
cuBLASLt's Hopper ``nvjet_*`` kernels name no type; they ran only on bf16/fp16 inputs in those
captures (fp32 and TF32 GEMMs ran ``*_f32f32_*`` / ``*tf32*`` kernels), so they count as bf16/fp16.

A short name (``multi_tensor_apply_kernel``, ``softmax_warp_forward``, ``Kernel2``) can stand for
kernels of several families (a fused Adam or a foreach add; a softmax or the loss's log-softmax;
any CUTLASS template): the demangled names of those short names are read kernel by kernel (joined
on process, correlation id and start); every other short name has one family, read once."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from perfgate.analysis import intervals

if TYPE_CHECKING:
    from perfgate.trace.export import Trace

GRAPH_NAME = "(CUDA graph replay)"       # a CUDA graph launched as one GPU op (nsys's graph mode)


@dataclass(frozen=True)
class Family:
    """Kernels that do one thing one way: ``role`` (what they do: attention, matmul, ...),
    ``words`` (how a reason names them), ``pattern`` (searched in the kernel's name)."""

    id: str
    role: str
    words: str
    pattern: re.Pattern[str]


def _f(id: str, role: str, words: str, pattern: str) -> Family:
    return Family(id, role, words, re.compile(pattern, re.IGNORECASE))


HALF = r"bf16|f16|fp16|half|bfloat16|float16|h884|h1688|h16816|hmma|e4m3|e5m2|fp8|nvjet"
CONV = r"conv|fprop|dgrad|wgrad|winograd|implicit_gemm|nchwToNhwc|nhwcToNchw|__5x_cudnn|cudnn::engines"
GEMM = r"gemm|nvjet|gemv|cublas|splitKreduce"
#: Every family, in the order they are tried (the first whose pattern matches names the kernel).
#: A pattern that needs two words anywhere in the name looks ahead from its start only (``\A``):
#: unanchored, ``re.search`` ran both look-aheads from every position of a name, O(n^2) in its
#: length; a 5,805-character cuDNN template name took 0.13 s, a ResNet capture's 61 kernels 9 s.
FAMILIES: tuple[Family, ...] = (
    _f("graph", "graphs", "CUDA graph replays", re.escape(GRAPH_NAME)),
    _f("nccl", "communication", "NCCL collectives", r"nccl"),
    _f("triton", "compiled", "Triton kernels (torch.compile)", r"triton"),
    _f("attention.cudnn", "attention", "cuDNN fused attention (SDPA)",
       r"fort_native_sdpa|_sdpa_|cudnn::fusion::(compute_dot_do_o|convert_dq)"),
    _f("attention.flash", "attention", "flash attention (SDPA)", r"pytorch_flash|flash_fwd|flash_bwd|flash_attn"),
    _f("attention.mem_efficient", "attention", "memory-efficient attention (SDPA)",
       r"fmha_cutlass|MemEffAttention|efficient_attention"),
    _f("recurrent", "recurrent", "cuDNN recurrent-layer kernels (LSTM, GRU, RNN)",
       r"RNNcell|RNN_blockPersist|LSTM_elementWise|GRU_elementWise|RNN_elementWise|GENERIC_elementWise_bp"),
    _f("loss", "loss", "the loss (log-softmax, NLL)",
       r"nll_loss|LogSoftMax|cross_entropy|softmax_warp_\w+<[^,]+, [^,]+, [^,]+, \(int\)\d+, \(bool\)1"),
    _f("softmax", "softmax", "softmax", r"softmax"),
    _f("conv.layout", "convolution", "cuDNN layout transforms", r"nchwToNhwc|nhwcToNchw"),
    _f("conv.helper", "convolution", "cuDNN helper kernels", r"ReduceSplitK|init_device_workspace|cask_plugin"),
    _f("conv.half", "convolution", "bf16/fp16 convolutions", rf"\A(?=.*?({CONV}))(?=.*?({HALF}))"),
    _f("conv.tf32", "convolution", "TF32 convolutions", rf"\A(?=.*?({CONV}))(?=.*?tf32)"),
    _f("conv.fp32", "convolution", "fp32 convolutions", CONV),
    _f("matmul.half", "matmul", "bf16/fp16 GEMMs (tensor cores)", rf"\A(?=.*?({GEMM}))(?=.*?({HALF}))"),
    _f("matmul.tf32", "matmul", "TF32 GEMMs", rf"\A(?=.*?({GEMM}))(?=.*?(tf32|s1688gemm|s16816gemm))"),
    _f("matmul.splitk", "matmul", "cuBLAS split-K reductions", r"splitKreduce"),
    _f("matmul.fp32", "matmul", "fp32 GEMMs (no tensor cores)", rf"{GEMM}|sgemm"),
    _f("optimizer.fused", "optimizer", "fused optimizer kernels",
       r"Fused\w*(Adam|Sgd|Adagrad)|FusedOptimizerTensorListMetadata|fused_(adam|sgd)"),
    _f("optimizer.foreach", "optimizer", "foreach (multi-tensor) kernels", r"multi_tensor_apply"),
    _f("norm.layer", "normalization", "fused layer-norm kernels", r"layer_norm|LayerNorm|GammaBeta|rms_?norm"),
    _f("norm.batch", "normalization", "batch-norm kernels", r"batch_norm|BatchNorm|bn_fw|bn_bw"),
    _f("dropout", "dropout", "dropout kernels", r"dropout"),
    _f("elementwise", "elementwise", "eager elementwise/reduce kernels",
       r"elementwise|vectorized|unrolled|reduce_kernel|CatArray|Fill|copy|pointwise|index|gather|scatter"),
)
BY_ID: dict[str, Family] = {f.id: f for f in FAMILIES}
OPTIMIZER_PLACE = re.compile(r"optim", re.IGNORECASE)
PER_PARAMETER = Family("optimizer.per_parameter", "optimizer", "a per-parameter loop (one elementwise kernel per "
                       "tensor)", re.compile("$^"))
BY_ID[PER_PARAMETER.id] = PER_PARAMETER
GENERIC_SHORT = frozenset({"Kernel", "Kernel2", "kernel"})
_TEMPLATE_NAME = re.compile(r"Kernel2?<(?:\w+::)*(\w*(?:gemm|Gemm|Conv|dgrad|wgrad|fprop|Reduce)\w*)")
_SHAPE = re.compile(r"GemmShape<\(int\)(\d+), \(int\)(\d+), \(int\)(\d+)>")


def family_of(name: str, place: str | None = None) -> str | None:
    """The family id of a kernel called ``name`` (demangled where known) launched in ``place``;
    None for a kernel of no known family. Eager elementwise kernels launched in an optimizer phase
    are a per-parameter optimizer loop."""
    for family in FAMILIES:
        if family.pattern.search(name):
            if family.id == "elementwise" and place is not None and OPTIMIZER_PLACE.search(place):
                return PER_PARAMETER.id
            return family.id
    return None


def display_name(short: str, demangled: str | None) -> str:
    """The name a reason shows: the short name, or for a generic one (``Kernel2``) the template it
    instantiates (``cutlass_80_simt_sgemm_256x128_8x4_nt_align1``, ``ImplicitGemmConvolution
    128x64x32``)."""
    if short not in GENERIC_SHORT or not demangled:
        return short
    m = _TEMPLATE_NAME.search(demangled)
    if m is None:
        return short
    shape = _SHAPE.search(demangled)
    return m.group(1) + (f" {'x'.join(shape.groups())}" if shape else "")


KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
Label = tuple[str | None, str]            # (family without its place, name shown)
#: A launch's size: its threads, grid x block (nsys's columns of the kernel table).
SIZE_COLUMNS = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")


class KernelLabels(NamedTuple):
    """Per kernel a code into ``labels`` (family, name shown), and each label's mean threads per
    launch (grid x block) over the window's kernels of that label (none where the export has no
    launch sizes)."""

    codes: np.ndarray
    labels: list[Label]
    threads: dict[Label, float]


def _labels_of_short_names(trace: Trace, lo: int, hi: int) -> tuple[dict[int, list[tuple[int, Label]]],
                                                                        dict[Label, float]]:
    """Short name id -> [(demangled id, label)] of the kernels starting in [lo, hi], and the mean
    threads per launch of each label (from the same query)."""
    from perfgate.trace import database

    sized = set(SIZE_COLUMNS) <= set(trace._columns(KERNEL_TABLE))
    threads = ("sum(" + " * ".join(f"CAST(coalesce({c}, 0) AS DOUBLE)" for c in SIZE_COLUMNS) + ")"
               if sized else "0.0")
    rows = database.fetch(trace._con, (
        f"SELECT shortName AS s, coalesce(demangledName, -1) AS d, count(*) AS n, {threads} AS t "
        f"FROM {database.CATALOG}.{KERNEL_TABLE} "
        f"WHERE start >= {int(lo)} AND start <= {int(hi)} GROUP BY shortName, demangledName "
        f"ORDER BY shortName, demangledName"))   # one order whatever the reader: a float sum is summed in it
    out: dict[int, list[tuple[int, Label]]] = {}
    sizes: dict[Label, list[float]] = {}
    for s, d, n, t in zip(rows["s"].tolist(), rows["d"].tolist(), rows["n"].tolist(), rows["t"].tolist()):
        short = trace.string(int(s))
        demangled = trace.string(int(d)) if int(d) >= 0 else None
        label = (family_of(demangled or short), display_name(short, demangled))
        out.setdefault(int(s), []).append((int(d), label))
        total = sizes.setdefault(label, [0.0, 0.0])
        total[0] += float(n)
        total[1] += float(t)
    return out, ({label: t / n for label, (n, t) in sizes.items() if n > 0 and t > 0} if sized else {})


def kernel_labels(trace: Trace, pid: np.ndarray, correlation: np.ndarray, start: np.ndarray,
                  short: np.ndarray) -> KernelLabels:
    """Per kernel a code into the labels (family, name shown); from the short names alone where
    the export has no demangled names."""
    labels: list[Label] = []
    index: dict[Label, int] = {}
    codes = np.full(short.size, -1, dtype=np.int64)
    demangled = (trace._con is not None and KERNEL_TABLE in trace.tables
                 and {"demangledName", "shortName"} <= set(trace._columns(KERNEL_TABLE)) and start.size > 0)
    lo, hi = (int(start.min()), int(start.max())) if start.size else (0, 0)
    by_short, threads = _labels_of_short_names(trace, lo, hi) if demangled else ({}, {})

    def code(label: Label) -> int:
        if label not in index:
            index[label] = len(labels)
            labels.append(label)
        return index[label]

    one = {s: code(v[0][1]) for s, v in by_short.items() if len({label for _, label in v}) == 1}
    if one and short.size:                 # a lookup table by short-name id: one pass over the kernels
        lut = np.full(max(int(short.max()), max(one)) + 2, -1, dtype=np.int64)
        lut[np.fromiter(one, dtype=np.int64) + 1] = np.fromiter(one.values(), dtype=np.int64)
        codes = lut[np.clip(short.astype(np.int64) + 1, 0, lut.size - 1)]
    ambiguous = [s for s in by_short if s not in one]
    if ambiguous:
        from perfgate.trace import database

        rows = database.fetch(trace._con, (
            f"SELECT globalPid AS g, correlationId AS c, start AS t, coalesce(demangledName, -1) AS d FROM "
            f"{database.CATALOG}.{KERNEL_TABLE} WHERE start >= {lo} AND start <= {hi} AND shortName IN "
            f"({', '.join(str(s) for s in ambiguous)})"))
        label_of = {d: label for s in ambiguous for d, label in by_short[s]}
        names, first = np.unique(rows["d"].astype(np.int64), return_index=True)
        code_of = {int(d): code(label_of[int(d)]) for d in names[np.argsort(first)]}   # labels in row order
        name_codes = np.fromiter((code_of[int(d)] for d in names), dtype=np.int64, count=names.size)
        kept = np.flatnonzero(np.isin(short, ambiguous))
        codes[kept] = _matched(kept, pid, correlation, start, rows, name_codes[np.searchsorted(names, rows["d"])])
    for i in np.flatnonzero(codes < 0).tolist():   # not matched: its short name alone
        name = trace.string(int(short[i]))
        codes[i] = code((family_of(name), name))
    return KernelLabels(codes, labels, threads)


def _matched(kept: np.ndarray, pid: np.ndarray, correlation: np.ndarray, start: np.ndarray,
             rows: dict[str, np.ndarray], row_codes: np.ndarray) -> np.ndarray:
    """The label code of each kernel ``kept`` from the kernel table's ``rows`` (globalPid ``g``,
    correlation id ``c``, start ``t``) of the same process, correlation id and start (the last
    such row), -1 where none is: the rows sorted by (process and correlation id, start), each kernel
    found by binary search."""
    row_pc, kept_pc = _process_calls((rows["g"].astype(np.int64) >> 24) & 0xFFFFFF, rows["c"].astype(np.int64),
                                     pid[kept].astype(np.int64), correlation[kept].astype(np.int64))
    row_t, kept_t = rows["t"].astype(np.int64), start[kept].astype(np.int64)
    order = np.lexsort((row_t, row_pc))               # stable: a key's rows stay in row order
    pc, t, codes = row_pc[order], row_t[order], row_codes[order]
    last = np.r_[(pc[1:] != pc[:-1]) | (t[1:] != t[:-1]), True]        # the last row of each key
    pc, t, codes = pc[last], t[last], codes[last]
    lo, hi = np.searchsorted(pc, kept_pc, "left"), np.searchsorted(pc, kept_pc, "right")
    out = np.full(kept.size, -1, dtype=np.int64)
    one = np.flatnonzero(hi - lo == 1)                # a call's one kernel: its start must agree
    same = t[lo[one]] == kept_t[one]
    out[one[same]] = codes[lo[one][same]]
    for i in np.flatnonzero(hi - lo > 1).tolist():    # a correlation id repeated: the start tells
        j = int(lo[i]) + int(np.searchsorted(t[lo[i]:hi[i]], kept_t[i]))
        if j < hi[i] and t[j] == kept_t[i]:
            out[i] = codes[j]
    return out


def _process_calls(row_pid: np.ndarray, row_corr: np.ndarray, pid: np.ndarray,
                   corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per (process, correlation id) of the rows and of the kernels, equal where both
    are: 24 process bits above the correlation id's offset from the smallest (a rank where their
    span needs more than 39 bits)."""
    both = np.concatenate([row_corr, corr])
    low = int(both.min()) if both.size else 0
    if both.size and int(both.max()) - low >= 1 << 39:
        _, rank = np.unique(both, return_inverse=True)
        offset = rank.astype(np.int64)
    else:
        offset = both - low
    keys = np.concatenate([row_pid, pid]) << 39 | offset
    return keys[:row_pid.size], keys[row_pid.size:]


def by_family(place: np.ndarray, places: list[str], label: np.ndarray, labels: list[Label], dur_ns: np.ndarray,
              n: int, graph_place: np.ndarray | None = None,
              graph_ns: np.ndarray | None = None) -> dict[str, dict[str, dict[str, list[float]]]]:
    """Place -> family -> name -> [launches, ms] per step, of the kernels with place codes
    ``place`` (into ``places``; -1 outside the measured iterations) and label codes ``label``;
    CUDA graph launches (``graph_place``, ``graph_ns``) as the family ``graph``. Kernels of no
    known family are left out."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    keep = place >= 0
    if keep.any():
        key = place[keep].astype(np.int64) * max(len(labels), 1) + label[keep]
        keys, counts, totals = intervals.group_sums(key, dur_ns[keep])
        for k, c, t in zip(keys.tolist(), counts.tolist(), totals.tolist()):
            where, code = divmod(k, max(len(labels), 1))
            family, name = labels[code]
            if family is None:
                continue
            if family == "elementwise" and family_of("elementwise", places[where]) == PER_PARAMETER.id:
                family = PER_PARAMETER.id
            out.setdefault(places[where], {}).setdefault(family, {})[name] = [c / n, t / 1e6 / n]
    if graph_place is not None and graph_ns is not None and (graph_place >= 0).any():
        keep = graph_place >= 0
        keys, counts, totals = intervals.group_sums(graph_place[keep].astype(np.int64), graph_ns[keep])
        for where, c, t in zip(keys.tolist(), counts.tolist(), totals.tolist()):
            out.setdefault(places[where], {})["graph"] = {GRAPH_NAME: [c / n, t / 1e6 / n]}
    return out


def threads_by_family(table: dict[str, dict[str, dict[str, list[float]]]],
                      per_launch: dict[Label, float]) -> dict[str, dict[str, float]]:
    """Place -> family -> threads launched per step (grid x block, summed over the launches) of
    ``table`` (by_family's: place -> family -> name -> [launches, ms] per step), from each label's
    mean threads per launch ``per_launch`` (a per-parameter loop's kernels are eager elementwise
    ones); a family with a name of unknown size is left out."""
    out: dict[str, dict[str, float]] = {}
    for place, families in table.items():
        for family, names in families.items():
            labelled = "elementwise" if family == PER_PARAMETER.id else family
            sizes = [per_launch.get((labelled, name)) for name in names]
            if names and all(size is not None for size in sizes):
                out.setdefault(place, {})[family] = sum(v[0] * (size or 0.0) for v, size in zip(names.values(), sizes))
    return out

"""What each diagnosis rule checks. Each check is a small pure function
``check(analysis, facts) -> Finding | None`` with named thresholds (module constants, documented in
docs/diagnosis.md) and a suggestion. Checks read the Analysis; ``facts`` (TraceFacts from the raw
events) sharpen or enable the few that need them. perfgate.diagnosis.rules lists them as records.

The first five mirror ``nsys analyze`` (cuda_memcpy_async, cuda_memcpy_sync, cuda_api_sync,
gpu_gaps, gpu_time_util); the rest are PyTorch training-loop rules."""
from __future__ import annotations

from perfgate.analysis.kernel_classes import kernel_class_counts, kernel_class_ms
from perfgate.diagnosis.evidence import (
    COMPUTE_PHASES, batches_from, data_phase, gap_idle_by_phase_ms, gpu_active, idle_ms_per_step, innermost_phase,
    made_by, phase_ms, phase_share, step_mean_ms, workers_words,
)
from perfgate.records.diagnosis import Finding
from perfgate.records.facts import H2D_PHASE, TraceFacts
from perfgate.records.model import Analysis

# --- thresholds (a rule fires when its value is >= a *_MIN or <= a *_MAX) ---------------------
PAGEABLE_COPIES_PER_STEP_MIN = 0.5      # pageable memcpys per step
SYNC_MEMCPY_PER_STEP_MIN = 1.0          # synchronous cudaMemcpy calls per step
SYNC_CALLS_PER_STEP_MIN = 1.0           # cudaStreamSynchronize/cudaDeviceSynchronize per step
SYNC_SHARE_WARN = 0.05                  # time blocked in sync calls / step: info below, warning above
GPU_GAP_MIN_MS = 1.0                    # a GPU gap this long ...
GPU_GAP_STEP_FRACTION = 0.10            # ... and at least this share of the median step
LOW_UTILIZATION_IDLE_MIN = 0.50         # GPU idle fraction (nsys gpu_time_util: 50 %)
DATA_LOAD_SHARE_MIN = 0.10              # data_load CPU time / step
DATA_LOAD_IDLE_SHARE_MIN = 0.10         # GPU idle while data_load open / step
DATA_LOAD_CPU_ONLY_SHARE_MIN = 0.30     # data_load share that fires the rule on a CPU-only run
BLOCKING_COPY_SYNCS_PER_STEP_MIN = 1.0  # sync calls inside the h2d phase per step (with a trace)
BLOCKING_COPY_SYNCS_NO_TRACE_MIN = 2.0  # sync calls per step with H2D traffic (Analysis only)
COPY_SHARE_MIN = 0.02                   # H2D copy time / step worth overlapping
COPY_SHARE_NO_TRACE_MIN = 0.05          # same, when only the Analysis is known
COPY_OVERLAP_MAX = 0.20                 # share of H2D copy time overlapping kernels
COPY_IDLE_MIN = 0.20                    # GPU idle fraction that makes unoverlapped copies matter
FP32_MATMUL_SHARE_MIN = 0.20            # fp32/TF32 GEMM+conv time / kernel time
HALF_MATMUL_SHARE_MAX = 0.05            # half/bf16/fp8 GEMM+conv time / kernel time
ELEMENTWISE_KERNELS_PER_STEP_MIN = 10.0  # non-Triton elementwise launches per step, no Triton at all
LAUNCH_KERNELS_PER_STEP_MIN = 100.0     # kernels per step
SMALL_KERNEL_US = 20.0                  # mean kernel duration (µs)
LAUNCH_IDLE_MIN = 0.30                  # GPU idle fraction
FIRST_STEP_OUTLIER_RATIO = 2.0          # first measured step / median step
TWO_LEVEL_RATIO = 2.0                   # jump between the two levels of sorted step times
TWO_LEVEL_MIN_FRACTION = 0.20           # each level holds at least this share of the steps
TWO_LEVEL_MIN_STEPS = 10                # fewer measured steps: no two-level judgement
WARMUP_MIN_STEPS = 5                    # fewer measured steps: no outlier judgement
KERNEL_SET_CHANGES_MIN = 2              # measured steps launching an unusual kernel set (trace)

SUGGEST_WORKERS = ("overlap loading with compute: DataLoader(num_workers>0, persistent_workers=True, "
                   "prefetch_factor=2..4); move decoding/augmentation into the workers")
SUGGEST_PIN = ("pin host memory: DataLoader(pin_memory=True) or tensor.pin_memory(), then "
               ".to(device, non_blocking=True) (nsys analyze: cuda_memcpy_async)")
SUGGEST_NON_BLOCKING = ("copy with .to(device, non_blocking=True) from pinned memory; each blocking "
                        "copy makes the host wait for the GPU to drain")
SUGGEST_SYNC_MEMCPY = ("use cudaMemcpyAsync / .to(device, non_blocking=True) from pinned memory "
                       "(nsys analyze: cuda_memcpy_sync)")
SUGGEST_SYNC = ("remove host-device syncs from the step: .item(), .cpu(), print(tensor), "
                "torch.cuda.synchronize(); log every N steps; prefer events (nsys analyze: cuda_api_sync)")
SUGGEST_STREAM = ("copy the next batch on a side stream: with torch.cuda.stream(copy_stream): "
                  "x = x.to(dev, non_blocking=True); then torch.cuda.current_stream().wait_stream(copy_stream) "
                  "(pinned memory required)")
SUGGEST_AUTOCAST = ("use mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16) (or float16 "
                    "with GradScaler) so GEMMs/convolutions run on tensor cores")
SUGGEST_COMPILE = "fuse small kernels with model = torch.compile(model)"
SUGGEST_LAUNCH = ("cut launch overhead: torch.compile(model, mode='reduce-overhead') (CUDA graphs), "
                  "larger batches, fused optimizers (foreach/fused=True)")
SUGGEST_WARMUP = ("keep autotuning out of the measured window: more warm-up steps "
                  "(cudnn.benchmark, torch.compile recompiles), static shapes (drop_last=True)")
SUGGEST_WARMUP_STEPS = "keep the first, slower steps out of the measured window: more warm-up steps (skip_steps)"
SUGGEST_GAPS = "look at what the CPU does in the gap (the NVTX ranges listed) and move it off the step"
SUGGEST_UTILIZATION = "the GPU waits more than it works: see the bottleneck and the other findings"


def _per_step(total: float, analysis: Analysis) -> float:
    return total / analysis.steps.count if analysis.steps.count > 0 else 0.0


def _idle_in(analysis: Analysis, facts: TraceFacts | None, phase: str) -> float | None:
    """GPU idle ms per step while ``phase`` was the innermost phase open on the CPU."""
    if facts is not None and facts.idle_ms_per_step is not None:
        return float(facts.idle_by_phase_ms.get(phase, 0.0))
    if analysis.gpu_idle is not None and analysis.gpu_idle.longest_gaps:
        return gap_idle_by_phase_ms(analysis).get(phase, 0.0)
    return None


# ----------------------------------------------------------------------------- nsys analyze twins


def pageable_copies(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """Host-to-device memcpys from pageable memory (nsys: cuda_memcpy_async), as the analysis counts
    them (``GpuWork.pageable_copies``): one count, whether the trace or a baseline's record is read."""
    if analysis.gpu is None:
        return None
    per_step = _per_step(analysis.gpu.pageable_copies, analysis)
    if per_step < PAGEABLE_COPIES_PER_STEP_MIN:
        return None
    return Finding(
        rule="pageable_copies", severity="warning",
        message="host-device copies use pageable memory: each is staged and blocks the host",
        evidence=(f"{per_step:.1f} pageable memcpys per step "
                  f"(threshold {PAGEABLE_COPIES_PER_STEP_MIN})",
                  f"H2D copy time {analysis.gpu.h2d_ms_per_step:.2f} ms/step"),
        suggestion=SUGGEST_PIN, cause="pinned memory", phases=(H2D_PHASE,),
        impact_ms=analysis.gpu.h2d_ms_per_step)


def synchronous_copies(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """cudaMemcpy (no Async) calls in the step (nsys: cuda_memcpy_sync). Needs the trace."""
    if facts is None or facts.sync_memcpy_per_step < SYNC_MEMCPY_PER_STEP_MIN:
        return None
    return Finding(
        rule="synchronous_copies", severity="warning",
        message="synchronous cudaMemcpy calls block the host until the copy is done",
        evidence=(f"{facts.sync_memcpy_per_step:.1f} synchronous cudaMemcpy per step "
                  f"(threshold {SYNC_MEMCPY_PER_STEP_MIN})",),
        suggestion=SUGGEST_SYNC_MEMCPY, cause="non-blocking copy", phases=(H2D_PHASE,))


def synchronizing_api_calls(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """cudaStreamSynchronize/cudaDeviceSynchronize inside the step (nsys: cuda_api_sync)."""
    if analysis.gpu is None:
        return None
    calls = analysis.gpu.sync_calls_per_step
    if calls < SYNC_CALLS_PER_STEP_MIN:
        return None
    evidence = [f"{calls:.1f} sync calls per step (threshold {SYNC_CALLS_PER_STEP_MIN})"]
    severity, impact = "info", None
    step = step_mean_ms(analysis)
    if facts is not None and step > 0:
        share = facts.sync_ms_per_step / step
        impact = facts.sync_ms_per_step
        evidence.append(f"host blocked {facts.sync_ms_per_step:.2f} ms/step ({share:.0%} of the step) "
                        "in sync calls")
        severity = "warning" if share >= SYNC_SHARE_WARN else "info"
    return Finding(
        rule="synchronizing_api_calls", severity=severity,
        message="the host waits for the GPU inside the step",
        evidence=tuple(evidence), suggestion=SUGGEST_SYNC, impact_ms=impact)


def long_gpu_gaps(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """GPU gaps longer than a share of the step (nsys: gpu_gaps), with the CPU ranges open."""
    idle = analysis.gpu_idle
    if idle is None or not idle.longest_gaps or not gpu_active(analysis):
        return None
    limit = max(GPU_GAP_MIN_MS, GPU_GAP_STEP_FRACTION * analysis.steps.summary_ms.median)
    long = sorted((g for g in idle.longest_gaps if g.duration_ms >= limit),
                  key=lambda g: -g.duration_ms)
    if not long:
        return None
    phases = tuple(dict.fromkeys(innermost_phase(tuple(g.cpu_ranges), analysis.phases) for g in long))
    evidence = tuple(f"{g.duration_ms:.2f} ms idle on {g.device} while the CPU was in "
                     f"{' > '.join(g.cpu_ranges) or 'no NVTX range'}" for g in long[:3])
    return Finding(
        rule="long_gpu_gaps", severity="warning",
        message=f"{len(long)} GPU gap(s) of at least {limit:.2f} ms, mostly while the CPU was in "
                f"{phases[0]}",
        evidence=evidence + (f"threshold max({GPU_GAP_MIN_MS} ms, {GPU_GAP_STEP_FRACTION:.0%} of "
                             "the median step)",),
        suggestion=SUGGEST_GAPS, phases=tuple(p for p in phases if p in analysis.phases),
        impact_ms=_per_step(sum(g.duration_ms for g in long), analysis))


def low_gpu_utilization(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """GPU idle for at least half of the measured window (nsys: gpu_time_util)."""
    if analysis.gpu_idle is None or not gpu_active(analysis):
        return None
    frac = analysis.gpu_idle.fraction
    if frac < LOW_UTILIZATION_IDLE_MIN:
        return None
    return Finding(
        rule="low_gpu_utilization", severity="warning",
        message=f"the GPU is idle {frac:.0%} of the measured window",
        evidence=(f"GPU idle fraction {frac:.3f} (threshold {LOW_UTILIZATION_IDLE_MIN})",),
        suggestion=SUGGEST_UTILIZATION, impact_ms=idle_ms_per_step(analysis))


# ----------------------------------------------------------------------------- PyTorch rules


def dataloader_blocking(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """data_load takes a large share of the step while the GPU idles: loading does not overlap."""
    phase = data_phase(analysis)
    share = phase_share(analysis, phase)
    step = step_mean_ms(analysis)
    load_ms = phase_ms(analysis, phase)
    if not gpu_active(analysis):
        if share < DATA_LOAD_CPU_ONLY_SHARE_MIN:
            return None
        workers = facts.dataloader_workers if facts is not None else None
        return Finding(
            rule="dataloader_blocking", severity="warning",
            message=f"data loading takes {'most' if share > 0.5 else f'{share:.0%}'} of the step: {batches_from(facts)}",
            evidence=(f"{phase} {load_ms:.2f} ms/step = {share:.0%} of the step "
                      f"(threshold {DATA_LOAD_CPU_ONLY_SHARE_MIN:.0%} on a CPU-only run)",),
            suggestion=SUGGEST_WORKERS if not workers else
            f"{workers_words(workers)} {'does' if workers == 1 else 'do'} not keep up: more "
            "workers, or a cheaper dataset or transform (decode once, cache, move work to the GPU)",
            cause="workers", phases=(phase,), impact_ms=load_ms)
    if share < DATA_LOAD_SHARE_MIN:
        return None
    idle = _idle_in(analysis, facts, phase)
    if idle is None:   # no gap data: where the GPU idled is unknown
        return None
    idle_share = idle / step if step > 0 else 0.0
    if idle_share < DATA_LOAD_IDLE_SHARE_MIN:
        return None
    return Finding(
        rule="dataloader_blocking", severity="critical" if idle_share >= 0.3 else "warning",
        message="the GPU waits for data: " + (f"the batches {function} makes do not overlap compute"
                                              if (function := made_by(facts)) else
                                              "DataLoader loading does not overlap compute"),
        evidence=(f"{phase} {load_ms:.2f} ms/step = {share:.0%} of the step "
                  f"(threshold {DATA_LOAD_SHARE_MIN:.0%})",
                  f"GPU idle {idle:.2f} ms/step while {phase} open = {idle_share:.0%} of the step "
                  f"(threshold {DATA_LOAD_IDLE_SHARE_MIN:.0%})"),
        suggestion=SUGGEST_WORKERS, cause="workers", phases=(phase,), impact_ms=idle)


def blocking_copy(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """Host-to-device copies made with non_blocking=False: a sync per copy."""
    if analysis.gpu is None or not gpu_active(analysis):
        return None
    if facts is not None:
        syncs = facts.h2d_syncs_per_step
        if syncs < BLOCKING_COPY_SYNCS_PER_STEP_MIN:
            return None
        evidence = (f"{syncs:.1f} sync calls per step inside the h2d phase "
                    f"(threshold {BLOCKING_COPY_SYNCS_PER_STEP_MIN})",)
    else:
        syncs = analysis.gpu.sync_calls_per_step
        if syncs < BLOCKING_COPY_SYNCS_NO_TRACE_MIN or analysis.gpu.h2d_bytes_per_step <= 0:
            return None
        evidence = (f"{syncs:.1f} sync calls per step with "
                    f"{analysis.gpu.h2d_bytes_per_step / 1e6:.2f} MB/step copied to the GPU "
                    f"(threshold {BLOCKING_COPY_SYNCS_NO_TRACE_MIN})",)
    return Finding(
        rule="blocking_copy", severity="warning",
        message="host-to-device copies block: the host waits for the GPU at every copy",
        evidence=evidence, suggestion=SUGGEST_NON_BLOCKING, cause="non-blocking copy",
        phases=(H2D_PHASE,), impact_ms=phase_ms(analysis, H2D_PHASE))


def copy_not_overlapped(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """H2D copies on the compute stream while the GPU otherwise idles: a copy stream would help."""
    if analysis.gpu is None or not gpu_active(analysis):
        return None
    step = step_mean_ms(analysis)
    if step <= 0:
        return None
    if facts is not None:
        copy_ms = facts.h2d_copy_ms_per_step
        overlap = facts.h2d_overlap_fraction
        if copy_ms / step < COPY_SHARE_MIN or overlap is None or overlap > COPY_OVERLAP_MAX:
            return None
        on_compute = facts.h2d_on_compute_stream_fraction
        evidence: tuple[str, ...] = (f"H2D copies {copy_ms:.2f} ms/step = {copy_ms / step:.0%} of the step "
                                     f"(threshold {COPY_SHARE_MIN:.0%})",
                                     f"{overlap:.0%} of copy time overlaps kernels (threshold {COPY_OVERLAP_MAX:.0%})",
                                     f"{(on_compute or 0.0):.0%} of copy time on a stream that also runs kernels")
    else:
        copy_ms = analysis.gpu.h2d_ms_per_step
        frac = analysis.gpu_idle.fraction if analysis.gpu_idle is not None else 0.0
        if copy_ms / step < COPY_SHARE_NO_TRACE_MIN or frac < COPY_IDLE_MIN:
            return None
        evidence = (f"H2D copies {copy_ms:.2f} ms/step = {copy_ms / step:.0%} of the step "
                    f"(threshold {COPY_SHARE_NO_TRACE_MIN:.0%}) with the GPU idle {frac:.0%} "
                    f"(threshold {COPY_IDLE_MIN:.0%}); overlap unknown without the trace",)
    return Finding(
        rule="copy_not_overlapped", severity="warning",
        message="host-to-device copies do not overlap compute",
        evidence=evidence, suggestion=SUGGEST_STREAM, cause="overlap stream",
        phases=(H2D_PHASE,), impact_ms=copy_ms)


def no_mixed_precision(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """GEMM/convolution kernels run in fp32/TF32; no half-precision ones: autocast is off."""
    if analysis.gpu is None or not gpu_active(analysis):
        return None
    if facts is not None and facts.kernel_ms_by_class:
        ms = dict(facts.kernel_ms_by_class)          # already per step
        source = "all kernels"
    else:
        ms = {k: _per_step(v, analysis) for k, v in kernel_class_ms(analysis.gpu.top_kernels).items()}
        source = "top kernels"
    total = ms.get("all", 0.0)
    if total <= 0:
        return None
    fp32, half = ms.get("fp32_matmul", 0.0) / total, ms.get("half_matmul", 0.0) / total
    if fp32 < FP32_MATMUL_SHARE_MIN or half > HALF_MATMUL_SHARE_MAX:
        return None
    return Finding(
        rule="no_mixed_precision", severity="warning",
        message="matrix kernels run in fp32/TF32: mixed precision is not in use",
        evidence=(f"fp32/TF32 GEMM+conv kernels {fp32:.0%} of kernel time "
                  f"(threshold {FP32_MATMUL_SHARE_MIN:.0%}, {source})",
                  f"half/bf16 GEMM+conv kernels {half:.0%} (threshold {HALF_MATMUL_SHARE_MAX:.0%})"),
        suggestion=SUGGEST_AUTOCAST, cause="mixed precision", phases=COMPUTE_PHASES,
        impact_ms=ms.get("fp32_matmul", 0.0))


def not_compiled(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """No Triton kernels and many small elementwise kernels: the model is not compiled."""
    if analysis.gpu is None or not gpu_active(analysis):
        return None
    if facts is not None and facts.kernel_count_by_class:
        triton = facts.kernel_count_by_class.get("triton", 0.0)
        elementwise = facts.kernel_count_by_class.get("elementwise", 0.0)
    else:
        counts = kernel_class_counts(analysis.gpu.top_kernels)
        triton = _per_step(counts["triton"], analysis)
        elementwise = _per_step(counts["elementwise"], analysis)
    if triton > 0 or elementwise < ELEMENTWISE_KERNELS_PER_STEP_MIN:
        return None
    return Finding(
        rule="not_compiled", severity="info",
        message="no Triton kernels and many unfused elementwise kernels: the model is not compiled",
        evidence=(f"{elementwise:.0f} elementwise kernels per step "
                  f"(threshold {ELEMENTWISE_KERNELS_PER_STEP_MIN:.0f}), 0 Triton kernels",
                  f"{analysis.gpu.kernels_per_step:.0f} kernels per step in all"),
        suggestion=SUGGEST_COMPILE, cause="compile", phases=COMPUTE_PHASES)


def cpu_launch_bound(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """Many short kernels and an idle GPU: the CPU cannot launch fast enough."""
    gpu = analysis.gpu
    if gpu is None or analysis.gpu_idle is None or not gpu_active(analysis):
        return None
    if gpu.kernels_per_step < LAUNCH_KERNELS_PER_STEP_MIN:
        return None
    mean_us = gpu.kernel_ms_per_step / gpu.kernels_per_step * 1000.0
    frac = analysis.gpu_idle.fraction
    if mean_us > SMALL_KERNEL_US or frac < LAUNCH_IDLE_MIN:
        return None
    return Finding(
        rule="cpu_launch_bound", severity="warning",
        message="many short kernels with the GPU idle between them: launch overhead dominates",
        evidence=(f"{gpu.kernels_per_step:.0f} kernels per step (threshold "
                  f"{LAUNCH_KERNELS_PER_STEP_MIN:.0f})",
                  f"mean kernel {mean_us:.1f} µs (threshold {SMALL_KERNEL_US:.0f} µs)",
                  f"GPU idle {frac:.0%} (threshold {LAUNCH_IDLE_MIN:.0%})"),
        suggestion=SUGGEST_LAUNCH, phases=COMPUTE_PHASES, impact_ms=idle_ms_per_step(analysis))


def _two_levels(durations: tuple[float, ...]) -> tuple[float, float, float] | None:
    """(low level, high level, share of high steps) when sorted durations split in two levels."""
    values = sorted(durations)
    n = len(values)
    best: tuple[float, int] | None = None
    for i in range(1, n):
        if values[i - 1] > 0:
            ratio = values[i] / values[i - 1]
            if best is None or ratio > best[0]:
                best = (ratio, i)
    if best is None or best[0] < TWO_LEVEL_RATIO:
        return None
    cut = best[1]
    if min(cut, n - cut) / n < TWO_LEVEL_MIN_FRACTION:
        return None
    low, high = values[:cut], values[cut:]
    return sum(low) / len(low), sum(high) / len(high), len(high) / n


def warmup_in_window(analysis: Analysis, facts: TraceFacts | None = None) -> Finding | None:
    """Warm-up inside the measured window: first-step outliers, two-level step times, or a kernel set
    that changes between steps (on a GPU: then named cudnn.benchmark autotuning, recompilation)."""
    durations = analysis.steps.durations_ms
    median = analysis.steps.summary_ms.median
    evidence: list[str] = []
    if len(durations) >= WARMUP_MIN_STEPS and median > 0:
        if durations[0] >= FIRST_STEP_OUTLIER_RATIO * median:
            evidence.append(f"first measured step {durations[0]:.2f} ms = "
                            f"{durations[0] / median:.1f}x the median (threshold "
                            f"{FIRST_STEP_OUTLIER_RATIO}x)")
        levels = _two_levels(tuple(durations)) if len(durations) >= TWO_LEVEL_MIN_STEPS else None
        if levels is not None:
            evidence.append(f"step times split in two levels: {levels[0]:.2f} ms and {levels[1]:.2f} ms "
                            f"({levels[2]:.0%} of steps slow; threshold {TWO_LEVEL_RATIO}x)")
    if kernels := facts is not None and facts.kernel_set_changes >= KERNEL_SET_CHANGES_MIN:
        evidence.append(f"{facts.kernel_set_changes} measured steps launch a different kernel set "
                        f"than the others (threshold {KERNEL_SET_CHANGES_MIN})")
    if facts is not None and gpu_active(analysis) and facts.cpu_only_steps > 0:
        evidence.append(f"{facts.cpu_only_steps} measured steps launch no GPU work at all")
    if not evidence:
        return None
    only_levels = len(evidence) == 1 and evidence[0].startswith("step times split")
    kernels = kernels and gpu_active(analysis)
    return Finding(
        rule="warmup_in_window", severity="info" if only_levels else "warning",
        message="warm-up work " + ("(cudnn.benchmark autotuning, recompilation: other kernels in some steps) "
                                   if kernels else "") + "falls inside the measured window",
        evidence=tuple(evidence), suggestion=SUGGEST_WARMUP if kernels else SUGGEST_WARMUP_STEPS,
        cause="cudnn.benchmark/recompilation" if kernels else "warm-up")

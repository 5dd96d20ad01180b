"""``perfgate analyze --format table``: an Analysis as aligned plain text."""
from __future__ import annotations

from perfgate.analysis.kernel_names import shortened
from perfgate.records.model import Analysis
from perfgate.records.steps import StepStats


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) if i == 0 else c.rjust(w)  # noqa: E731
                                   for i, (c, w) in enumerate(zip(cells, widths)))
    return [line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows]


def _source(st: StepStats) -> str:
    from perfgate.analysis.steps import SOURCE_DESCRIPTIONS

    return st.marker or SOURCE_DESCRIPTIONS.get(st.source, st.source)


def render_table(analysis: Analysis) -> str:
    """Steps, phases, GPU idle and GPU work of one analysis, for a terminal."""
    a, st = analysis, analysis.steps
    s = st.summary_ms
    out = [f"trace: {a.source}  (nsys {a.nsys_version or '?'}, schema {a.schema_version or '?'})",
           f"steps: '{st.range_name}' x {st.count} measured ({st.warmup_skipped} warm-up skipped per "
           f"process, {a.processes} process{'es' if a.processes != 1 else ''}), from {_source(st)}",
           f"step time ms (iteration period: step start to next step start, GPU work done): {_fmt(st.time_ms)} "
           f"({st.statistic}, gated)  median {_fmt(s.median)}  mean {_fmt(s.mean)}  p10 {_fmt(s.p10)}  "
           f"p90 {_fmt(s.p90)}  stdev {_fmt(s.stdev)}"]
    if st.interludes:
        out.append(f"interludes: {st.interludes} measured periods held an evaluation or a checkpoint (mean "
                   f"{_fmt(st.interlude_mean_ms)} ms): left out of the steps")
    if st.range_summary_ms is not None and st.source == "nvtx":
        out.append(f"step range ms (the '{st.range_name}' range itself, not gated): median "
                   f"{_fmt(st.range_summary_ms.median)}  mean {_fmt(st.range_summary_ms.mean)}")
    if st.samples_per_s is not None:
        per = " from the DataLoader's batches" if st.batch_source == "dataloader" else ""
        out.append(f"throughput: {st.samples_per_s:.1f} samples/s (batch size {st.batch_size}{per})")
    else:
        out.append("throughput: unknown (no batch size: none configured or reported, and no DataLoader batch "
                   "of known size in every measured step; set batch_size in [tool.perfgate.workloads.<name>])")
    if a.gpu_idle is not None:
        per = ", ".join(f"GPU {d}: {v:.1%}" for d, v in a.gpu_idle.per_device.items())
        out.append(f"GPU idle: {a.gpu_idle.fraction:.1%} of {a.gpu_idle.window_ms:.1f} ms ({per})")
    if a.phases:
        out += ["", "phases (per measured step):"]
        rows = [[p.name, str(p.count), _fmt(p.cpu_per_step_ms), f"{p.share_of_step:.1%}",
                 _fmt(p.gpu_per_step_ms),
                 _fmt(None if p.gpu_thread_proj_ms is None else p.gpu_thread_proj_ms / max(st.count, 1))]
                for p in a.phases.values()]
        out += _table(["phase", "count", "cpu ms", "share", "gpu ms", "proj ms"], rows)
    if a.gpu is not None:
        g = a.gpu
        out += ["", f"kernels/step {g.kernels_per_step:.1f}  kernel ms/step {g.kernel_ms_per_step:.3f}  "
                    f"CUDA API ms/step {g.cuda_api_ms_per_step:.3f}  syncs/step {g.sync_calls_per_step:.1f}",
                f"H2D/step {g.h2d_bytes_per_step / 1e6:.2f} MB in {g.h2d_ms_per_step:.3f} ms  "
                f"pageable copies {g.pageable_copies}"
                + ("" if g.peak_memory_bytes is None else f"  peak GPU memory {g.peak_memory_bytes / 2**20:.1f} MiB")]
        if g.top_kernels:
            out += ["", "top kernels:"]
            short = shortened(k.name for k in g.top_kernels)
            out += _table(["kernel", "count", "total ms"],
                          [[short[k.name], str(k.count), _fmt(k.total_ms)] for k in g.top_kernels])
    out += _ranks(a)
    if a.gpu_idle is not None and a.gpu_idle.longest_gaps:
        out += ["", "longest GPU idle gaps:"]
        out += _table(["GPU", "ms", "CPU ranges open"],
                      [[gp.device, _fmt(gp.duration_ms), " > ".join(gp.cpu_ranges) or "-"]
                       for gp in a.gpu_idle.longest_gaps])
    if a.warnings or a.launch.notes:
        out += [""] + [f"warning: {w}" for w in (*a.warnings, *a.launch.notes)]
    return "\n".join(out) + "\n"


def _opt(value: int | None) -> str:
    return "-" if value is None else str(value)


def _ranks(a: Analysis) -> list[str]:
    """Per rank of a multi-process job: step time and, with NCCL kernels, communication per step."""
    if not a.ranks:
        return []
    comm = {r.rank: r for r in a.comm.ranks} if a.comm is not None else {}
    nodes = any(r.node is not None for r in a.ranks)    # a job of several nodes: each rank's node
    head = ((["node", "local", "rank"] if nodes else ["rank"]) + ["pid", "steps", "step ms"]
            + (["NCCL kernels", "comm ms", "exposed ms"] if comm else []))
    rows = []
    for r in a.ranks:
        place = [_opt(r.node), _opt(r.local_rank)] if nodes else []
        row = [*place, str(r.rank), str(r.pid), str(r.steps), _fmt(r.step_time_ms)]
        c = comm.get(r.rank)
        if c is not None:
            row += [_fmt(c.kernels_per_step, 1), _fmt(c.comm_ms), _fmt(c.exposed_ms)]
        elif comm:
            row += ["-"] * 3
        rows.append(row)
    out = ["", f"ranks (per measured step; skew {_fmt(a.rank_skew_ms)} ms):"] + _table(head, rows)
    if a.comm is not None:
        overlap = "-" if a.comm.overlap_fraction is None else f"{a.comm.overlap_fraction:.1%}"
        out.append(f"communication (NCCL kernels, per step and rank): {a.comm.kernels_per_step:.1f} kernels, "
                   f"{a.comm.comm_ms:.3f} ms, exposed {a.comm.exposed_ms:.3f} ms, overlapped by compute {overlap}")
    return out

"""TraceFacts of one trace (perfgate.records.facts): what the diagnosis's rules need that the rest
of an Analysis does not keep, read from the raw events of the measured window in the analysis pass
(``analyze`` passes what it made already: the phase instances, the devices' busy intervals)."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from perfgate.analysis import intervals
from perfgate.analysis.idle import busy_intervals
from perfgate.analysis.intervals import BLOCK
from perfgate.analysis.kernel_classes import kernel_class_counts, kernel_class_ms
from perfgate.analysis.kernel_sets import kernel_set_changes
from perfgate.analysis.loop import autostep_marked, input_function, loader_in_use, loader_workers
from perfgate.analysis.phases import phase_instances, steps_key
from perfgate.analysis.steps import measured_iterations
from perfgate.records.facts import H2D_PHASE, OUTSIDE_PHASES, STEP_CODE, TraceFacts
from perfgate.records.model import GpuWork, KernelStat
from perfgate.records.steps import StepStats
from perfgate.trace.api_calls import SYNC_CALLS, api_name
from perfgate.trace.columns import Columns, factorize
from perfgate.trace.gpu_ops import GRAPH, KERNEL, MEMCPY, GpuOps

if TYPE_CHECKING:
    from perfgate.trace.export import Trace

Busy = dict[int, tuple[np.ndarray, np.ndarray]]   # device -> its busy intervals (analysis.idle.busy_intervals)


# ----------------------------------------------------------------------------- from a Trace

D2H_COPY_KIND = 2

SYNC_APIS = SYNC_CALLS
SYNC_MEMCPY_RE = re.compile(r"^(cudaMemcpy|cuMemcpy)(?!.*Async)")
H2D_COPY_KIND = 1


def _pids(rows: Columns) -> np.ndarray:
    """Process ids of a table's rows (its ``pid`` column, else decoded from ``global_tid``)."""
    if "pid" in rows:
        return rows["pid"]
    return (rows["global_tid"] >> 24) & 0xFFFFFF


def _h2d_overlap(cstart: np.ndarray, cend: np.ndarray, cdev: np.ndarray, cstream: np.ndarray,
                 ops: GpuOps, kernels: np.ndarray) -> tuple[int, int]:
    """(copy ns overlapping kernels of the same GPU, copy ns on a stream that runs kernels);
    ``kernels``: the rows of ``ops`` that are the kernels counted. Only the kernels that overlap a
    copy take part in the union (the others add nothing to the overlap), found a block at a time."""
    overlap_ns, on_compute_ns = 0, 0
    devices = np.unique(cdev)
    for dev in devices:                                       # devices, not copies
        mine = cdev == dev
        cu_s, cu_e = intervals.union(cstart[mine], cend[mine])
        near: list[np.ndarray] = []
        streams: list[np.ndarray] = []
        for at in range(0, kernels.size, BLOCK):
            rows = kernels[at:at + BLOCK]
            rows = rows[ops.device_id[rows] == dev]
            streams.append(np.unique(ops.stream_id[rows]))
            ks, ke = ops.start[rows], ops.end[rows]
            i = np.searchsorted(cu_s, ke, side="left") - 1      # the last copy span starting before ke
            hit = i >= 0
            hit[hit] = cu_e[i[hit]] > ks[hit]
            near.append(rows[hit])
        rows = np.concatenate(near) if near else kernels[:0]
        us, ue = intervals.union(ops.start[rows], ops.end[rows])
        overlap_ns += intervals.overlap_length(cstart[mine], cend[mine], us, ue)
        del us, ue
        on = mine & np.isin(cstream, np.unique(np.concatenate(streams)) if streams else [])
        on_compute_ns += int((cend[on] - cstart[on]).sum())
    return overlap_ns, on_compute_ns


def _launched_in(ops: GpuOps, lo: int, hi: int) -> np.ndarray:
    """Ops launched in [lo, hi] (``GpuOps.call_time``), a block at a time: a mask, no 8-byte
    column of every op."""
    out = np.empty(len(ops), dtype=bool)
    for at in range(0, len(ops), BLOCK):
        part = slice(at, at + BLOCK)
        t = ops.call_time(part)
        out[part] = (t >= lo) & (t <= hi)
    return out


def _window_idle(launched: GpuOps, phases: Columns, lo: int, hi: int,
                 busy: Busy | None) -> tuple[int, float, dict[str, float], int] | None:
    """(ops overlapping [lo, hi], their idle ns summed over devices, idle ns by phase, devices),
    None when no op overlaps the window. ``busy``: the devices' busy intervals the analysis made
    (made here when None); the ops are read a block at a time for their (device, process) pairs."""
    count = 0
    pairs: set[tuple[int, int]] = set()
    for at in range(0, len(launched), BLOCK):
        part = slice(at, at + BLOCK)
        over = (launched.start[part] < hi) & (launched.end[part] > lo)
        count += int(np.count_nonzero(over))
        key = (launched.device_id[part][over].astype(np.int64) << 32) | launched.pid[part][over]
        pairs.update((int(k) >> 32, int(k) & 0xFFFFFFFF) for k in np.unique(key))
    if count == 0:
        return None
    if busy is None:
        busy = busy_intervals(launched, lo, hi)
    devices = sorted({d for d, _ in pairs})
    idle_ns, idle_phase_ns = _idle_by_phase(
        {d: busy[d] for d in devices}, {d: np.array(sorted(p for dd, p in pairs if dd == d)) for d in devices},
        phases, lo, hi)
    return count, idle_ns, idle_phase_ns, max(len(devices), 1)


def _idle_by_phase(busy: dict[int, tuple[np.ndarray, np.ndarray]], pids: dict[int, np.ndarray],
                   phases: Columns, lo: int, hi: int) -> tuple[float, dict[str, float]]:
    """Idle ns summed over devices, and by the phase open on the CPU (OUTSIDE_PHASES if none).
    A phase's idle time is its time in the window less its time on the busy intervals (the gaps and
    the busy intervals tile the window), so the gaps themselves are never made."""
    total = 0
    by_phase: dict[str, float] = {}
    phase_pid = _pids(phases)
    codes, names = _sorted_codes(phases["phase"])
    p_start, p_end = phases["start"], phases["end"]
    for dev, (us, ue) in busy.items():                       # devices, not ops
        idle = max(hi - lo, 0) - int((ue - us).sum())
        total += idle
        inside = 0
        # only the phases of the processes that use this GPU: in a multi-process (DDP) trace every
        # rank's phases are open at once, and each GPU's idle time belongs to its own rank's phase
        mine = np.isin(phase_pid, pids[dev])
        for code, name in enumerate(names):                  # phases, sorted by name
            rows = mine & (codes == code)
            if not rows.any():
                continue
            ps, pe = intervals.union(p_start[rows], p_end[rows])
            in_window = int(np.maximum(np.minimum(pe, hi) - np.maximum(ps, lo), 0).sum())
            ns = in_window - intervals.overlap_length(ps, pe, us, ue)
            by_phase[name] = by_phase.get(name, 0.0) + ns
            inside += ns
        by_phase[OUTSIDE_PHASES] = by_phase.get(OUTSIDE_PHASES, 0.0) + max(0, idle - inside)
    return float(total), by_phase


def _sorted_codes(values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """(codes, distinct values sorted): ``codes[i]`` is the position of ``values[i]`` among them."""
    codes, distinct = factorize(values)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    rank = np.empty(len(distinct) + 1, dtype=np.int64)
    rank[order] = np.arange(len(distinct))
    return rank[codes], [distinct[k] for k in order]


def trace_facts(trace: Trace, stats: StepStats, gpu: GpuWork | None, measured: Columns, instances: Columns,
                busy: Busy | None = None) -> TraceFacts:
    """TraceFacts of the measured window of ``stats``, read from the raw events of ``trace`` (the
    GPU ops and API calls of that window are the ones the analysis read: ``Trace.gpu``).
    ``measured``, ``instances``: the analysis's measured steps and their phase instances (used
    where the iterations found again from ``stats`` are those); ``busy``: the devices' busy
    intervals in the window, when the analysis made them."""
    n = max(stats.count, 1)
    lo, hi = stats.window_start_ns, stats.window_end_ns
    workers = _dataloader_workers(trace, lo, hi)
    loader = loader_in_use(trace.marks, trace.nvtx)
    made_by = input_function(trace.marks)
    if loader is False:      # hooks without marks (older captures): worker processes are a DataLoader's
        loader = bool(workers)
        workers = workers or None
    if not trace.has_gpu:
        return TraceFacts(steps=n, dataloader_workers=workers, dataloader=loader, input_function=made_by)
    launched, api = trace.gpu((lo, hi))
    steps = measured_iterations(trace.nvtx, stats, trace.marks)
    if not len(steps):
        phases = steps.assign(phase=np.zeros(0, dtype=object))
    else:
        phases = instances if steps_key(steps) == steps_key(measured) else phase_instances(trace.nvtx, steps)
    # idle first: its per-op arrays are freed before the kernels' are made (peak memory)
    window = _window_idle(launched, phases, lo, hi, busy)
    del busy
    if window is None:
        return TraceFacts(steps=n, dataloader_workers=workers, dataloader=loader, input_function=made_by)
    gpu_ops, idle_ns, idle_phase_ns, ndev = window
    # kernels and copies are the analysis's: launched in the window, whole (a loop that runs ahead of
    # the GPU launches work that runs after the window); idle is about the ops overlapping it
    own = _launched_in(launched, lo, hi)
    ki = np.flatnonzero(own & (launched.kind == KERNEL))
    own_ki = (ki, np.flatnonzero(own & (launched.kind == GRAPH)))
    copies = own & (launched.kind == MEMCPY)
    c = np.flatnonzero(copies & (launched.copy_kind == H2D_COPY_KIND))
    d2h = int(np.count_nonzero(copies & (launched.copy_kind == D2H_COPY_KIND)))
    del own, copies
    cstart, cend, cdev, cstream = launched.start[c], launched.end[c], launched.device_id[c], launched.stream_id[c]
    copy_ns = int((cend - cstart).sum())
    # copies first: the kernels' columns are gathered one device at a time, only where copies are
    overlap_ns, on_compute_ns = _h2d_overlap(cstart, cend, cdev, cstream, launched, ki)
    kname, kpid = launched.name_id[ki], launched.pid[ki]
    dur_ns = launched.end[ki] - launched.start[ki]
    dur_ms = dur_ns / 1e6
    klaunch = launched.call_time(ki)
    # sums of whole ns, made ms once: exact, whatever the order of the kernels
    ids, counts, totals = intervals.group_sums(kname, dur_ns)
    kernel_stats = tuple(KernelStat(name=trace.string(i), count=c, total_ms=t / 1e6)
                         for i, c, t in zip(ids.tolist(), counts.tolist(), totals.tolist()))
    class_ms = {k: v / n for k, v in kernel_class_ms(kernel_stats).items()}
    class_counts = {k: v / n for k, v in kernel_class_counts(kernel_stats).items()}
    kernels = int(ki.size)
    del ki

    assert api is not None
    names = {i: api_name(trace.string(i)) for i in api.count_by_name_open}
    syncs = [i for i, name in names.items() if name in SYNC_APIS]
    sync_calls = sum(api.count_by_name_open[i] for i in syncs)
    sync_ns = sum(api.ns_by_name_open[i] for i in syncs)
    sync_memcpy = sum(api.count_by_name_open[i] for i, name in names.items() if SYNC_MEMCPY_RE.match(name))

    h2d = phases.take(phases["phase"] == H2D_PHASE)
    h2d_syncs = 0
    for tid in np.unique(h2d["global_tid"]):                    # threads, not ranges
        ranges = h2d.take(h2d["global_tid"] == tid)
        t = np.sort(api.kept_start[api.kept_tid == tid])
        i = np.searchsorted(t, ranges["start"], side="left")
        j = np.searchsorted(t, ranges["end"], side="right")
        h2d_syncs += int((j - i).sum())
    changes, empty_steps = kernel_set_changes(klaunch, kpid, kname, steps)
    place, places = _where_codes(phases, steps, kpid, klaunch)
    by_phase = _kernels_by_phase(trace, place, places, kname, dur_ns, n)
    by_family, threads = _kernels_by_family(trace, launched, own_ki, place, places, phases, steps, dur_ns, n)
    del dur_ns, place
    sync_where = _where(phases, steps, (api.kept_tid >> 24) & 0xFFFFFF, api.kept_start)
    syncs_by_phase: dict[str, float] = {}
    for where in sync_where:
        if where is not None:
            syncs_by_phase[where] = syncs_by_phase.get(where, 0.0) + 1.0 / n
    return TraceFacts(
        kernels_by_phase=by_phase, kernels_by_family=by_family, threads_by_family=threads, syncs_by_phase=syncs_by_phase,
        d2h_copies_per_step=d2h / n,
        fp64_kernels_per_step=_fp64_kernels(trace, lo, hi) / n, dataloader_workers=workers, dataloader=loader,
        input_function=made_by,
        steps=n, gpu_ops=gpu_ops,
        # the analysis's count (ops launched in the window), not ops overlapping it: one definition
        kernels_per_step=gpu.kernels_per_step if gpu is not None else kernels / n,
        kernel_ms_by_class=class_ms, kernel_count_by_class=class_counts,
        median_kernel_us=float(np.median(dur_ms) * 1000) if dur_ms.size else None,
        h2d_copies_per_step=int(c.size) / n, h2d_copy_ms_per_step=copy_ns / 1e6 / n,
        h2d_on_compute_stream_fraction=on_compute_ns / copy_ns if copy_ns else None,
        h2d_overlap_fraction=overlap_ns / copy_ns if copy_ns else None,
        sync_calls_per_step=sync_calls / n,
        sync_ms_per_step=float(sync_ns) / 1e6 / n,
        h2d_syncs_per_step=h2d_syncs / n, sync_memcpy_per_step=sync_memcpy / n,
        idle_ms_per_step=idle_ns / 1e6 / n / ndev,
        idle_by_phase_ms={k: v / 1e6 / n / ndev for k, v in idle_phase_ns.items()},
        kernel_set_changes=changes, cpu_only_steps=empty_steps,
    )



def _kernels_by_phase(trace: Trace, code: np.ndarray, labels: list[str], kname: np.ndarray, dur_ns: np.ndarray,
                      n: int) -> dict[str, dict[str, list[float]]]:
    """Place (phase or STEP_CODE) -> kernel name -> [launches, ms] per step, places and names in
    sorted order; ``code``: each kernel's place (_where_codes), -1 outside the measured iterations.
    Grouped on integer codes, never on a column of strings."""
    keep = code >= 0                                        # a mask: 1 byte per kernel
    by_phase: dict[str, dict[str, list[float]]] = {}
    if not keep.any():
        return by_phase
    # one int64 key per (place, name), ordered as the pair: name ids from -1 up shifted by one
    span = int(kname.max()) + 2
    key = code[keep].astype(np.int64)
    key *= span
    key += kname[keep]
    key += 1
    keys, counts, totals = intervals.group_sums(key, dur_ns if keep.all() else dur_ns[keep])
    del keep, key
    for k, count, total in zip(keys.tolist(), counts.tolist(), totals.tolist()):
        where, name_id = divmod(k, span)
        by_phase.setdefault(labels[where], {})[trace.string(name_id - 1)] = [count / n, total / 1e6 / n]
    return by_phase


def _kernels_by_family(trace: Trace, ops: GpuOps, rows: tuple[np.ndarray, np.ndarray], place: np.ndarray,
                       places: list[str], phases: Columns, steps: Columns, dur_ns: np.ndarray,
                       n: int) -> tuple[dict[str, dict[str, dict[str, list[float]]]], dict[str, dict[str, float]]]:
    """TraceFacts.kernels_by_family and threads_by_family: the kernels (``rows[0]`` of ``ops``, at
    ``place``) and CUDA graph launches (``rows[1]``) by place and family
    (perfgate.analysis.kernel_families), and the threads they launched."""
    from perfgate.analysis.kernel_families import by_family, kernel_labels, threads_by_family

    ki, gi = rows
    found = kernel_labels(trace, ops.pid[ki], ops.correlation_id[ki], ops.start[ki], ops.name_id[ki])
    graph_place, _ = _where_codes(phases, steps, ops.pid[gi], ops.call_time(gi)) if gi.size else (None, [])
    table = by_family(place, places, found.codes, found.labels, dur_ns, n, graph_place,
                      (ops.end[gi] - ops.start[gi]) if gi.size else None)
    return table, threads_by_family(table, found.threads)


def _where_codes(phases: Columns, steps: Columns, pid: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per event (process, time): the place it happened as a code into the sorted labels (the phase
    open then, STEP_CODE inside a measured iteration but in none of its phases), -1 outside the
    measured iterations."""
    from perfgate.analysis.phases import open_instance

    if t.size == 0:
        return np.zeros(0, dtype=np.int64), []
    iters = steps.assign(end=steps["period_end"]) if "period_end" in steps else steps
    in_step = open_instance(iters, pid, t) >= 0          # positions: no index needed
    inst = open_instance(phases, pid, t) if len(phases) else np.full(t.size, -1)
    phase_names = phases["phase"] if len(phases) else np.array([], dtype=object)
    # the labels sorted, each phase instance's rank among them (np.unique's, without sorting every row)
    first, distinct = factorize(np.append(phase_names, STEP_CODE).astype(object))
    labels = np.array(sorted(distinct), dtype=object)
    rank = np.searchsorted(labels, np.asarray(distinct, dtype=object))[first]
    codes = np.append(rank[:-1], -1).astype(np.int32)      # position -1: no phase
    code = codes[inst]                                      # int32: 4 bytes per event less
    del inst
    code[(code < 0) & in_step] = rank[-1]
    return code, labels.tolist()


def _where(phases: Columns, steps: Columns, pid: np.ndarray, t: np.ndarray) -> list[str | None]:
    """Per event (process, time): the phase open then, STEP_CODE inside a measured iteration but
    in none of its phases, None outside the measured iterations."""
    code, labels = _where_codes(phases, steps, pid, t)
    named = np.array([*labels, None], dtype=object)       # position -1: None
    return list(named[code])


def _fp64_kernels(trace: Trace, lo: int, hi: int) -> int:
    """Kernels starting in [lo, hi) whose demangled name has a ``double`` type."""
    from perfgate.trace import database

    table = "CUPTI_ACTIVITY_KIND_KERNEL"
    if table not in trace.tables or "demangledName" not in trace._columns(table) or trace._con is None:
        return 0
    row = database.fetch(trace._con, (
        f"SELECT count(*) AS n FROM {database.CATALOG}.{table} k JOIN {database.CATALOG}.StringIds s "
        f"ON s.id = k.demangledName WHERE k.start >= {int(lo)} AND k.start < {int(hi)} "
        "AND (s.value LIKE '%double%')"))
    return int(row["n"][0])


def _dataloader_workers(trace: Trace, lo: int, hi: int) -> int | None:
    """The ``num_workers`` of the DataLoader iterator in use in the measured window, from autostep's
    ``perfgate/loader`` marks (analysis.loop.loader_workers); None where autostep marked the capture
    and no iterator (the program made none). Only in captures without autostep's marks, the worker
    processes (``pt_data_worker``) nsys lists in PROCESSES: every iterator's, so an iterator made
    anew each epoch counts its workers each time, and every process of the machine's (nsys 2022.4
    and 2025.3 list them all), so another program's workers count too. None without either."""
    from perfgate.trace import database

    workers = loader_workers(trace.marks, lo, hi)
    if workers is not None or autostep_marked(trace.marks):
        return workers
    if "PROCESSES" not in trace.tables or trace._con is None:
        return None
    row = database.fetch(trace._con, f"SELECT count(DISTINCT pid) AS n FROM {database.CATALOG}.PROCESSES "
                                     "WHERE name = 'pt_data_worker'")
    return int(row["n"][0])

"""What got faster, and why: the kernel and synchronization differences of a run that is faster
than its baseline (an IMPROVED verdict), so that a reviewer sees whether a claimed speed-up is the
intended one. The model's phases are one place, as for a slower run; a change of mechanism
(perfgate.diagnosis.mechanisms) leads, else the kernels that disappeared beside those that
appeared. Milliseconds are what each difference saved per step."""
from __future__ import annotations

from collections.abc import Mapping

from perfgate.diagnosis.differences import (
    MIN_MS, MIN_PER_STEP, MODEL_PHASE, FamilyTables, Kernels, family_tables, shortened_evidence, totals,
)
from perfgate.diagnosis.mechanisms import Replacement, merged, replacements
from perfgate.records.diagnosis import Reason

FASTER_KERNELS = "kernels_faster"


def _changed(base: Kernels, cur: Kernels, places: list[str], sign: int) -> tuple[tuple[str, float, float], ...]:
    names: dict[str, list[float]] = {}
    for w in places:
        for name in {*base.get(w, {}), *cur.get(w, {})}:
            b, c = base.get(w, {}).get(name, [0.0, 0.0]), cur.get(w, {}).get(name, [0.0, 0.0])
            d = names.setdefault(name, [0.0, 0.0])
            d[0] += c[0] - b[0]
            d[1] += c[1] - b[1]
    return tuple(sorted(((n, d[0], d[1]) for n, d in names.items() if sign * d[0] >= MIN_PER_STEP),
                        key=lambda x: -abs(x[1])))


def faster_differences(base_kernels: Kernels, cur_kernels: Kernels, base_syncs: Mapping[str, float],
                       cur_syncs: Mapping[str, float], host_ms: Mapping[str, float], host_bound: bool,
                       idle_delta_ms: float, base_families: FamilyTables | None = None,
                       cur_families: FamilyTables | None = None) -> list[Reason]:
    """The differences that made the step faster, largest saving first (``host_ms``: host-time
    change per place; ``idle_delta_ms``: the GPU idle time's change, negative when it fell)."""
    places = list(dict.fromkeys([*base_kernels, *cur_kernels]))
    model = [w for w in places if MODEL_PHASE.search(w)]
    out: list[Reason] = []
    for group in ([model] if model else []) + [[w] for w in places if w not in model]:
        gpu = sum(totals(cur_kernels.get(w, {}))[1] - totals(base_kernels.get(w, {}))[1] for w in group)
        host = sum(host_ms.get(w, 0.0) for w in group)
        saved = max(-gpu, -host) if host_bound else -gpu
        if saved < MIN_MS:
            continue
        launches = sum(totals(cur_kernels.get(w, {}))[0] - totals(base_kernels.get(w, {}))[0] for w in group)
        gone, new = _changed(base_kernels, cur_kernels, group, -1), _changed(base_kernels, cur_kernels, group, +1)
        if abs(gpu) < MIN_MS and not (gone or new):
            continue              # the same kernels: host time, told by perfgate.diagnosis.host
        host_note = f", host time {host:+.2f} ms/step" if host_bound else ""
        stories = replacements(merged([family_tables(base_families or {}, base_kernels, w) for w in group]),
                               merged([family_tables(cur_families or {}, cur_kernels, w) for w in group]))
        where = ", ".join(group)
        if stories:
            story = stories[0]
            also = "".join(f"; also {o.summary}" for o in stories[1:])
            out.append(Reason(f"replaced:{story.kind}", group[0], saved,
                              f"{story.text} ({shortened_evidence(story.evidence(), story)}; {gpu:+.2f} ms/step GPU time "
                              f"in {where}{host_note}){also}", story.cause))
            continue
        change = Replacement("kernels", "", "", gone, new)
        evidence = shortened_evidence(change.evidence(), change)
        out.append(Reason(FASTER_KERNELS, group[0], saved,
                          f"{where}: {launches:+.0f} kernel launches/step, {gpu:+.2f} ms/step GPU time{host_note}"
                          + (f" ({evidence})" if evidence else ""), None))
    fewer = {w: base_syncs.get(w, 0.0) - cur_syncs.get(w, 0.0) for w in dict.fromkeys([*base_syncs, *cur_syncs])}
    fewer = {w: n for w, n in fewer.items() if n >= MIN_PER_STEP}
    for where, count in sorted(fewer.items(), key=lambda kv: -kv[1]):
        saved = max(0.0, -idle_delta_ms) * count / sum(fewer.values())
        if saved >= MIN_MS:
            out.append(Reason("syncs", where, saved, f"fewer host-GPU synchronizations in {where}: -{count:.0f}/step; "
                              f"the GPU idles {idle_delta_ms:+.2f} ms/step", None))
    return sorted(out, key=lambda r: -r.ms)

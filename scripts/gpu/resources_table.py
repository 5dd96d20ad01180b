"""Tables of scripts/gpu/memory-energy-inference.sh: reads the ``perfgate-report.json`` of each of its
runs and writes ``results.json`` and ``results.md`` (peak memory, energy per sample with its
launch-to-launch spread, the inference workload eager vs compiled, and the verdicts of the changes).

    python3 scripts/gpu/resources_table.py WORK_DIR OUT_DIR
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

MEMORY = ("gpu_memory.peak_allocated_mib", "gpu_memory.peak_reserved_mib", "gpu_memory.peak_traced_mib")
# run tag -> what it is (the script's steps; a missing one is skipped)
RUNS = {
    "lm-base": "transformer_lm, baseline recorded",
    "lm-retain": "transformer_lm, the last step's logits kept alive (retain_outputs 1)",
    "lm-extra-work": "transformer_lm, extra GPU work (extra_matmuls)",
    "infer-base": "resnet_infer (eager) and resnet_infer[compiled], baselines recorded",
    "infer-lost": "resnet_infer[compiled] with the compile call lost (lost_compile)",
}
# (report tag, result name) -> row name of the inference table
INFERENCE_ROWS = {
    ("infer-base", "resnet_infer"): "eager",
    ("infer-base", "resnet_infer[compiled]"): "compiled (torch.compile; reduce-overhead on a GPU)",
    ("infer-lost", "resnet_infer[compiled]"): "compiled, the compile call lost (the change)",
}


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def summarize(tag: str, result: dict[str, Any], exit_code: str | None, what: str | None = None) -> dict[str, Any]:
    """One workload of one run: its verdict, first reason, regressed gating metrics and per-launch numbers."""
    analyses = result.get("analyses") or []
    per_launch = []
    for a in analyses:
        m, gpu, rep = a.get("metrics") or {}, a.get("gpu") or {}, a.get("self_report") or {}
        energy = a.get("energy") or {}
        per_launch.append({
            "step_time_ms": m.get("step_time_ms"), "step_time_p99_ms": m.get("step_time_p99_ms"),
            **{k: m.get(k) for k in MEMORY},
            "energy_per_sample_j": m.get("energy.per_sample_j"), "energy_per_step_j": m.get("energy.per_step_j"),
            "power_mean_w": m.get("energy.power_mean_w"), "power_peak_w": m.get("energy.power_peak_w"),
            "energy_source": energy.get("source") or energy.get("unavailable"),
            "clock_offset_ms": energy.get("clock_offset_ms"),
            "sm_mhz_mean": energy.get("sm_mhz_mean"),
            "kernels_per_batch": m.get("kernels_per_step"), "graph_launches_per_batch": gpu.get("graph_launches_per_step"),
            "cuda_api_ms_per_batch": m.get("cuda_api_ms_per_step"),
            "latency_ms_p50": rep.get("latency_ms_p50"), "latency_ms_p99": rep.get("latency_ms_p99"),
            "compiled": rep.get("compiled"),
        })
    profile = result.get("profile")
    if isinstance(profile, dict):   # kernels, graph launches, API time and traced memory: the CUDA profile launch
        m, gpu = profile.get("metrics") or {}, profile.get("gpu") or {}
        per_launch.append({**{k: None for k in (per_launch[0] if per_launch else {})},
                           "gpu_memory.peak_traced_mib": m.get("gpu_memory.peak_traced_mib"),
                           "kernels_per_batch": m.get("kernels_per_step"),
                           "graph_launches_per_batch": gpu.get("graph_launches_per_step"),
                           "cuda_api_ms_per_batch": m.get("cuda_api_ms_per_step")})
    message = result.get("message") or ""
    first = next((ln.split(": ", 1)[1] for ln in message.splitlines() if ln.startswith("first reason: ")), None)
    regressed = [c["metric"] for c in result.get("comparisons") or []
                 if c.get("gating") and c.get("verdict") == "REGRESSED"]
    rows = {c["metric"]: c for c in result.get("comparisons") or []}
    return {"tag": tag, "name": result.get("name"), "what": what or RUNS.get(tag, tag), "exit_code": exit_code, "verdict": result.get("verdict"),
            "summary": message.splitlines()[0] if message else result.get("error"), "first_reason": first,
            "regressed_gating": regressed, "launches": per_launch,
            "step_time": rows.get("step_time_ms", {}).get("verdict"),
            "median": {k: _median([x[k] for x in per_launch if isinstance(x.get(k), (int, float))])
                       for k in (per_launch[0] if per_launch else {}) if k not in ("energy_source", "compiled")}}


def spread(values: list[float]) -> dict[str, float] | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return {"mean": mean, "min": min(values), "max": max(values), "cv": statistics.stdev(values) / mean}


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    out = ["# perfgate: memory, energy and inference (scripts/gpu/memory-energy-inference.sh)", ""]
    lm = [runs[t] for t in ("lm-base", "lm-retain", "lm-extra-work") if t in runs]
    if lm:
        out += ["## transformer_lm: peak memory and energy", "",
                "| run | verdict (exit) | step time ms | allocated MiB | reserved MiB | traced MiB | J/sample | "
                "mean / peak W | regressed (gating) | first reason |", "|---|---|---|---|---|---|---|---|---|---|"]
        for r in lm:
            m = r["median"]
            out.append(f"| {r['what']} | {r['verdict']} ({r['exit_code']}) | {_fmt(m.get('step_time_ms'), 1)} | "
                       f"{_fmt(m.get(MEMORY[0]), 0)} | {_fmt(m.get(MEMORY[1]), 0)} | {_fmt(m.get(MEMORY[2]), 0)} | "
                       f"{_fmt(m.get('energy_per_sample_j'), 4)} | {_fmt(m.get('power_mean_w'), 0)} / "
                       f"{_fmt(m.get('power_peak_w'), 0)} | {', '.join(r['regressed_gating']) or '-'} | "
                       f"{r['first_reason'] or '-'} |")
        base = runs.get("lm-base")
        if base:
            values = [x["energy_per_sample_j"] for x in base["launches"] if x["energy_per_sample_j"] is not None]
            s = spread(values)
            per = ", ".join(_fmt(v, 4) for v in values) or "-"
            cv = "-" if s is None else f"{s['cv'] * 100:.2f} %"
            offsets = ", ".join(_fmt(x["clock_offset_ms"], 1) for x in base["launches"])
            out += ["", f"Energy per sample of the baseline's launches: {per} J (CV {cv}); "
                        f"source: {base['launches'][0]['energy_source'] if base['launches'] else '-'}; "
                        f"trace window vs the workload's own clock: {offsets or '-'} ms.", ""]
    inf = [runs[t] for t in ("infer-eager", "infer-compiled", "infer-lost-compiled") if t in runs]
    if inf:
        out += ["## resnet_infer: eager vs compiled (per batch)", "",
                "| run | verdict (exit) | kernels/batch | graph launches/batch | CUDA API ms/batch | p50 ms | p99 ms | "
                "self-timed p50 / p99 ms | allocated MiB | regressed (gating) | first reason |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in inf:
            m = r["median"]
            out.append(f"| {r['what']} | {r['verdict']} ({r['exit_code']}) | {_fmt(m.get('kernels_per_batch'), 1)} | "
                       f"{_fmt(m.get('graph_launches_per_batch'), 1)} | {_fmt(m.get('cuda_api_ms_per_batch'), 2)} | "
                       f"{_fmt(m.get('step_time_ms'), 2)} | {_fmt(m.get('step_time_p99_ms'), 2)} | "
                       f"{_fmt(m.get('latency_ms_p50'), 2)} / {_fmt(m.get('latency_ms_p99'), 2)} | "
                       f"{_fmt(m.get(MEMORY[0]), 0)} | {', '.join(r['regressed_gating']) or '-'} | "
                       f"{r['first_reason'] or '-'} |")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    work, out = Path(argv[0]), Path(argv[1])
    runs = {}
    for tag in RUNS:
        report = work / tag / "perfgate-report.json"
        if not report.exists():
            continue
        code = (work / f"{tag}.exit").read_text().strip() if (work / f"{tag}.exit").exists() else None
        results = json.loads(report.read_text())["results"]
        if not tag.startswith("infer-"):
            runs[tag] = summarize(tag, results[0], code)
            continue
        for result in results:     # infer-eager, infer-compiled, infer-lost-compiled
            row = INFERENCE_ROWS.get((tag, result.get("name")))
            if row is not None:
                key = "infer-eager" if result["name"] == "resnet_infer" else \
                    ("infer-compiled" if tag == "infer-base" else "infer-lost-compiled")
                runs[key] = summarize(tag, result, code, row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(runs, indent=2, sort_keys=True) + "\n")
    text = markdown(runs)
    (out / "results.md").write_text(text)
    print(text)
    return 0 if runs else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

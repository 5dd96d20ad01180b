"""What ``launch_steadiness.py``'s results say about steadier launches (issue 41, item 6).

    python benchmarks/steadiness_analysis.py docs/measurements/data/steadiness-h200x2-call*-timm*.json
    python benchmarks/steadiness_analysis.py --longer docs/measurements/data/steadiness-h200-quiet-timm.json

Per file, program and variant: the launches, the sd of their log step times (about the CV). Over all
files, per variant against ``plain``: the pooled sd (each file's own mean taken out, so that lanes
and calls at other speeds do not count as noise) and a one-sided F test of plain's variance over the
variant's. With ``--longer``: from launches that kept their iteration periods, what the gated step
time's launch-to-launch CV would be for launches k times as long (k = 1, 2, 4, 8), each made by
joining the periods of k launches drawn at random without replacement (k launches' periods in a row
are one launch k times as long when the pace of one launch owes nothing to the next; a draw of k of
n launches without replacement understates the spread by about sqrt((n - k) / (n - 1))).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def steps(launches: list[dict]) -> np.ndarray:
    return np.log([launch["step_time_ms"] for launch in launches])


def variance_table(paths: list[Path]) -> str:
    lines = ["| file | program | variant | launches | sd of log step (≈ CV) |", "|---|---|---|---|---|"]
    pooled: dict[str, list[np.ndarray]] = {}
    for path in paths:
        for key, by_variant in json.loads(path.read_text()).items():
            for variant, launches in by_variant.items():
                x = steps(launches)
                if x.size < 2:
                    continue
                pooled.setdefault(variant, []).append(x - x.mean())
                lines.append(f"| {path.name} | {key} | {variant} | {x.size} | {x.std(ddof=1):.3f} |")
    sums = {v: (float(sum((x * x).sum() for x in xs)), sum(x.size - 1 for x in xs)) for v, xs in pooled.items()}
    if "plain" in sums:
        ss_plain, df_plain = sums["plain"]
        for variant, (ss, df) in sums.items():
            if variant == "plain" or df == 0:
                continue
            f = (ss_plain / df_plain) / (ss / df)
            lines.append(f"\npooled: plain sd {np.sqrt(ss_plain / df_plain):.3f} (df {df_plain}), {variant} sd "
                         f"{np.sqrt(ss / df):.3f} (df {df}); F = {f:.2f}, one-sided p = {stats.f.sf(f, df_plain, df):.3f}")
    return "\n".join(lines)


def longer_launches(paths: list[Path], draws: int, seed: int) -> str:
    from perfgate.analysis.periods import window_location

    lines = ["| launches | k | measured steps | CV of the gated step | CV of the mean period |", "|---|---|---|---|---|"]
    rng = np.random.default_rng(seed)
    for path in paths:
        for key, by_variant in json.loads(path.read_text()).items():
            for variant, launches in by_variant.items():
                periods = [np.asarray(launch["periods_ms"]) for launch in launches if launch.get("periods_ms")]
                for k in (1, 2, 4, 8):
                    if k > len(periods) // 2 and k > 1:
                        break
                    gated, means = [], []
                    for _ in range(draws):
                        p = np.concatenate([periods[i] for i in rng.choice(len(periods), k, replace=False)])
                        gated.append(window_location(p * 1e6, np.zeros(p.size, dtype=np.int64))[0] / 1e6)
                        means.append(p.mean())
                    g, m = np.asarray(gated), np.asarray(means)
                    lines.append(f"| {path.name} {key} {variant} ({len(periods)}) | {k} | {p.size} | "
                                 f"{100 * g.std() / g.mean():.1f} % | {100 * m.std() / m.mean():.1f} % |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--longer", action="store_true", help="the longer-launch table instead (needs periods_ms)")
    parser.add_argument("--draws", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(longer_launches(args.files, args.draws, args.seed) if args.longer else variance_table(args.files))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Gates at once on one machine, for many rounds (issue 30): each round starts GATES ``perfgate
run`` of a small NVTX workload together, all in one repository (``one``) or spread over two
(``two``), under the real nsys, and waits for them. A gate passes when it exits 0 (verdict NEW:
the repositories have no baseline, so the capture is what is tested); any other exit is counted
with the reason it printed. Captures perfgate took again after a transient nsys failure are
counted too, with nsys's words.

    python scripts/concurrent-gates.py --rounds 20 --gates 4 --layout one two
"""
from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TINY = '''
import time, torch
for _ in range(8):
    torch.cuda.nvtx.range_push("step"); time.sleep(0.01); torch.cuda.nvtx.range_pop()
'''
RETRY = re.compile(r"nsys failed \((.*)\); capturing again")


def project(root: Path) -> Path:
    (root / "wl").mkdir(parents=True)
    (root / "wl" / "tiny.py").write_text(TINY)
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'tiny'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\nlaunches = 1\ntimeout_s = 300\n")
    return root


def reason(out: str) -> str:
    for line in out.splitlines():
        if line.startswith(("error:", "perfgate: error:")):
            return line[:200]
    return out.strip().splitlines()[-1][:200] if out.strip() else "(no output)"


def one_round(roots: list[Path], gates: int) -> list[tuple[int, str]]:
    procs = [subprocess.Popen([sys.executable, "-m", "perfgate", "run", "tiny"], cwd=roots[i % len(roots)],
                              text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for i in range(gates)]
    return [(p.returncode, out) for p, out in ((p, p.communicate(timeout=900)[0]) for p in procs)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--gates", type=int, default=4)
    parser.add_argument("--layout", nargs="+", choices=("one", "two"), default=["one", "two"])
    args = parser.parse_args()
    failed_any = False
    for layout in args.layout:
        with tempfile.TemporaryDirectory(prefix=f"perfgate-concurrent-{layout}-") as tmp:
            roots = [project(Path(tmp) / f"repo-{r}") for r in range(1 if layout == "one" else 2)]
            passed_rounds, passed, retries, failures = 0, 0, collections.Counter[str](), collections.Counter[str]()
            started = time.monotonic()
            for r in range(1, args.rounds + 1):
                t0 = time.monotonic()
                results = one_round(roots, args.gates)
                ok = [code == 0 for code, _ in results]
                passed += sum(ok)
                passed_rounds += all(ok)
                for code, out in results:
                    retries.update(RETRY.findall(out))
                    if code != 0:
                        failures[f"exit {code}: {reason(out)}"] += 1
                print(f"{layout}: round {r}: {sum(ok)} of {args.gates} passed in {time.monotonic() - t0:.0f} s"
                      + ("" if all(ok) else f" ({'; '.join(reason(o) for c, o in results if c != 0)})"), flush=True)
            print(f"{layout}: {passed_rounds} of {args.rounds} rounds all passed, {passed} of {args.rounds * args.gates} "
                  f"gates passed, {time.monotonic() - started:.0f} s")
            for why, n in retries.most_common():
                print(f"  taken again {n}x: {why}")
            for why, n in failures.most_common():
                print(f"  failed {n}x: {why}")
            failed_any |= bool(failures)
    return 1 if failed_any else 0


if __name__ == "__main__":
    sys.exit(main())

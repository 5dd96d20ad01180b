"""Gates that run at once on one machine, under the real nsys: four ``perfgate run`` in one
repository, and four in two; two recordings of one baseline. (scripts/concurrent-gates.py runs
the first two for many rounds.)

nsys shares state between its sessions (``/dev/shm/NSys-<version>``, its agents); each capture has
its own TMPDIR (perfgate.capture.private_dir), a capture that failed for a transient nsys reason is taken
again, and a baseline's recording holds its folder's lock."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

TINY = '''
import time
''' + NVTX + '''for _ in range(8):
    nvtx.range_push("step"); time.sleep(0.01); nvtx.range_pop()
'''


def gate_project(root: Path) -> Path:
    (root / "wl").mkdir(parents=True)
    (root / "wl" / "tiny.py").write_text(TINY)
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'tiny'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\nlaunches = 1\ntimeout_s = 300\n")
    return root


def run_at_once(commands: list[tuple[Path, list[str]]]) -> list[subprocess.CompletedProcess[str]]:
    """Start every ``(cwd, perfgate args)`` at once; their results in order."""
    procs = [subprocess.Popen([sys.executable, "-m", "perfgate", *args], cwd=cwd, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for cwd, args in commands]
    try:
        outs = [p.communicate(timeout=600)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:    # the supervisor of each ends its tree when it dies
                p.kill()
                p.wait()
    return [subprocess.CompletedProcess(p.args, p.returncode, out, "") for p, out in zip(procs, outs)]


@pytest.mark.parametrize("repositories", [1, 2])
def test_four_gates_at_once_all_pass(tmp_path: Path, nsys_path: str, torch_module: object, repositories: int) -> None:
    roots = [gate_project(tmp_path / f"repo-{r}") for r in range(repositories)]
    results = run_at_once([(roots[i % repositories], ["run", "tiny"]) for i in range(4)])
    for result in results:
        assert result.returncode == 0, result.stdout
    runs = sorted(p for root in roots for p in (root / ".perfgate" / "runs").glob("*-tiny"))
    assert len(runs) == 4 and all((r / "launch-0" / "trace.sqlite").is_file() for r in runs)
    assert {json.loads((r / "result.json").read_text())["verdict"] for r in runs} == {"NEW"}   # no baseline yet


def test_two_recordings_of_one_baseline_at_once_one_records_the_other_says_why(
        tmp_path: Path, nsys_path: str, torch_module: object) -> None:
    root = gate_project(tmp_path / "repo")
    started = time.monotonic()
    results = run_at_once([(root, ["baseline", "update", "tiny"]), (root, ["baseline", "update", "tiny"])])
    assert time.monotonic() - started < 600
    codes = sorted(r.returncode for r in results)
    assert codes == [0, 2], [r.stdout for r in results]
    refused = next(r for r in results if r.returncode == 2).stdout
    assert "another perfgate process is recording a baseline in" in refused
    assert "baseline recorded" in next(r for r in results if r.returncode == 0).stdout
    (written,) = (root / "baselines" / "tiny").glob("*.json")
    assert json.loads(written.read_text())["workload"] == "tiny"
    assert [p.name for p in written.parent.iterdir()] == [written.name]   # no lock file left beside it

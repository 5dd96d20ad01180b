"""The adaptive gate end to end with the real nsys on the CPU: recording takes record_launches and
says what the noise lets it catch (not a comparison of the run with itself), an unchanged rerun
decides after one launch, a large slowdown is REGRESSED after one, and each launch and look is a
progress line in the pytest terminal while pytest captures the test output."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from test_plugin import PYPROJECT as FIXED_DESIGN
from test_plugin import TINY

# the plugin tests' project with the adaptive launch counts instead of a fixed design
PYPROJECT = FIXED_DESIGN.replace("launches = 1\n", "min_launches = 1\nmax_launches = 3\nrecord_launches = 3\n")


def write_project(root: Path, baselines: Path, tiny_args: tuple[str, ...] = ()) -> None:
    (root / "workloads").mkdir(exist_ok=True)
    (root / "workloads" / "tiny.py").write_text(TINY)
    (root / "pyproject.toml").write_text(PYPROJECT.format(baselines=baselines.as_posix(),
                                                          tiny_args=json.dumps(list(tiny_args)),
                                                          crashy_enabled="false"))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, nsys_path: str, torch_module: object) -> dict:
    root = tmp_path_factory.mktemp("adaptive")
    baselines = root / "baselines"
    write_project(root, baselines)
    proc = subprocess.run([sys.executable, "-m", "pytest", "--perfgate", "--perfgate-update-baselines", "-p",
                           "no:cacheprovider", "-rA"], cwd=root, capture_output=True, text=True, timeout=600)
    return {"root": root, "baselines": baselines, "proc": proc}


def test_recording_takes_record_launches_and_says_what_the_noise_allows(recorded: dict) -> None:
    proc = recorded["proc"]
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for k in (1, 2, 3):   # progress lines reach the terminal although pytest captures the item
        assert f"perfgate: tiny: launch {k} of 3 (recording): step " in out
    doc = json.loads(next(recorded["baselines"].glob("tiny/*.json")).read_text())
    assert len(doc["launches"]) == 3 and {l["capture"] for l in doc["launches"]} == {"timing"}
    assert doc["noise"]["metric"] == "step_time_ms" and 0 < doc["noise"]["launch_log_sd"] < 0.2
    assert "baseline recorded:" in out and "(3 launches); step_time_ms " in out
    assert "launch-to-launch noise " in out and "a slowdown is caught 9 times in 10 from +" in out
    assert " -> " not in out.split("baseline recorded:")[1].split("\n")[0]   # no run-vs-itself change


def test_unchanged_rerun_decides_after_one_launch(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, recorded["baselines"])
    result = pytester.runpytest_subprocess("--perfgate", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*perfgate: tiny: launch 1 of up to 3: step *",
                                 "*perfgate: tiny: after 1 launch: PASS: step_time_ms*[3 vs 1 launch*"])
    assert "launch 2 of up to 3" not in result.stdout.str()
    doc = json.loads(next((pytester.path / ".perfgate" / "runs").glob("*-tiny/result.json")).read_text())
    assert doc["extra"]["looks"][0]["launches"] == 1 and doc["extra"]["stopped"] == "decided"
    assert doc["extra"]["noise"]["n_baseline"] == 3 and doc["profile"] is None   # no GPU: no profile launch


def test_large_slowdown_is_regressed_after_one_launch(pytester: pytest.Pytester, recorded: dict) -> None:
    write_project(pytester.path, recorded["baselines"], ("--slow-phase", "forward", "--slow-ms", "80"))
    result = pytester.runpytest_subprocess("--perfgate", "-p", "no:cacheprovider", "-rf")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "perfgate: tiny: after 1 launch: REGRESSED" in out and "launch 2 of up to 3" not in out
    assert "phase.forward.cpu_ms" in out

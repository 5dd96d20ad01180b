"""What a baseline measured (perfgate.baselines.provenance): the files a workload runs, found by reading its
imports; their fingerprint; how a current run differs (code, command, record version, software),
a baseline without a fingerprint compared through git at its commit; ``perfgate baseline check``."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.baselines.provenance import Provenance, current, recorded_command, source_files, staleness, workload_threads
from perfgate.records.model import MachineInfo
from perfgate.records.staleness import Staleness
from git_repo import git as _git

MACHINE = MachineInfo(machine_class="cpu-x86_64", gpu_model=None, gpu_count=0, driver="580.1", cuda="13.0",
                      torch="2.11.0", nsys="2025.3.1")


def _repo(root: Path) -> Path:
    (root / "workloads").mkdir(parents=True)
    (root / "lib").mkdir()
    (root / "workloads" / "__init__.py").write_text("")
    (root / "workloads" / "train.py").write_text(
        "import json\nimport torch\nfrom workloads import _common\nfrom . import helpers\n"
        "def main():\n    from lib.models import Net   # imported where it is used\n    return Net\n"
        "if __name__ == \"__main__\":\n    main()\n")
    (root / "workloads" / "_common.py").write_text("import os\n")
    (root / "workloads" / "helpers.py").write_text("from ._common import *\n")
    (root / "workloads" / "unused.py").write_text("x = 1\n")
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "models.py").write_text("class Net: pass\n")
    (root / ".venv" / "lib").mkdir(parents=True)
    (root / ".venv" / "lib" / "json.py").write_text("")
    return root


def test_the_files_a_workload_runs_are_its_module_and_what_it_imports_from_the_repository(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    names = [p.relative_to(root).as_posix() for p in source_files(root, "workloads.train")]
    assert names == ["lib/__init__.py", "lib/models.py", "workloads/__init__.py", "workloads/_common.py",
                     "workloads/helpers.py", "workloads/train.py"]
    assert source_files(root, "torch") == ()                     # an installed module: nothing of the repository


def test_a_changed_added_or_removed_file_and_other_software_are_named(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    recorded = current(root, "workloads.train", ["--steps", "20"], MACHINE)
    assert recorded.command == "python -m workloads.train --steps 20"
    assert staleness(recorded, current(root, "workloads.train", ["--steps", "20"], MACHINE)).stale is False
    (root / "lib" / "models.py").write_text("class Net: width = 2\n")
    (root / "workloads" / "train.py").write_text("from lib import models\nimport workloads.extra\n")
    (root / "workloads" / "extra.py").write_text("")
    newer = MachineInfo(**{**vars(MACHINE), "torch": "2.12.0"})
    stale = staleness(recorded, current(root, "workloads.train", ["--steps", "30"], newer))
    assert stale.code == ("lib/models.py changed", "workloads/train.py changed", "workloads/extra.py added",
                          "workloads/_common.py removed", "workloads/helpers.py removed",
                          "command python -m workloads.train --steps 20 -> python -m workloads.train --steps 30")
    assert stale.environment == ("torch 2.11.0 -> 2.12.0",)
    assert stale.text().startswith("the baseline was recorded from other code: lib/models.py changed; ")
    assert stale.text().endswith("; torch 2.11.0 -> 2.12.0")
    # only the software: said as such; the software of another machine class is not compared
    same = current(root, "workloads.train", ["--steps", "20"], MACHINE)
    assert staleness(same, current(root, "workloads.train", ["--steps", "20"], newer)).text() == \
        "the baseline was recorded with other software: torch 2.11.0 -> 2.12.0"
    assert not staleness(same, current(root, "workloads.train", ["--steps", "20"], newer),
                           compare_software=False).stale
    assert Staleness.from_dict(stale.to_dict()) == stale


def test_the_record_reads_back_from_a_baseline_document(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    recorded = current(root, "workloads.train", [], MACHINE)
    doc = {"provenance": {"git_commit": "abc", **recorded.to_dict()}, "machine": vars(MACHINE)}
    back = Provenance.from_dict(doc["provenance"], doc["machine"])
    assert (back.command, back.sources, back.record_version, back.software) == \
        (recorded.command, recorded.sources, recorded.record_version, recorded.software)
    assert recorded_command("m", ["a b"], "torchrun", 2) == "torchrun --standalone --nproc-per-node=2 -m m 'a b'"


def test_the_cpu_threads_a_baseline_ran_with_are_part_of_what_it_measured(tmp_path: Path) -> None:
    """One torch thread against two moved a step 7x beside a busy process (docs/measurements/cpu-threads.md): a baseline
    recorded with other threads is stale; one that did not record them is not judged on them."""
    assert workload_threads(None, {}) == "default"
    assert workload_threads(None, {"OMP_NUM_THREADS": " 4 "}) == "4"
    assert workload_threads(1, {"OMP_NUM_THREADS": "4"}) == "1"       # the setting is what the workload gets
    root = _repo(tmp_path)
    recorded = current(root, "workloads.train", [], MACHINE, threads="default")
    now = current(root, "workloads.train", [], MACHINE, threads="1")
    assert staleness(recorded, now).environment == ("CPU threads default -> 1",)
    back = Provenance.from_dict(recorded.to_dict(), vars(MACHINE))
    assert back.threads == "default" and not staleness(back, recorded).stale
    older = Provenance.from_dict({k: v for k, v in recorded.to_dict().items() if k != "threads"}, vars(MACHINE))
    assert older.threads is None and not staleness(older, now).stale



@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_baseline_without_a_fingerprint_is_compared_at_its_git_commit(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-qm", "first")
    commit = _git(root, "rev-parse", "HEAD")
    legacy = Provenance(git_commit=commit, git_dirty=True, created_utc="2026-11-24T00:50:23Z")
    (root / "workloads" / "_common.py").write_text("import os, sys\n")
    stale = staleness(legacy, current(root, "workloads.train", [], MACHINE), root=root)
    assert stale.code == (f"workloads/_common.py changed since {commit[:7]}",)
    assert stale.text() == (f"the baseline was recorded from other code: workloads/_common.py changed since "
                            f"{commit[:7]} (recorded 2026-11-24 at {commit[:7]} from a tree with uncommitted "
                            "changes: its code is not known exactly)")
    # a commit the checkout does not hold (a shallow clone): the code is not known, and it says so
    unknown = staleness(Provenance(git_commit="0" * 40), current(root, "workloads.train", [], MACHINE), root=root)
    assert unknown.code == () and unknown.text().startswith("the baseline does not record which code it measured")


def test_baseline_check_lists_stale_baselines_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _repo(tmp_path)
    (root / "pyproject.toml").write_text("[tool.perfgate]\n")
    recorded = current(root, "workloads.train", [], None)
    folder = root / "baselines" / "train"
    folder.mkdir(parents=True)
    launch = {"metrics": {"step_time_ms": 10.0}, "step_durations_ms": [10.0]}
    doc = {"format": "perfgate-baseline", "version": 2, "workload": "train", "variant": None,
           "machine_class": "some-gpu-x1", "machine": {"gpu_count": 0}, "launches": [launch],
           "provenance": {"git_commit": None, **recorded.to_dict()}}
    (folder / "some-gpu-x1.json").write_text(json.dumps(doc))
    assert main(["baseline", "check", "--root", str(root)]) == 0
    assert "current" in capsys.readouterr().out
    (root / "workloads" / "helpers.py").write_text("from ._common import *  # edited\n")
    assert main(["baseline", "check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "stale" in out and "the baseline was recorded from other code: workloads/helpers.py changed" in out
    (folder / "broken.json").write_text("{")
    assert main(["baseline", "check", "--root", str(root)]) == 2

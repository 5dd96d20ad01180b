"""``perfgate init`` (issue 32): in a user's repository it finds the training scripts, writes the
``[tool.perfgate]`` table, ``baselines/``, a GPU-runner workflow and the ``.gitignore`` line, and
refuses to overwrite a table or a workflow without ``--force``. End to end: a fresh git repository
with a plain training loop is set up and gated under the real nsys with the commands README.md
shows, in its order."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from readme_commands import README, console_commands

from perfgate.cli import main
from perfgate.commands.init_repo import find_training_scripts, perfgate_table, training_evidence, without_perfgate_tables

TRAIN = '''"""A plain training loop: a tiny model on random data, DataLoader and optimizer, on the CPU."""
import torch
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(2048, 32), torch.randint(0, 4, (2048,)))
    loader = DataLoader(data, batch_size=32)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
'''
REPO = README.parent
HELPER = "import torch\n\n\ndef train_step(loss, optimizer):\n    loss.backward()\n    optimizer.step()\n"


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "train.py").write_text(TRAIN)
    (root / "src").mkdir()
    (root / "src" / "steps.py").write_text(HELPER)                     # only defines: a helper
    (root / "README.md").write_text("# a project\n")
    (root / "tests").mkdir()
    (root / "tests" / "check_train.py").write_text(TRAIN)              # tests are not searched
    (root / ".venv").mkdir()
    (root / ".venv" / "train.py").write_text(TRAIN)                    # nor environments
    return root


def test_training_evidence() -> None:
    assert training_evidence(TRAIN) == (".backward(", ".step(")
    assert training_evidence("from transformers import Trainer\nTrainer(model=m).train()\n") == ("Trainer(",)
    assert training_evidence("x.backward()\noptimizer.step()\n") == ()          # no torch import
    assert training_evidence("import torch\nprint(torch.ones(2))\n") == ()      # torch, no training


def test_finds_the_training_script_only(tmp_path: Path) -> None:
    scripts = find_training_scripts(_repo(tmp_path))
    assert [(s.path.as_posix(), s.module, s.name) for s in scripts] == [("train.py", "train", "train")]


def test_init_writes_the_table_baselines_workflow_and_gitignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _repo(tmp_path)
    (root / "pyproject.toml").write_text('[project]\nname = "p"\nversion = "0"\n\n[tool.ruff]\nline-length = 100\n')
    (root / ".gitignore").write_text("__pycache__/")
    assert main(["init", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "perfgate baseline update" in out and "perfgate run" in out
    data = tomllib.loads((root / "pyproject.toml").read_text())
    assert data["project"]["name"] == "p" and data["tool"]["ruff"] == {"line-length": 100}
    assert data["tool"]["perfgate"]["baseline_dir"] == "baselines"
    assert data["tool"]["perfgate"]["workloads"] == {"train": {"module": "train", "cpu_args": [], "gpu_args": []}}
    assert (root / "baselines").is_dir()
    assert (root / ".gitignore").read_text() == "__pycache__/\n.perfgate/\n"
    workflow = yaml.safe_load((root / ".github" / "workflows" / "perfgate.yml").read_text())
    triggers = workflow[True]   # YAML 1.1 reads the key `on` as true
    assert set(triggers) == {"push", "workflow_dispatch"}    # never a fork's pull request on the runner
    steps = workflow["jobs"]["gate"]["steps"]
    assert workflow["jobs"]["gate"]["runs-on"] == ["self-hosted", "linux", "x64", "gpu"]
    assert any("DEFAULT_BRANCH" in str(s.get("env", "")) and "git checkout" in s["run"] for s in steps)
    assert any(s.get("run") == "perfgate run --report-dir .perfgate/report" for s in steps)
    # the example's workflow, which tests/test_workflows.py lints with actionlint, step for step
    example = yaml.safe_load((REPO / "examples" / "plain-loop" / ".github" / "workflows" / "perfgate.yml").read_text())
    assert workflow == example
    assert main(["init", "--root", str(root), "--force"]) == 0     # --force: once more, the same result
    assert (root / ".gitignore").read_text().count(".perfgate/") == 1
    assert tomllib.loads((root / "pyproject.toml").read_text()) == data


def test_init_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _repo(tmp_path)
    (root / "pyproject.toml").write_text('[tool.perfgate]\nlaunches = 3\n\n[tool.perfgate.workloads.x]\nmodule = "x"\n')
    before = (root / "pyproject.toml").read_text()
    assert main(["init", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert f"perfgate: error: {root / 'pyproject.toml'}: already has a [tool.perfgate] table" in err and "--force" in err
    assert (root / "pyproject.toml").read_text() == before and not (root / ".github").exists()

    (root / "pyproject.toml").unlink()
    workflow = root / ".github" / "workflows" / "perfgate.yml"
    workflow.parent.mkdir(parents=True)
    workflow.write_text("name: mine\n")
    assert main(["init", "--root", str(root)]) == 2
    assert f"{workflow}: already exists; perfgate init --force replaces it" in capsys.readouterr().err
    assert workflow.read_text() == "name: mine\n" and not (root / "pyproject.toml").exists()
    assert main(["init", "--root", str(root), "--force"]) == 0
    assert "perfgate run" in workflow.read_text()


def test_dry_run_prints_the_table_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _repo(tmp_path)
    assert main(["init", "--root", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert tomllib.loads(out)["tool"]["perfgate"]["workloads"]["train"]["module"] == "train"
    assert not (root / "pyproject.toml").exists() and not (root / "baselines").exists()
    assert not (root / ".github").exists() and not (root / ".gitignore").exists()


def test_no_training_script_is_an_error_naming_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "hello.py").write_text("print('hello')\n")
    assert main(["init", "--root", str(tmp_path)]) == 2
    assert f"perfgate: error: {tmp_path}: no training script found" in capsys.readouterr().err


def test_force_replaces_only_perfgate_tables() -> None:
    text = ('[project]\nname = "p"\n\n[tool.perfgate]\nlaunches = 3\n\n[tool.perfgate.tolerance]\n'
            '"step_time*" = "5%"\n\n[tool.ruff]\nline-length = 100\n')
    kept = tomllib.loads(without_perfgate_tables(text))
    assert kept == {"project": {"name": "p"}, "tool": {"ruff": {"line-length": 100}}}
    assert "[tool.perfgate]" in perfgate_table([])


def test_readme_commands_gate_a_fresh_repository(tmp_path: Path, nsys_path: str, torch_module) -> None:
    """The README's console commands, in order, in a fresh git repository with a plain training loop,
    under the real nsys. Small launch counts and tolerances sized for a shared 2-core machine: the
    unchanged rerun must not fail (PASS, or INCONCLUSIVE where the machine was noisy)."""
    root = _repo(tmp_path)
    env = {**os.environ, "PERFGATE_NSYS": nsys_path}
    quick = {("baseline", "update"): ["--record-launches", "2"],
             ("run",): ["--max-launches", "2", "--tolerance", "step_time_ms=200%",
                        "--tolerance", "step_time_mean_ms=200%", "--tolerance", "phase.*=off"]}
    commands = console_commands()
    assert [c[:3] for c in commands if c[0] == "perfgate"][:4] == [
        ["perfgate", "init"], ["perfgate", "list"], ["perfgate", "baseline", "update"], ["perfgate", "run"]]
    for command in commands:
        extra = next((v for k, v in quick.items() if tuple(command[1:1 + len(k)]) == k), [])
        argv = ([sys.executable, "-m", "perfgate", *command[1:], *extra] if command[0] == "perfgate" else command)
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{' '.join(command)}: exit {done.returncode}\n{done.stdout}\n{done.stderr}"
        if command[:2] == ["perfgate", "list"]:
            assert done.stdout.split()[0] == "train"
    baseline = root / "baselines" / "train"
    assert [p.suffix for p in baseline.iterdir()] == [".json"]
    staged = subprocess.run(["git", "diff", "--cached", "--name-only"], cwd=root, capture_output=True, text=True,
                            check=True).stdout.split()
    assert f"baselines/train/{next(baseline.iterdir()).name}" in staged and ".github/workflows/perfgate.yml" in staged
    report = json.loads((root / ".perfgate" / "report" / "perfgate-report.json").read_text())
    verdicts = [r["verdict"] for r in report["results"]]
    assert verdicts and all(v in ("PASS", "INCONCLUSIVE") for v in verdicts), verdicts

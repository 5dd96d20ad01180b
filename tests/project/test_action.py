"""perfgate's Action (action.yml, issue 44): its inputs are documented and reach its scripts only
through the environment, and a fresh repository set up by ``perfgate init`` is gated through the
Action's own steps, run as the runner runs a composite action (each ``run`` under bash in the
checkout, ``if:`` conditions, ``GITHUB_ENV``/``GITHUB_PATH``/``GITHUB_OUTPUT`` carried between
steps), under the real nsys."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from plain_training import TRAIN
from layout import REPO

ACTION = REPO / "action.yml"
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")

SLOWER = ("        loss = torch.nn.functional.cross_entropy(model(x), y)\n",
          "        time.sleep(0.02)\n        loss = torch.nn.functional.cross_entropy(model(x), y)\n")


def _action() -> dict:
    return yaml.safe_load(ACTION.read_text())


# --------------------------------------------------------------------------- a composite action, run


@dataclass
class Run:
    """What the steps of one run of the Action left: each step's exit status (None: skipped), the
    step outputs, the environment and PATH entries they added, and everything they printed."""

    status: dict[str, int | None] = field(default_factory=dict)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    path: list[str] = field(default_factory=list)
    printed: str = ""


def _pairs(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of a GITHUB_ENV/GITHUB_OUTPUT file (no multi-line values here)."""
    text = path.read_text() if path.exists() else ""
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def _value(expression: str, context: dict) -> object:
    """One ``${{ }}`` expression of the kinds action.yml uses: a context path (inputs.x,
    steps.id.outputs.y, github.a.b), ``always()``, ``==``/``!=`` against a quoted string, ``&&``."""
    def lookup(match: re.Match) -> str:
        value: object = context
        for part in match.group(0).split("."):
            value = value.get(part, "") if isinstance(value, dict) else ""
        return repr(value)

    python = re.sub(r"\b(?:inputs|steps|github)(?:\.[\w-]+)+", lookup, expression)
    python = python.replace("always()", "True").replace("&&", " and ").replace("||", " or ")
    return eval(python, {"__builtins__": {}}, {})  # noqa: S307 - the expressions of our own action.yml


def _substituted(text: str, context: dict) -> str:
    return EXPRESSION.sub(lambda m: str(_value(m.group(1), context)), text)


def run_action(inputs: dict[str, str], cwd: Path, env: dict[str, str], github: dict, tmp: Path) -> Run:
    """The Action's steps in ``cwd`` as a runner runs them: defaults for the inputs not given, each
    step's ``if`` (a failed step skips the rest but for ``always()``), its ``env`` and its ``run``
    under ``bash -e -o pipefail``; GITHUB_ENV and GITHUB_PATH reach the later steps."""
    action = _action()
    given = {name: inputs.get(name, spec.get("default", "")) for name, spec in action["inputs"].items()}
    run = Run()
    context = {"inputs": {}, "steps": run.outputs, "github": github}
    context["inputs"] = {k: _substituted(str(v), context) for k, v in given.items()}
    failed = False
    for k, step in enumerate(action["runs"]["steps"]):
        name = step.get("id", f"step{k}")
        condition = str(step.get("if", "success()"))
        wanted = "always()" in condition or not failed
        if wanted and step.get("if") is not None:
            wanted = bool(_value(condition, context))
        if not wanted:
            run.status[step["name"]] = None
            continue
        files = {var: tmp / f"{name}.{var.lower()}" for var in ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT")}
        for f in files.values():
            f.write_text("")
        step_env = {**env, **run.env, **{k: str(v) for k, v in files.items()},
                    "PATH": os.pathsep.join([*reversed(run.path), env["PATH"]]), "GITHUB_ACTION_PATH": str(REPO),
                    **{k: _substituted(str(v), context) for k, v in (step.get("env") or {}).items()}}
        assert step["shell"] == "bash"
        done = subprocess.run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", step["run"]], cwd=cwd,
                              env=step_env, capture_output=True, text=True, timeout=900)
        run.printed += f"--- {step['name']} (exit {done.returncode})\n{done.stdout}{done.stderr}"
        run.status[step["name"]] = done.returncode
        failed = failed or done.returncode != 0
        run.env.update(_pairs(files["GITHUB_ENV"]))
        run.path += [line for line in files["GITHUB_PATH"].read_text().splitlines() if line]
        run.outputs[name] = {"outputs": _pairs(files["GITHUB_OUTPUT"])}
    return run


# --------------------------------------------------------------------------- the metadata


def test_every_input_is_described_and_in_the_readme() -> None:
    action = _action()
    readme = (REPO / "README.md").read_text()
    assert action["runs"]["using"] == "composite"
    for name, spec in action["inputs"].items():
        assert spec.get("description"), f"input {name} has no description"
        assert f"`{name}`" in readme, f"README.md does not document the Action's input {name}"
    for name, spec in action["outputs"].items():
        assert spec.get("description") and f"`{name}`" in readme, name


def test_workflows_that_use_the_action_give_only_its_inputs() -> None:
    """actionlint (tests/project/test_workflows.py) cannot read a remote action's inputs: the ``with:`` given
    to perfgate's Action in the example's workflow (perfgate init's) is checked against action.yml."""
    declared = set(_action()["inputs"])
    example = REPO / "examples" / "plain-loop" / ".github" / "workflows" / "perfgate.yml"
    uses = [s for job in yaml.safe_load(example.read_text())["jobs"].values() for s in job["steps"]
            if s.get("uses", "").startswith("OWNER/perfgate@")]
    assert len(uses) == 1 and set(uses[0].get("with") or {}) <= declared
    assert declared == {"workloads", "args", "baselines", "install", "report-dir", "post-status", "comment",
                        "github-token"}            # the README's list (test above) names each


def test_inputs_reach_the_scripts_only_through_the_environment() -> None:
    """``${{ inputs.x }}`` spliced into a ``run`` is script injection (a workload name with a quote
    would run); every ``run`` of the Action is free of expressions, and the token reaches only the
    status step."""
    steps = _action()["runs"]["steps"]
    assert [s["name"] for s in steps if EXPRESSION.search(s["run"])] == []
    token = [s["name"] for s in steps if "github-token" in str(s.get("env", ""))]
    assert token == ["Post to GitHub"]


def test_the_expression_reader_can_fail() -> None:
    """The runner above decides the steps' conditions itself: it reads a false condition as false."""
    context = {"inputs": {"install": "none"}, "steps": {"gate": {"outputs": {"status": "0"}}}, "github": {}}
    assert _value("inputs.install == 'action'", context) is False
    assert _value("steps.gate.outputs.status != '0'", context) is False
    assert _value("always() && inputs.install == 'none'", context) is True
    assert _substituted("${{ steps.gate.outputs.status }}-${{ github.nothing }}", context) == "0-"


# --------------------------------------------------------------------------- end to end


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=a", "-c", "user.email=a@b", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_fresh_repository_set_up_by_init_is_gated_through_the_actions_steps(
        tmp_path: Path, nsys_path: str, torch_module) -> None:
    """A repository with a plain training loop, set up by ``perfgate init`` and its baseline recorded
    on main; a branch slows the loop by 20 ms a step and tries to move its own goalposts (deletes the
    baseline). The Action's steps on the branch: main's baselines come back, the base of the change is
    main, the gate says REGRESSED and the last step fails the job; the job summary, the annotations
    and the report files are there."""
    root = tmp_path / "project"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / "train.py").write_text(TRAIN)
    env = {**os.environ, "PERFGATE_NSYS": nsys_path, "PERFGATE_THREADS": "1"}
    env.pop("GITHUB_ACTIONS", None)
    perfgate = [sys.executable, "-m", "perfgate"]
    for command in (["init"], ["baseline", "update", "--record-launches", "2"]):
        done = subprocess.run([*perfgate, *command], cwd=root, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"
    workflow = yaml.safe_load((root / ".github" / "workflows" / "perfgate.yml").read_text())
    assert any(s.get("uses", "").startswith("OWNER/perfgate@") for s in workflow["jobs"]["gate"]["steps"])
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "perfgate")
    main = _git(root, "rev-parse", "HEAD")
    _git(root, "update-ref", "refs/remotes/origin/main", main)
    _git(root, "checkout", "-q", "-b", "slower")
    (root / "train.py").write_text(TRAIN.replace("import torch\n", "import time\n\nimport torch\n", 1)
                                   .replace(*SLOWER))
    _git(root, "rm", "-q", "-r", "baselines")
    _git(root, "commit", "-q", "-am", "slower")

    summary = tmp_path / "summary.md"
    steps_env = {**env, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    github = {"event": {"repository": {"default_branch": "main"}, "before": main}, "token": "not-used"}
    run = run_action({"install": "none", "post-status": "false", "comment": "false", "args": "--max-launches 2"},
                     root, steps_env, github, tmp_path)
    assert run.status == {"Use the default branch's baselines": 0, "The base of the change": 0,
                          "Install perfgate": None, "Run the gate": 0, "Post to GitHub": None,
                          "Fail when the gate did": 1}, run.printed
    assert (root / "baselines" / "train").is_dir()                  # main's baseline judged the branch
    assert run.env["PERFGATE_CONFIRM_BASE"] == "origin/main"
    gate = run.outputs["gate"]["outputs"]
    assert gate["verdict"] == "REGRESSED" and gate["status"] == "1", run.printed
    assert gate["sha"] == _git(root, "rev-parse", "HEAD")
    report = root / gate["report"]
    assert report.is_file() and {"junit.xml", "pr-comment.md", "summary.md"} <= {p.name for p in report.parent.iterdir()}
    text = summary.read_text()
    assert "REGRESSED" in text and "```mermaid" in text              # the job summary, with its charts
    assert "::error" in run.printed                                  # the annotations
    assert "perfgate run exited 1" in run.printed

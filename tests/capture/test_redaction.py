"""No secret in any artifact, and no trace lost for it, with the real nsys.

nsys records the environment of the process that launched it (and of other processes), even when
nsys and the workload run with a scrubbed environment: the control capture below shows it. The
tests plant a token, a password inside a URL and a webhook in the environment that launches the
gate, and check every byte of every file under the artifacts and report folders, for a
successful and a crashed launch, while the trace stays usable (the .sqlite analyses, the
.nsys-rep exports again with its NVTX ranges).
"""
from __future__ import annotations

import json
import os
import secrets as pysecrets
import sqlite3
import string
import subprocess
import sys
from pathlib import Path

import pytest
from cpu_nvtx import NVTX

from nsys_run import run_supervised
from perfgate.capture.redaction.launch_folder import clean_artifacts
from perfgate.capture.redaction.nsys_rep import mask_bytes
from perfgate.system.secrets import REDACTED, find_secrets, redact_text, scrubbed_environment
from perfgate.capture.redaction.sqlite_export import scan_sqlite

# plants secrets while nsys runs: no other test's nsys may record them (nsys records other processes'
# environments)
pytestmark = pytest.mark.nsys_alone

ALNUM = string.ascii_letters + string.digits
TOKEN = "ghp_" + "".join(pysecrets.choice(ALNUM) for _ in range(36))
PASSWORD = "pw" + "".join(pysecrets.choice(ALNUM) for _ in range(14))
INDEX_URL = f"https://ci-user:{PASSWORD}@pypi.example.com/simple"
WEBHOOK = "https://hooks.slack.com/services/T0000/B0000/" + "".join(pysecrets.choice(ALNUM) for _ in range(24))
PLANTED = {"GITHUB_TOKEN": TOKEN, "PIP_EXTRA_INDEX_URL": INDEX_URL, "SLACK_WEBHOOK_URL": WEBHOOK}
NEEDLES = (TOKEN, PASSWORD, WEBHOOK.rsplit("/", 1)[1])

TINY = '''
import sys, time
''' + NVTX + '''for _ in range(6):
    nvtx.range_push("step")
    for phase, ms in (("data_load", 2), ("forward", 5)):
        nvtx.range_push(phase); time.sleep(ms / 1000); nvtx.range_pop()
    nvtx.range_pop()
if "--crash" in sys.argv:
    print("RuntimeError: simulated crash", file=sys.stderr)
    sys.exit(3)
'''


def _leaks(folder: Path, window: int = 8) -> dict[str, list[str]]:
    """File -> the planted secrets of which its bytes hold ``window`` characters in a row (UTF-8 or
    UTF-16-LE): the whole secret, or a piece a compressed report kept."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        hits = [n for n in NEEDLES if any(n[i:i + window].encode(enc) in data for i in range(len(n) - window + 1)
                                          for enc in ("utf-8", "utf-16-le"))]
        if hits:
            out[str(path.relative_to(folder))] = hits
    return out


# ----------------------------------------------------------------------------- recognising


def test_environment_blocks_of_both_nsys_versions_lose_their_secret_values() -> None:
    nul = f"HOME=/root\0GITHUB_TOKEN={TOKEN}\0PIP_EXTRA_INDEX_URL={INDEX_URL}\0SHORT_PASSWORD=abc"
    assert redact_text(nul).split("\0") == [
        "HOME=/root", f"GITHUB_TOKEN={REDACTED}", f"PIP_EXTRA_INDEX_URL=https://ci-user:{REDACTED}@pypi.example.com/simple",
        f"SHORT_PASSWORD={REDACTED}"]
    semicolons = f"IS_SANDBOX=yes;SLACK_WEBHOOK_URL={WEBHOOK};PATH=/usr/bin:/bin;LANG=C.UTF-8"
    assert redact_text(semicolons) == f"IS_SANDBOX=yes;SLACK_WEBHOOK_URL={REDACTED};PATH=/usr/bin:/bin;LANG=C.UTF-8"


def test_credentials_are_recognised_by_shape_in_free_text() -> None:
    text = (f"curl -H 'Authorization: Bearer {TOKEN[4:]}' {WEBHOOK} "
            f"https://acct.blob.core.windows.net/c/f?sv=2024&sig={PASSWORD} git clone {INDEX_URL}")
    cleaned = redact_text(text)
    assert not any(n in cleaned for n in (TOKEN[4:], PASSWORD, WEBHOOK))
    assert "https://ci-user:[REDACTED]@pypi.example.com/simple" in cleaned and "sv=2024" in cleaned
    assert redact_text("max_len=512 lr=0.1 https://pypi.org/simple PATH=/usr/bin") == \
        "max_len=512 lr=0.1 https://pypi.org/simple PATH=/usr/bin"


def test_masking_keeps_the_length_and_finds_a_context_split_by_compression() -> None:
    [found] = [f for f in find_secrets(f"TOKEN_X={TOKEN}") if f.context.startswith("TOKEN_X")]
    literal = b"\x01\x02" + f"TOKEN_X={TOKEN}".encode() + b"\x03"
    assert mask_bytes(literal, [found], []) == b"\x01\x02TOKEN_X=" + b"*" * len(TOKEN) + b"\x03"
    split = b"\x01" + f"TOKEN_X={TOKEN[:-6]}".encode() + b"\xf0\x0b" + TOKEN[-6:].encode()  # a back-reference
    masked = mask_bytes(split, [found], [])
    assert len(masked) == len(split) and TOKEN[:-6].encode() not in masked


# ----------------------------------------------------------------------------- real captures


def _launch_like_perfgate(nsys: str, workdir: Path, planted: dict[str, str]) -> Path:
    """A launcher process holding the secrets runs nsys with a scrubbed environment, as perfgate does."""
    workdir.mkdir(parents=True)
    (workdir / "tiny.py").write_text(TINY)
    launcher = (
        "import os, subprocess, sys\n"
        "from perfgate.system.secrets import scrubbed_environment\n"
        f"cmd = [{nsys!r}, 'profile', '--trace=nvtx,osrt', '--sample=none', '--cpuctxsw=none', '--export=sqlite',\n"
        f"       '-o', 'trace', '-f', 'true', sys.executable, 'tiny.py']\n"
        "sys.exit(subprocess.run(cmd, env=scrubbed_environment(os.environ), capture_output=True).returncode)\n")
    proc = run_supervised([sys.executable, "-c", launcher], cwd=workdir, env={**os.environ, **planted}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return workdir


@pytest.fixture(scope="module")
def raw_capture(nsys_path: str, torch_module: object, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _launch_like_perfgate(nsys_path, tmp_path_factory.mktemp("redaction") / "raw", PLANTED)


def test_control_nsys_records_the_launchers_secrets_despite_a_scrubbed_environment(
        raw_capture: Path, nsys_path: str, tmp_path: Path) -> None:
    assert set(_leaks(raw_capture).get("trace.sqlite", [])) == set(NEEDLES)
    again = tmp_path / "again.sqlite"   # the report itself holds them too
    subprocess.run([nsys_path, "export", "--type", "sqlite", "-o", str(again), str(raw_capture / "trace.nsys-rep")],
                   check=True, capture_output=True)
    assert set(_leaks(tmp_path).get("again.sqlite", [])) == set(NEEDLES)


def test_cleaning_leaves_no_secret_and_keeps_both_traces_usable(raw_capture: Path, nsys_path: str,
                                                                 tmp_path: Path) -> None:
    from perfgate.trace.export import load_trace

    run = tmp_path / "run"
    subprocess.run(["cp", "-r", str(raw_capture), str(run)], check=True)
    done = clean_artifacts(run, [], Path(nsys_path))
    assert _leaks(run) == {}
    if done.withheld:   # about 1 capture in 250 here: the compression's choices defeat the masking
        assert [p.name for p in done.withheld] == ["trace.nsys-rep.withheld.txt"], done.withheld
        run = _launch_like_perfgate(nsys_path, tmp_path / "second", PLANTED)   # a fresh capture, once
        done = clean_artifacts(run, [], Path(nsys_path))
        assert _leaks(run) == {}
    assert done.withheld == [] and {p.name for p in done.redacted} == {"trace.sqlite", "trace.nsys-rep"}
    assert scan_sqlite(run / "trace.sqlite") == []
    names = set(load_trace(run / "trace.sqlite").nvtx["name"])
    assert {"step", "data_load", "forward"} <= names
    again = tmp_path / "again.sqlite"
    subprocess.run([nsys_path, "export", "--type", "sqlite", "-o", str(again), str(run / "trace.nsys-rep")],
                   check=True, capture_output=True)
    assert _leaks(tmp_path) == {}
    with sqlite3.connect(again) as db:
        assert {r[0] for r in db.execute("SELECT text FROM NVTX_EVENTS WHERE text IS NOT NULL")} >= names
        blocks = [v for (v,) in db.execute("SELECT value FROM StringIds") if "GITHUB_TOKEN=" in v]
    masked = [e.split("=", 1)[1] for b in blocks for e in b.split("\0") if e.startswith("GITHUB_TOKEN=")]
    assert masked and all(len(m) == len(TOKEN) and m.count("*") >= len(TOKEN) - 8 for m in masked)


def _gate_project(root: Path) -> Path:
    (root / "wl").mkdir(parents=True)
    (root / "wl" / "tiny.py").write_text(TINY)
    (root / "wl" / "crash.py").write_text(TINY.replace('"--crash" in sys.argv', "True"))
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'tiny'\n\n[tool.perfgate]\nworkloads_dir = 'wl'\nlaunches = 1\nwarmup_steps = 1\n")
    return root


@pytest.mark.parametrize("workload, code", [("tiny", 0), ("crash", 2)])
def test_a_token_in_the_gates_environment_reaches_no_artifact_or_report(
        tmp_path: Path, nsys_path: str, torch_module: object, workload: str, code: int) -> None:
    root = _gate_project(tmp_path)
    gate = subprocess.run([sys.executable, "-m", "perfgate", "run", workload], cwd=root, text=True,
                          capture_output=True, env={**os.environ, **PLANTED}, timeout=600)
    assert gate.returncode == code, gate.stdout + gate.stderr
    assert not any(n in gate.stdout + gate.stderr for n in NEEDLES)
    assert _leaks(root / ".perfgate") == {}
    [launch] = list((root / ".perfgate" / "runs").glob("*/launch-0"))
    files = sorted(p.name for p in launch.iterdir())
    if "trace.nsys-rep.withheld.txt" in files:   # the documented fallback (about 1 capture in 250 here)
        assert (launch / "trace.nsys-rep.withheld.txt").read_text().startswith("perfgate withheld trace.nsys-rep")
        files[files.index("trace.nsys-rep.withheld.txt")] = "trace.nsys-rep"
    # a launch that was analysed also holds its steps for Perfetto (made from the redacted export)
    assert files == ["command.txt", *(["steps.trace.json"] if code == 0 else []), "trace.nsys-rep", "trace.sqlite",
                     "workload.log"]
    assert scrubbed_environment(PLANTED) == {}
    if code == 2:
        report = json.loads((root / ".perfgate" / "report" / "perfgate-report.json").read_text())
        assert "exited with code 3" in report["results"][0]["error"]
    analyzed = subprocess.run([sys.executable, "-m", "perfgate", "analyze", str(launch / "trace.sqlite"),
                               "--format", "json", "--warmup-steps", "0"], capture_output=True, text=True, timeout=120)
    assert analyzed.returncode == 0 and json.loads(analyzed.stdout)["steps"]["count"] >= 4

"""Secrets stay out of artifacts: scrubbed environments, artifact scans, withholding.

The capture tests run the real nsys twice (scrubbed and, as a control that proves the check can
fail, unscrubbed) on a tiny script with NVTX ranges, sharing both captures module-wide.
"""
from __future__ import annotations

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
from perfgate.system.secrets import (
    WITHHELD_SUFFIX, is_secret_name, scan_artifacts, scrubbed_environment, secret_values, withhold,
    withhold_secrets,
)

ALNUM = string.ascii_letters + string.digits
FAKE_GITHUB_TOKEN = "ghp_" + "".join(pysecrets.choice(ALNUM) for _ in range(36))
FAKE_API_KEY = "".join(pysecrets.choice(ALNUM) for _ in range(32))
HARMLESS_MARKER = "marker-" + "".join(pysecrets.choice(ALNUM) for _ in range(16))

SCRIPT = """
""" + NVTX + """for _ in range(3):
    nvtx.range_push("step")
    nvtx.range_push("forward")
    nvtx.range_pop()
    nvtx.range_pop()
"""


# ----------------------------------------------------------------------------- names and values


@pytest.mark.parametrize("name", [
    "GITHUB_TOKEN", "GH_TOKEN", "NPM_TOKEN", "HF_TOKEN", "WANDB_API_KEY", "MY_API_KEY", "DB_PASSWORD",
    "MYSQL_PASSWD", "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "AZURE_CLIENT_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN", "SSH_KEY", "SIGNING_KEYS", "BASIC_AUTH", "CLIENT_SECRET",
])
def test_credential_names_are_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", [
    "PATH", "HOME", "PWD", "PYTHONHASHSEED", "KEYBOARD_LAYOUT", "TOKENIZERS_PARALLELISM",
    "CUDA_VISIBLE_DEVICES", "GITHUB_SHA", "GITHUB_REPOSITORY", "GIT_AUTHOR_NAME", "LD_LIBRARY_PATH",
    "MONKEY_PATCH", "HOTKEYS", "OMP_NUM_THREADS",
])
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


def test_scrubbing_drops_secret_names_and_token_values_and_keeps_the_rest() -> None:
    env = {"PATH": "/usr/bin", "GITHUB_TOKEN": FAKE_GITHUB_TOKEN, "MY_API_KEY": FAKE_API_KEY,
           "INNOCENT_LOOKING": "sk-" + "a" * 40, "SLACK_HOOK": "xoxb-1234567890-abcdef",
           "AWS_ID_IN_DISGUISE": "AKIAABCDEFGHIJKLMNOP", "PYTHONHASHSEED": "0"}
    assert scrubbed_environment(env) == {"PATH": "/usr/bin", "PYTHONHASHSEED": "0"}


def test_keep_passes_a_listed_variable_and_drop_removes_a_listed_one() -> None:
    env = {"PATH": "/usr/bin", "SSH_KEY_PATH_HINT": "/etc/x", "BUILD_LABEL": "nightly"}
    out = scrubbed_environment(env, keep=["SSH_KEY_PATH_HINT"], drop=["BUILD_LABEL"])
    assert out == {"PATH": "/usr/bin", "SSH_KEY_PATH_HINT": "/etc/x"}


def test_secret_values_lists_removed_values_of_searchable_length_only() -> None:
    env = {"GITHUB_TOKEN": FAKE_GITHUB_TOKEN, "SHORT_TOKEN": "abc", "HOME": "/root",
           "MY_API_KEY": FAKE_API_KEY}
    assert secret_values(env) == [FAKE_GITHUB_TOKEN, FAKE_API_KEY]


# ----------------------------------------------------------------------------- scanning files


def test_scan_finds_utf8_and_utf16_copies_and_ignores_clean_files(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "log.txt").write_text(f"env: TOKEN={FAKE_GITHUB_TOKEN}\n")
    (tmp_path / "sub" / "wide.bin").write_bytes(b"\x00\x01" + FAKE_API_KEY.encode("utf-16-le"))
    (tmp_path / "clean.txt").write_text("nothing to see")
    hits = scan_artifacts(tmp_path, [FAKE_GITHUB_TOKEN, FAKE_API_KEY])
    assert hits == [tmp_path / "log.txt", tmp_path / "sub" / "wide.bin"]


def test_scan_finds_a_secret_split_across_read_chunks(tmp_path: Path) -> None:
    from perfgate.system.secrets import file_contains

    path = tmp_path / "big.bin"
    path.write_bytes(b"x" * 1000 + FAKE_GITHUB_TOKEN.encode() + b"y" * 10)
    assert file_contains(path, [FAKE_GITHUB_TOKEN.encode()], chunk_bytes=1010)
    assert not file_contains(path, [FAKE_API_KEY.encode()], chunk_bytes=1010)


def test_withhold_replaces_the_file_by_a_note_and_warns(tmp_path: Path) -> None:
    leaky = tmp_path / "trace.sqlite"
    leaky.write_bytes(FAKE_GITHUB_TOKEN.encode())
    with pytest.warns(UserWarning, match="withheld"):
        note = withhold(leaky)
    assert not leaky.exists()
    assert note.name == "trace.sqlite" + WITHHELD_SUFFIX
    assert "trace.sqlite" in note.read_text() and FAKE_GITHUB_TOKEN not in note.read_text()
    assert scan_artifacts(tmp_path, [FAKE_GITHUB_TOKEN]) == []


# ----------------------------------------------------------------------------- real captures


def _capture(nsys: str, workdir: Path, env: dict[str, str]) -> Path:
    workdir.mkdir(parents=True)
    script = workdir / "tiny.py"
    script.write_text(SCRIPT)
    cmd = [nsys, "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
           "--export=sqlite", "-o", str(workdir / "trace"), "-f", "true", sys.executable, str(script)]
    proc = run_supervised(cmd, env=env, cwd=workdir, timeout=300)
    (workdir / "workload.log").write_bytes(proc.stdout + proc.stderr)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    assert (workdir / "trace.nsys-rep").is_file() and (workdir / "trace.sqlite").is_file()
    return workdir


@pytest.fixture(scope="module")
def captures(nsys_path: str, torch_module: object, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two real captures with the fake secrets in the environment: scrubbed and unscrubbed."""
    env = dict(os.environ, GITHUB_TOKEN=FAKE_GITHUB_TOKEN, MY_API_KEY=FAKE_API_KEY,
               PERFGATE_TEST_MARKER=HARMLESS_MARKER)
    root = tmp_path_factory.mktemp("secret-captures")
    return {
        "scrubbed": _capture(nsys_path, root / "scrubbed", scrubbed_environment(env)),
        "control": _capture(nsys_path, root / "control", env),
    }


def _sqlite_text(path: Path) -> str:
    """Every text value in every table of an SQLite file, joined."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        parts = []
        for table in tables:
            for row in conn.execute(f'SELECT * FROM "{table}"'):
                parts += [v for v in row if isinstance(v, str)]
        return "\n".join(parts)
    finally:
        conn.close()


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_unscrubbed_control_capture_records_the_token_in_its_sqlite(captures: dict[str, Path]) -> None:
    text = _sqlite_text(captures["control"] / "trace.sqlite")
    assert FAKE_GITHUB_TOKEN in text and FAKE_API_KEY in text
    hits = scan_artifacts(captures["control"], [FAKE_GITHUB_TOKEN, FAKE_API_KEY])
    assert captures["control"] / "trace.sqlite" in hits
    assert captures["control"] / "trace.nsys-rep" in hits  # via its export, whatever its bytes say


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_scrubbed_capture_has_the_secrets_in_no_file(captures: dict[str, Path]) -> None:
    run_dir = captures["scrubbed"]
    text = _sqlite_text(run_dir / "trace.sqlite")
    assert HARMLESS_MARKER in text  # nsys did record the (scrubbed) environment
    assert "forward" in text  # and the NVTX ranges
    assert FAKE_GITHUB_TOKEN not in text and FAKE_API_KEY not in text
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file()):
        data = path.read_bytes()
        for secret in (FAKE_GITHUB_TOKEN, FAKE_API_KEY):
            assert secret.encode() not in data, path
            assert secret.encode("utf-16-le") not in data, path
    assert scan_artifacts(run_dir, [FAKE_GITHUB_TOKEN, FAKE_API_KEY]) == []


@pytest.mark.nsys_alone   # a planted secret: no other nsys may run (nsys records others' environments)
def test_withholding_the_control_run_leaves_no_secret_behind(captures: dict[str, Path],
                                                             tmp_path: Path) -> None:
    run_dir = tmp_path / "control-copy"
    subprocess.run(["cp", "-r", str(captures["control"]), str(run_dir)], check=True)
    with pytest.warns(UserWarning):
        notes = withhold_secrets(run_dir, [FAKE_GITHUB_TOKEN, FAKE_API_KEY])
    assert {n.name for n in notes} >= {"trace.sqlite" + WITHHELD_SUFFIX, "trace.nsys-rep" + WITHHELD_SUFFIX}
    assert not (run_dir / "trace.sqlite").exists() and not (run_dir / "trace.nsys-rep").exists()
    assert (run_dir / "tiny.py").exists()  # clean files stay
    assert scan_artifacts(run_dir, [FAKE_GITHUB_TOKEN, FAKE_API_KEY]) == []


def test_secret_values_skips_paths_and_values_a_public_variable_also_holds():
    # AWS_CA_BUNDLE is removed from the environment (its name is secret-looking) but its value, a
    # CA bundle path that SSL_CERT_FILE holds too, must not make every artifact "contain a secret".
    env = {
        "AWS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt",
        "SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt",
        "SSH_AUTH_SOCK": "/tmp/ssh-abc123/agent.42",
        "GITHUB_TOKEN": "ghp_" + "Ab1" * 12,
        "MY_API_KEY": "s3cr3t-value-123",
    }
    from perfgate.system.secrets import scrubbed_environment, secret_values

    assert "AWS_CA_BUNDLE" not in scrubbed_environment(env)
    assert secret_values(env) == ["ghp_" + "Ab1" * 12, "s3cr3t-value-123"]

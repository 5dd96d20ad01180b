"""Keep secrets out of perfgate's artifacts.

nsys records the whole environment of the profiled process in the report
(``META_DATA_CAPTURE``), and the report, its SQLite export and the logs are uploaded as CI
artifacts. So the capture launches nsys with :func:`scrubbed_environment`, and before upload
:func:`scan_artifacts` finds any file that still contains a secret value and :func:`withhold`
replaces it by a note.

A ``.nsys-rep`` is compressed, so a byte scan of it can miss a secret: an ``.nsys-rep`` counts
as containing a secret when its SQLite export (same stem, ``.sqlite``) does. An ``.nsys-rep``
without a sibling export is only byte-scanned (see docs/ci.md).
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

MIN_SECRET_LENGTH = 8
"""Shorter values are never treated as secrets to search for (too many false matches)."""

# Words that make a variable name secret when they appear as a whole "_"-separated word
# (so MY_API_KEY and SSH_KEYS are secret, KEYBOARD_LAYOUT and PYTHONHASHSEED are not).
_SECRET_NAME_WORDS = re.compile(
    r"(?:^|_)(?:TOKEN|TOKENS|SECRET|SECRETS|PASSWORD|PASSWORDS|PASSWD|PASS|KEY|KEYS|"
    r"APIKEY|PRIVATE|CREDENTIAL|CREDENTIALS|CREDS|AUTH|AUTHORIZATION|COOKIE|SIGNATURE|"
    r"DSN|CONNECTION_STRING)(?:_|$)"
)
# Substrings that make a name secret wherever they occur.
_SECRET_NAME_PARTS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "APIKEY", "API_KEY",
                      "ACCESS_KEY", "PRIVATE_KEY", "AUTH_")
_SECRET_NAME_PREFIXES = ("AWS_", "AZURE_", "GCP_", "GOOGLE_APPLICATION_CREDENTIALS",
                         "ACTIONS_RUNTIME_", "ACTIONS_ID_TOKEN_REQUEST_", "ACTIONS_CACHE_URL",
                         "ACTIONS_RESULTS_URL", "VAULT_", "DOCKER_AUTH", "NPM_CONFIG__AUTH")
_SECRET_NAMES = frozenset({
    "GITHUB_TOKEN", "GH_TOKEN", "GH_ENTERPRISE_TOKEN", "NPM_TOKEN", "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_API_KEY",
    "CODECOV_TOKEN", "PYPI_TOKEN", "TWINE_PASSWORD", "NGC_API_KEY", "COMET_API_KEY",
    "NEPTUNE_API_TOKEN", "SENTRY_DSN", "DATABASE_URL", "SSH_AUTH_SOCK",
})
# Values that look like credentials whatever the variable is called.
_SECRET_VALUE = re.compile(
    r"(?:gh[pousr]_[A-Za-z0-9]{20,}"          # GitHub classic tokens (ghp_, gho_, ghu_, ghs_, ghr_)
    r"|github_pat_[A-Za-z0-9_]{20,}"          # GitHub fine-grained tokens
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"          # Slack
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"              # AWS access key ids
    r"|sk-[A-Za-z0-9_-]{20,}"                  # OpenAI-style keys
    r"|hf_[A-Za-z0-9]{30,}"                    # Hugging Face
    r"|glpat-[A-Za-z0-9_-]{20,}"               # GitLab
    r"|npm_[A-Za-z0-9]{36}"                    # npm
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"     # PEM private keys
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.)"  # JWTs
)
# Names that the rules above would catch but that are known to hold no secret.
_SAFE_NAMES = frozenset({"TOKENIZERS_PARALLELISM", "PYTHONHASHSEED", "KEYBOARD_LAYOUT"})

WITHHELD_SUFFIX = ".withheld.txt"


def is_secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a credential."""
    upper = name.upper()
    if upper in _SAFE_NAMES:
        return False
    if upper in _SECRET_NAMES or upper.startswith(_SECRET_NAME_PREFIXES):
        return True
    if any(part in upper for part in _SECRET_NAME_PARTS):
        return True
    return _SECRET_NAME_WORDS.search(upper) is not None


def is_secret_value(value: str) -> bool:
    """Whether a value looks like a credential (GitHub/Slack/AWS/OpenAI/HF token, PEM key, JWT)."""
    return _SECRET_VALUE.search(value) is not None


def _is_secret(name: str, value: str, keep: frozenset[str], drop: frozenset[str]) -> bool:
    if name in drop:
        return True
    if name in keep:
        return False
    return is_secret_name(name) or is_secret_value(value)


def scrubbed_environment(env: Mapping[str, str], keep: Iterable[str] = (),
                         drop: Iterable[str] = ()) -> dict[str, str]:
    """A copy of ``env`` without variables whose name or value looks secret.

    ``keep`` names variables to pass through although they look secret; ``drop`` names
    variables to remove although they look harmless (``drop`` wins over ``keep``).
    """
    keep_set, drop_set = frozenset(keep), frozenset(drop)
    return {k: v for k, v in env.items() if not _is_secret(k, v, keep_set, drop_set)}


def _searchable(value: str, public_values: frozenset[str]) -> bool:
    """Whether a removed value is worth searching artifacts for. Not: short values, values that a
    non-secret variable holds too (AWS_CA_BUNDLE's path is also SSL_CERT_FILE's), and plain
    absolute paths (a CA bundle or a socket path is where a secret lives, not the secret)."""
    if len(value) < MIN_SECRET_LENGTH or value in public_values:
        return False
    if is_secret_value(value):
        return True
    return not _PLAIN_PATH.fullmatch(value)


_PLAIN_PATH = re.compile(r"/[\w./+-]*")


def secret_values(env: Mapping[str, str], keep: Iterable[str] = (),
                  drop: Iterable[str] = ()) -> list[str]:
    """The values :func:`scrubbed_environment` removes that are worth searching artifacts for
    (see :func:`_searchable`), longest first, without duplicates."""
    keep_set, drop_set = frozenset(keep), frozenset(drop)
    secret = {k for k, v in env.items() if _is_secret(k, v, keep_set, drop_set)}
    public = frozenset(v for k, v in env.items() if k not in secret)
    values = {env[k] for k in secret if _searchable(env[k], public)}
    return sorted(values, key=lambda v: (-len(v), v))


def file_contains(path: Path, needles: Sequence[bytes], chunk_bytes: int = 1 << 20) -> bool:
    """Whether the file's raw bytes contain any of ``needles`` (streamed, overlap-safe)."""
    if not needles:
        return False
    overlap = max(len(n) for n in needles) - 1
    tail = b""
    with path.open("rb") as fh:
        while chunk := fh.read(chunk_bytes):
            window = tail + chunk
            if any(n in window for n in needles):
                return True
            tail = window[-overlap:] if overlap > 0 else b""
    return False


def _encodings(secrets: Sequence[str]) -> list[bytes]:
    """The byte forms a secret can take in a file: UTF-8 and UTF-16-LE (SQLite text can be either)."""
    out: list[bytes] = []
    for s in secrets:
        if len(s) < MIN_SECRET_LENGTH:
            continue
        for enc in ("utf-8", "utf-16-le"):
            b = s.encode(enc)
            if b not in out:
                out.append(b)
    return out


def scan_artifacts(run_dir: Path, secrets: Sequence[str]) -> list[Path]:
    """Every file under ``run_dir`` that contains one of ``secrets``, sorted.

    Raw bytes are searched. An ``.nsys-rep`` (compressed) is also reported when its SQLite export
    with the same stem contains a secret. Already withheld files are skipped.
    """
    needles = _encodings(secrets)
    if not needles or not run_dir.is_dir():
        return []
    files = sorted(p for p in run_dir.rglob("*") if p.is_file() and not p.is_symlink())
    hits = {p for p in files if not p.name.endswith(WITHHELD_SUFFIX) and file_contains(p, needles)}
    for p in files:
        if p.suffix == ".nsys-rep" and p.with_suffix(".sqlite") in hits:
            hits.add(p)
    return sorted(hits)


def withhold(path: Path, reason: str = "it contains the value of a secret environment variable") -> Path:
    """Replace ``path`` by ``<name>.withheld.txt`` saying why, and warn. Returns the note's path."""
    note = path.with_name(path.name + WITHHELD_SUFFIX)
    note.write_text(
        f"perfgate withheld {path.name} from the artifacts: {reason}.\n"
        "Scrub the environment of the profiled process (perfgate.secrets.scrubbed_environment)\n"
        "(or list the variable in its keep= argument only if it is not a secret).\n",
        encoding="utf-8",
    )
    path.unlink()
    warnings.warn(f"perfgate: withheld {path} ({reason}); see {note.name}", stacklevel=2)
    return note


def withhold_secrets(run_dir: Path, secrets: Sequence[str]) -> list[Path]:
    """:func:`scan_artifacts` then :func:`withhold` each hit; returns the notes written."""
    return [withhold(p) for p in scan_artifacts(run_dir, secrets)]

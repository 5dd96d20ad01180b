"""Recognising secrets: by a variable's name, by a value's shape, and inside text.

nsys records environments in its report and SQLite export: nsys's own, and those of other
processes of the machine (perfgate's, which launched nsys, its ancestors, even unrelated ones:
checked with nsys 2022.4), so a secret in the CI job's environment reaches the
trace although perfgate launches nsys with :func:`scrubbed_environment`. perfgate.capture.redaction.launch_folder uses
:func:`find_secrets` and :func:`redact_text` (which also parse environment blocks) to clean
the artifacts.

A secret is recognised by its variable's name (:func:`is_secret_name`: ``*TOKEN*``, ``*_KEY``,
``*PASSWORD*``, ``AWS_*``, ``*WEBHOOK*``, ...) or by its value's shape (:func:`is_secret_value`:
GitHub/Slack/AWS/OpenAI/Hugging Face/GitLab/npm tokens, PEM keys, JWTs, bearer tokens, URLs with
credentials such as ``https://user:pass@host``, webhook URLs, URLs with a ``token=``/``sig=``/...
query parameter).
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
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
                      "ACCESS_KEY", "PRIVATE_KEY", "AUTH_", "WEBHOOK")
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
    r"|eyJ[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*"  # JWTs
    r"|(?<=[Bb]earer )[A-Za-z0-9._~+/-]{16,}=*"  # bearer tokens (an Authorization header)
    r")"
)
# Webhook URLs: the token at the end of the path is the secret (group "secret").
_WEBHOOK = re.compile(
    r"https://(?:hooks\.slack\.com/services/[A-Za-z0-9_-]+/[A-Za-z0-9_-]+"
    r"|(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/[0-9]+)/(?P<secret>[A-Za-z0-9_-]{8,})")
# Credentials inside a URL: scheme://user:password@host (group "secret" is the password), and
# query parameters that carry one (?token=..., &sig=... of a signed URL).
_URL_CREDENTIALS = re.compile(r"(?i)\b[a-z][a-z0-9+.-]*://[^\s/:@\x00]+:(?P<secret>[^\s/@\x00]+)@")
_URL_QUERY_SECRET = re.compile(
    r"(?i)[?&](?:access_token|api_key|apikey|auth|code|key|password|secret|sig|signature|token)"
    r"=(?P<secret>[^&#\s\x00\"']{6,})")
# Names that the rules above would catch but that are known to hold no secret.
_SAFE_NAMES = frozenset({"TOKENIZERS_PARALLELISM", "PYTHONHASHSEED", "KEYBOARD_LAYOUT"})

WITHHELD_SUFFIX = ".withheld.txt"
REDACTED = "[REDACTED]"


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
    """Whether a value looks like or contains a credential (a token of a known shape, a PEM key, a
    JWT, a bearer token, a URL with a password or a secret query parameter, a webhook URL)."""
    return any(pattern.search(value) is not None
               for pattern in (_SECRET_VALUE, _WEBHOOK, _URL_CREDENTIALS, _URL_QUERY_SECRET))


@dataclass(frozen=True)
class Found:
    """One secret found in a text: ``secret`` as it appears inside ``context`` (the secret itself,
    ``NAME=secret``, or a URL's ``scheme://user:secret@``), which occurs in the text verbatim."""

    context: str
    secret: str

    def masked(self, mask: str) -> str:
        """``context`` with the secret replaced by ``mask``."""
        return self.context.replace(self.secret, mask)


def is_masked(value: str) -> bool:
    """Whether ``value`` is already a redaction (``[REDACTED]``, or ``*`` repeated)."""
    return REDACTED in value or (bool(value) and value.strip("*") == "")


_ASSIGNMENT = re.compile(r"(?<![A-Za-z0-9_])(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^\s\x00;&'\",]+)")
_ENTRY_START = re.compile(r";(?=[A-Za-z_][A-Za-z0-9_]*=)")


def _environment_entries(text: str) -> list[str] | None:
    """The ``NAME=VALUE`` entries of an environment block (NUL-separated as in /proc/<pid>/environ
    and nsys 2022.4's exports, or ``;``-joined as nsys 2025's TARGET_INFO_SYSTEM_ENV), else None."""
    if "\x00" in text:
        return text.split("\x00")
    if re.match(r"[A-Za-z_][A-Za-z0-9_]*=", text) and _ENTRY_START.search(text):
        return _ENTRY_START.split(text)
    return None


def public_environment_values(text: str) -> set[str]:
    """The values of the entries of an environment block whose name is not secret (empty for text
    that is not a block): a secret-named variable's value that one of these holds too (a CA
    bundle path) is no secret to search for elsewhere."""
    entries = _environment_entries(text) or []
    pairs = (entry.partition("=") for entry in entries)
    return {value for name, sep, value in pairs if sep and value and not is_secret_name(name)}


def is_harmless(value: str, public_values: Iterable[str] = ()) -> bool:
    """Whether a secret-named variable's value is no secret after all: a plain absolute path (a CA
    bundle, a socket: where a secret lives) or a value a non-secret variable holds too."""
    return value in frozenset(public_values) or (_PLAIN_PATH.fullmatch(value) is not None
                                                 and not is_secret_value(value))


def is_searchable(value: str, public_values: Iterable[str] = ()) -> bool:
    """Whether a secret value is worth searching other text and files for (see _searchable)."""
    return _searchable(value, frozenset(public_values))


def find_secrets(text: str, known: Iterable[str] = ()) -> list[Found]:
    """Every secret in ``text``: the ``known`` values (at least MIN_SECRET_LENGTH long), the values
    of environment entries and ``NAME=VALUE`` assignments whose name is secret (:func:`is_secret_name`),
    and credential-shaped values (:func:`is_secret_value`). Already masked values are not found."""
    found: list[Found] = [Found(v, v) for v in known if len(v) >= MIN_SECRET_LENGTH and v in text]
    entries = _environment_entries(text)
    if entries is not None:
        for entry in entries:
            name, sep, value = entry.partition("=")
            if sep and value and not is_masked(value) and is_secret_name(name):
                found.append(Found(entry, value))
    else:
        found += [Found(m.group(0), m.group("value")) for m in _ASSIGNMENT.finditer(text)
                  if is_secret_name(m.group("name")) and not is_masked(m.group("value"))]
    found += [Found(m.group(0), m.group(0)) for m in _SECRET_VALUE.finditer(text) if not is_masked(m.group(0))]
    for pattern in (_WEBHOOK, _URL_CREDENTIALS, _URL_QUERY_SECRET):
        found += [Found(m.group(0), m.group("secret")) for m in pattern.finditer(text)
                  if not is_masked(m.group("secret"))]
    return list(dict.fromkeys(found))


def redact_text(text: str, known: Iterable[str] = ()) -> str:
    """``text`` with every secret :func:`find_secrets` finds replaced by ``[REDACTED]``."""
    for f in sorted(find_secrets(text, known), key=lambda f: -len(f.context)):
        text = text.replace(f.context, f.masked(REDACTED))
    return text


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


def withhold(path: Path, reason: str = "it contains the value of a secret environment variable",
             *, warn: bool = True) -> Path:
    """Replace ``path`` by ``<name>.withheld.txt`` saying why (and with ``warn``, warn). Returns the
    note's path."""
    note = path.with_name(path.name + WITHHELD_SUFFIX)
    note.write_text(
        f"perfgate withheld {path.name} from the artifacts: {reason}.\n"
        "nsys records environments (the profiled process's, nsys's own and other processes' of this\n"
        "machine); perfgate redacts the secrets it finds in them and withholds what it cannot clean.\n"
        "See perfgate's docs/secrets.md.\n",
        encoding="utf-8",
    )
    path.unlink()
    if warn:
        warnings.warn(f"perfgate: withheld {path} ({reason}); see {note.name}", stacklevel=2)
    return note


def withhold_secrets(run_dir: Path, secrets: Sequence[str]) -> list[Path]:
    """:func:`scan_artifacts` then :func:`withhold` each hit; returns the notes written."""
    return [withhold(p) for p in scan_artifacts(run_dir, secrets)]

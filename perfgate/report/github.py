"""Commit statuses on GitHub: one ``perfgate/<workload>`` status per workload.

Uses the REST API (``POST {api}/repos/{owner}/{repo}/statuses/{sha}``) with urllib and the
Actions environment by default (``GITHUB_TOKEN``, ``GITHUB_REPOSITORY``, ``GITHUB_SHA``,
``GITHUB_API_URL``, ``GITHUB_SERVER_URL``, ``GITHUB_RUN_ID``). The token needs
``permissions: statuses: write``. Posting never raises: a missing token, an unreachable API or an
HTTP error comes back as a warning string, so a reporting problem never hides the gate's verdict;
a warning never carries the token (a server's response may echo it: it is redacted).
"""
from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate.system.secrets import redact_text, secret_values
from perfgate.records.model import Verdict, WorkloadResult
from perfgate.report.digest import one_line

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_SERVER_URL = "https://github.com"
DESCRIPTION_LIMIT = 140
TIMEOUT_S = 10.0


def status_state(result: WorkloadResult) -> str:
    """GitHub status state: ERROR -> error, any other failing result (REGRESSED, NEW under strict
    mode: ``result.failed``) -> failure, everything else -> success."""
    if result.verdict is Verdict.ERROR:
        return "error"
    return "failure" if result.failed else "success"


def status_payload(result: WorkloadResult, context_prefix: str = "perfgate",
                   target_url: str | None = None) -> dict[str, str]:
    """The JSON body of the status of one workload."""
    body = {
        "state": status_state(result),
        "context": f"{context_prefix}/{result.name}",
        "description": one_line(result, limit=DESCRIPTION_LIMIT),
    }
    if target_url:
        body["target_url"] = target_url
    return body


def run_url(env: Mapping[str, str]) -> str | None:
    """The Actions run page (where its artifacts are listed), from the environment."""
    repo, run_id = env.get("GITHUB_REPOSITORY"), env.get("GITHUB_RUN_ID")
    if not repo or not run_id:
        return None
    server = env.get("GITHUB_SERVER_URL", DEFAULT_SERVER_URL).rstrip("/")
    return f"{server}/{repo}/actions/runs/{run_id}"


@dataclass(frozen=True)
class ApiFailure:
    """Why a GitHub API call failed: the HTTP status (None: no answer) and reason, and the start of
    the server's answer."""

    code: int | None
    reason: str
    detail: str = ""


def api_call(method: str, url: str, token: str, body: Mapping[str, Any] | None = None) -> Any | ApiFailure:
    """One REST call: the answer's JSON (None when empty), or an ApiFailure; never raises."""
    request = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode("utf-8"), method=method,
        headers={"Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
                 "X-GitHub-Api-Version": "2022-11-28", "Content-Type": "application/json",
                 "User-Agent": "perfgate"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            raw = response.read()
        return json.loads(raw) if raw.strip() else None
    except urllib.error.HTTPError as exc:
        return ApiFailure(exc.code, str(exc.reason), exc.read(300).decode("utf-8", "replace").strip())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return ApiFailure(None, str(getattr(exc, "reason", exc)))


def redacted(text: str, token: str) -> str:
    """``text`` without the token or any secret of the environment (a server may echo the token)."""
    return redact_text(text, [token, *secret_values(os.environ)])


def _post(url: str, token: str, body: Mapping[str, str]) -> str | None:
    """POST one status; None on success, else a warning."""
    answer = api_call("POST", url, token, body)
    if not isinstance(answer, ApiFailure):
        return None
    if answer.code is not None:
        hint = " (the token needs `permissions: statuses: write`)" if answer.code in (403, 404) else ""
        text = (f"perfgate: could not post status {body['context']}: HTTP {answer.code} {answer.reason}{hint}: "
                f"{answer.detail}")
    else:
        text = f"perfgate: could not post status {body['context']} to {url}: {answer.reason}"
    return redacted(text, token)


def post_statuses(results: Sequence[WorkloadResult], *, token: str | None = None, repo: str | None = None,
                  sha: str | None = None, target_url: str | None = None, api_url: str | None = None,
                  context_prefix: str = "perfgate", env: Mapping[str, str] | None = None) -> list[str]:
    """Post one commit status per workload; return warnings (empty when all were posted)."""
    env = os.environ if env is None else env
    token = token or env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
    repo = repo or env.get("GITHUB_REPOSITORY")
    sha = sha or env.get("PERFGATE_STATUS_SHA") or env.get("GITHUB_SHA")
    api = (api_url or env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    target = target_url or run_url(env)
    missing = [name for name, value in (("GITHUB_TOKEN (or token=)", token),
                                        ("GITHUB_REPOSITORY (or repo=)", repo),
                                        ("GITHUB_SHA (or sha=)", sha)) if not value]
    if missing:
        return [f"perfgate: commit statuses not posted: {', '.join(missing)} not set"]
    assert token and repo and sha
    url = f"{api}/repos/{repo}/statuses/{sha}"
    warnings = [_post(url, token, status_payload(r, context_prefix, target)) for r in results]
    return [w for w in warnings if w is not None]

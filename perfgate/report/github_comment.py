"""The pull request's perfgate comment on GitHub, posted once and then updated in place.

The pull request is ``PERFGATE_PR_NUMBER``, else the one of a ``pull_request`` event
(``GITHUB_EVENT_PATH``), else the open pull request whose head is the pushed branch
(``GET {api}/repos/{repo}/pulls?head=OWNER:BRANCH``, ``GITHUB_REF_NAME``): the gate runs for pushes,
never for a fork's ``pull_request`` event (docs/ci.md). Its comment is the one whose body holds
``COMMENT_MARKER`` among the first 100 (``PATCH``), else a new one (``POST``). The token needs
``permissions: pull-requests: write``. Like the commit statuses (perfgate/report/github.py) it never
raises: what could not be done comes back as warnings, without the token.
"""
from __future__ import annotations

import json
import urllib.parse
from collections.abc import Mapping

from perfgate.report.github import DEFAULT_API_URL, ApiFailure, api_call, redacted
from perfgate.report.markdown import COMMENT_MARKER

PERMISSION = "permissions: pull-requests: write"


def _failed(what: str, answer: ApiFailure, token: str) -> list[str]:
    hint = f" (the token needs `{PERMISSION}`)" if answer.code in (403, 404) else ""
    code = f"HTTP {answer.code} {answer.reason}{hint}: {answer.detail}" if answer.code is not None else answer.reason
    return [redacted(f"perfgate: pull request comment not posted: {what}: {code}", token)]


def _event_number(env: Mapping[str, str]) -> int | None:
    """The pull request of a ``pull_request`` event's payload, or None."""
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            event = json.load(f)
    except (OSError, ValueError):
        return None
    number = (event.get("pull_request") or {}).get("number") if isinstance(event, dict) else None
    return number if isinstance(number, int) else None


def pull_request(env: Mapping[str, str], api: str, repo: str, token: str) -> int | str:
    """The number of the pull request to comment on, or why there is none (a sentence)."""
    given = env.get("PERFGATE_PR_NUMBER", "").strip()
    if given:
        return int(given) if given.isdigit() else f"PERFGATE_PR_NUMBER={given!r} is not a number"
    if (number := _event_number(env)) is not None:
        return number
    branch = env.get("GITHUB_HEAD_REF") or env.get("GITHUB_REF_NAME")
    if not branch:
        return "no pull request: PERFGATE_PR_NUMBER, a pull_request event and GITHUB_REF_NAME are all unset"
    head = urllib.parse.quote(f"{repo.split('/')[0]}:{branch}", safe=":")
    answer = api_call("GET", f"{api}/repos/{repo}/pulls?head={head}&state=open", token)
    if isinstance(answer, ApiFailure):
        return f"could not list the pull requests of {branch}: " + (
            f"HTTP {answer.code} {answer.reason}" if answer.code is not None else answer.reason)
    numbers = [p.get("number") for p in answer if isinstance(p, dict)] if isinstance(answer, list) else []
    if not numbers or not isinstance(numbers[0], int):
        return f"no open pull request has {branch} as its head"
    return numbers[0]


def post_comment(body: str, env: Mapping[str, str]) -> list[str]:
    """Post ``body`` (holding COMMENT_MARKER) as the pull request's perfgate comment, replacing the
    one posted before; warnings (empty when it was posted)."""
    token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN")
    repo = env.get("GITHUB_REPOSITORY")
    if not token or not repo:
        missing = " and ".join(n for n, v in (("GITHUB_TOKEN", token), ("GITHUB_REPOSITORY", repo)) if not v)
        return [f"perfgate: pull request comment not posted: {missing} not set"]
    api = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
    number = pull_request(env, api, repo, token)
    if isinstance(number, str):
        return [redacted(f"perfgate: pull request comment not posted: {number}", token)]
    comments = api_call("GET", f"{api}/repos/{repo}/issues/{number}/comments?per_page=100", token)
    if isinstance(comments, ApiFailure):
        return _failed(f"could not read the comments of #{number}", comments, token)
    ours = next((c for c in comments if isinstance(c, dict) and COMMENT_MARKER in str(c.get("body", ""))), None) \
        if isinstance(comments, list) else None
    if ours is not None and isinstance(ours.get("id"), int):
        answer = api_call("PATCH", f"{api}/repos/{repo}/issues/comments/{ours['id']}", token, {"body": body})
        what = f"could not update comment {ours['id']} of #{number}"
    else:
        answer = api_call("POST", f"{api}/repos/{repo}/issues/{number}/comments", token, {"body": body})
        what = f"could not comment on #{number}"
    return _failed(what, answer, token) if isinstance(answer, ApiFailure) else []

"""The pull request's perfgate comment (perfgate/report/github_comment.py): found by the pushed
branch, posted once and then updated in place, against a local stand-in for the GitHub API;
degrading to warnings without the token."""
from __future__ import annotations

import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from local_api import serving
from report_results import make_result

from perfgate.records.model import Verdict
from perfgate.report.github_comment import post_comment, pull_request
from perfgate.report.markdown import COMMENT_MARKER, render_pr_comment


class _GitHub(BaseHTTPRequestHandler):
    """Pull requests and their comments in memory: GET the open pulls of a head, GET, POST and
    PATCH comments; every request recorded."""

    requests: list[tuple[str, str]] = []
    pulls: dict[str, int] = {}
    comments: dict[int, list[dict]] = {}
    fail: int | None = None

    def _answer(self, code: int, doc: object) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _handle(self) -> None:
        cls = type(self)
        cls.requests.append((self.command, self.path))
        if cls.fail is not None:
            return self._answer(cls.fail, {"message": "Resource not accessible by integration",
                                           "echo": self.headers["Authorization"]})
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"null")
        path, _, query = self.path.partition("?")
        parts = path.strip("/").split("/")
        if self.command == "GET" and parts[-1] == "pulls":
            head = dict(q.split("=", 1) for q in query.split("&"))["head"]
            return self._answer(200, [{"number": cls.pulls[head]}] if head in cls.pulls else [])
        if self.command == "GET" and parts[-1] == "comments":
            return self._answer(200, cls.comments.get(int(parts[-2]), []))
        if self.command == "POST" and parts[-1] == "comments":
            comment = {"id": 100 + sum(map(len, cls.comments.values())), "body": body["body"]}
            cls.comments.setdefault(int(parts[-2]), []).append(comment)
            return self._answer(201, comment)
        if self.command == "PATCH":
            for comment in (c for cs in cls.comments.values() for c in cs if c["id"] == int(parts[-1])):
                comment["body"] = body["body"]
                return self._answer(200, comment)
        return self._answer(404, {"message": "Not Found"})

    do_GET = do_POST = do_PATCH = _handle   # noqa: N815 (http.server's naming)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def github() -> Iterator[type[_GitHub]]:
    handler = type("Handler", (_GitHub,), {"requests": [], "pulls": {}, "comments": {}, "fail": None})
    with serving(handler) as url:
        handler.url = url
        yield handler


def _env(github: type[_GitHub], **more: str) -> dict[str, str]:
    return {"GITHUB_TOKEN": "t0ken-value", "GITHUB_REPOSITORY": "acme/train", "GITHUB_API_URL": github.url,
            "GITHUB_REF_NAME": "faster-loader", **more}


def test_the_comment_is_posted_once_then_updated_in_place(github: type[_GitHub]) -> None:
    github.pulls = {"acme:faster-loader": 7}
    github.comments = {7: [{"id": 1, "body": "LGTM"}]}                  # someone else's comment stays
    first = render_pr_comment([make_result("slow", Verdict.REGRESSED, forward_ms=8.0)])
    assert post_comment(first, _env(github)) == []
    assert [c["body"] for c in github.comments[7]] == ["LGTM", first]
    second = render_pr_comment([make_result("slow", Verdict.PASS)])
    assert post_comment(second, _env(github)) == []
    assert [c["body"] for c in github.comments[7]] == ["LGTM", second]      # the same comment, new text
    assert [m for m, _ in github.requests] == ["GET", "GET", "POST", "GET", "GET", "PATCH"]
    assert github.requests[0][1] == "/repos/acme/train/pulls?head=acme:faster-loader&state=open"


def test_the_pull_request_comes_from_the_setting_the_event_or_the_branch(github: type[_GitHub], tmp_path: Path) -> None:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 12}}))
    assert pull_request({"PERFGATE_PR_NUMBER": "5"}, github.url, "o/r", "t") == 5
    assert pull_request({"GITHUB_EVENT_PATH": str(event), "GITHUB_REF_NAME": "x"}, github.url, "o/r", "t") == 12
    assert pull_request({"PERFGATE_PR_NUMBER": "five"}, github.url, "o/r", "t") == \
        "PERFGATE_PR_NUMBER='five' is not a number"
    assert github.requests == []                                              # none of these asked the API
    assert pull_request({"GITHUB_REF_NAME": "main"}, github.url, "o/r", "t") == "no open pull request has main as its head"


def test_no_pull_request_no_token_or_no_permission_is_a_warning_without_the_token(github: type[_GitHub]) -> None:
    body = render_pr_comment([make_result("fast", Verdict.PASS)])
    assert COMMENT_MARKER in body
    assert post_comment(body, _env(github)) == [
        "perfgate: pull request comment not posted: no open pull request has faster-loader as its head"]
    assert post_comment(body, {"GITHUB_REPOSITORY": "o/r"}) == [
        "perfgate: pull request comment not posted: GITHUB_TOKEN not set"]
    github.fail = 403
    (warning,) = post_comment(body, _env(github, PERFGATE_PR_NUMBER="3"))
    assert "HTTP 403" in warning and "pull-requests: write" in warning and "#3" in warning
    assert "t0ken-value" not in warning                                       # the server echoed it


def test_perfgate_report_posts_the_comment(github: type[_GitHub], tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from perfgate.cli import main
    from perfgate.report.json_report import render_report_json

    report = tmp_path / "perfgate-report.json"
    report.write_text(json.dumps(render_report_json([make_result("slow", Verdict.REGRESSED, forward_ms=8.0)]),
                                 default=str))
    github.pulls = {"acme:faster-loader": 9}
    for key, value in _env(github).items():
        monkeypatch.setenv(key, value)
    assert main(["report", "--from", str(report), "--post-comment"]) == 0
    (comment,) = github.comments[9]
    assert comment["body"].startswith(COMMENT_MARKER) and "REGRESSED" in comment["body"]

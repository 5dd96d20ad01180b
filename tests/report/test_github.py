"""Commit statuses: posted to a local stand-in for the GitHub API; degrading to warnings."""
from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from local_api import serving
from report_results import make_result

from perfgate.records.model import Verdict
from perfgate.report.github import post_statuses, run_url, status_payload


class _Recorder(BaseHTTPRequestHandler):
    requests: list[dict] = []
    status_code = 201

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).requests.append({"path": self.path, "auth": self.headers["Authorization"],
                                    "accept": self.headers["Accept"], "body": json.loads(body)})
        self.send_response(self.status_code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        if self.status_code == 401:   # a server echoing the request's credentials back
            self.wfile.write(json.dumps({"message": "Bad credentials",
                                         "received": self.headers["Authorization"]}).encode())
        else:
            self.wfile.write(b'{"message": "Resource not accessible by integration"}'
                             if self.status_code >= 400 else b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[type[_Recorder]]:
    handler = type("Handler", (_Recorder,), {"requests": [], "status_code": 201})
    with serving(handler) as url:
        handler.url = url
        yield handler


RESULTS = [make_result("fast", Verdict.PASS), make_result("slow", Verdict.REGRESSED, forward_ms=8.0),
           make_result("broken", Verdict.ERROR, error="nsys crashed")]


def test_one_status_per_workload_with_state_context_and_link(api: type[_Recorder]) -> None:
    env = {"GITHUB_TOKEN": "t0ken-value", "GITHUB_REPOSITORY": "acme/train", "GITHUB_SHA": "abc123",
           "GITHUB_SERVER_URL": "https://github.example", "GITHUB_RUN_ID": "42", "GITHUB_API_URL": api.url}
    assert post_statuses(RESULTS, env=env) == []
    assert [r["path"] for r in api.requests] == ["/repos/acme/train/statuses/abc123"] * 3
    assert all(r["auth"] == "Bearer t0ken-value" for r in api.requests)
    assert all(r["accept"] == "application/vnd.github+json" for r in api.requests)
    bodies = {r["body"]["context"]: r["body"] for r in api.requests}
    assert {c: b["state"] for c, b in bodies.items()} == {
        "perfgate/fast": "success", "perfgate/slow": "failure", "perfgate/broken": "error"}
    assert all(b["target_url"] == "https://github.example/acme/train/actions/runs/42" for b in bodies.values())
    assert bodies["perfgate/slow"]["description"].startswith("REGRESSED: step 10.0 -> 14.0 ms")
    assert all(len(b["description"]) <= 140 for b in bodies.values())


def test_explicit_arguments_beat_the_environment(api: type[_Recorder]) -> None:
    env = {"GITHUB_TOKEN": "env-token", "GITHUB_REPOSITORY": "env/repo", "GITHUB_SHA": "envsha"}
    warnings = post_statuses(RESULTS[:1], token="arg-token", repo="o/r", sha="headsha", api_url=api.url,
                             target_url="https://x/y", context_prefix="gpu-perf", env=env)
    assert warnings == []
    (req,) = api.requests
    assert req["path"] == "/repos/o/r/statuses/headsha" and req["auth"] == "Bearer arg-token"
    assert req["body"]["context"] == "gpu-perf/fast" and req["body"]["target_url"] == "https://x/y"


def test_without_a_token_nothing_is_sent_and_a_warning_says_why(api: type[_Recorder]) -> None:
    warnings = post_statuses(RESULTS, env={"GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "s", "GITHUB_API_URL": api.url})
    assert warnings == ["perfgate: commit statuses not posted: GITHUB_TOKEN (or token=) not set"]
    assert api.requests == []


def test_http_errors_become_warnings_with_a_permission_hint(api: type[_Recorder]) -> None:
    api.status_code = 403
    warnings = post_statuses(RESULTS[:2], token="t", repo="o/r", sha="s", api_url=api.url, env={})
    assert len(warnings) == 2 and len(api.requests) == 2
    assert "HTTP 403" in warnings[0] and "statuses: write" in warnings[0]
    assert "Resource not accessible" in warnings[0] and "perfgate/fast" in warnings[0]


def test_an_unreachable_api_gives_a_warning_not_an_exception() -> None:
    with socket.socket() as s:  # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    warnings = post_statuses(RESULTS[:1], token="t", repo="o/r", sha="s", api_url=f"http://127.0.0.1:{port}", env={})
    assert len(warnings) == 1 and "could not post status perfgate/fast" in warnings[0]


def test_payload_and_run_url_helpers() -> None:
    assert status_payload(RESULTS[0])["state"] == "success" and "target_url" not in status_payload(RESULTS[0])
    assert run_url({"GITHUB_REPOSITORY": "o/r"}) is None
    assert run_url({"GITHUB_REPOSITORY": "o/r", "GITHUB_RUN_ID": "7"}) == "https://github.com/o/r/actions/runs/7"


def test_perfgate_report_cli_posts_statuses_from_a_report_file(
        api: type[_Recorder], tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from perfgate.cli import main
    from perfgate.report.json_report import render_report_json

    report = tmp_path / "perfgate-report.json"
    report.write_text(json.dumps(render_report_json(RESULTS), default=str))
    summary = tmp_path / "summary.md"
    for key, value in {"GITHUB_TOKEN": "tok", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "merge",
                       "PERFGATE_STATUS_SHA": "head", "GITHUB_API_URL": api.url,
                       "GITHUB_STEP_SUMMARY": str(summary)}.items():
        monkeypatch.setenv(key, value)
    rc = main(["report", "--from", str(report), "--post-status", "--github-summary", "--fail-on-regression"])
    assert rc == 1  # "slow" regressed and "broken" errored
    assert [r["path"] for r in api.requests] == ["/repos/o/r/statuses/head"] * 3
    assert "| `slow` | :x: REGRESSED |" in summary.read_text()
    assert capsys.readouterr().out.startswith("perfgate: 3 workload(s)")


def test_perfgate_report_cli_names_an_unreadable_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    from perfgate.cli import main

    assert main(["report", "--from", str(tmp_path / "missing.json")]) == 2
    assert "--from " in capsys.readouterr().err


def test_a_server_echoing_the_token_never_gets_it_printed(api: type[_Recorder]) -> None:
    """A status-posting error echoed the server's response, which contained the bearer token."""
    api.status_code = 401
    token = "ghs_" + "Z9y8X7w6V5u4" * 3
    warnings = post_statuses(RESULTS[:1], token=token, repo="o/r", sha="s", api_url=api.url, env={})
    assert api.requests[0]["auth"] == f"Bearer {token}"  # the server did get it
    [warning] = warnings
    assert "HTTP 401" in warning and "Bad credentials" in warning
    assert token not in warning and "Bearer [REDACTED]" in warning

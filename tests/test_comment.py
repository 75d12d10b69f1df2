"""`specgate comment` against a local stand-in of each API on 127.0.0.1 that checks what the real ones document:
GitLab's merge-request Notes API (GET/POST .../merge_requests/:iid/notes, PUT .../notes/:note_id, PRIVATE-TOKEN or
JOB-TOKEN, `{"body": ...}`, X-Next-Page pagination) and GitHub's issue-comments API (GET/POST
/repos/{owner}/{repo}/issues/{n}/comments, PATCH /repos/{owner}/{repo}/issues/comments/{id}, Bearer token, the
vnd.github+json media type and X-GitHub-Api-Version, Link pagination). The first call creates the note, the second
updates the same one; the token never appears in output or files."""

from __future__ import annotations

import http.server
import json
import re
import secrets
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from specgate.cli import main
from specgate.cli.comment import MARKER

OTHERS = [
    {"id": 11, "body": "LGTM", "system": False},
    {"id": 12, "body": "added 1 commit", "system": True},
    {"id": 13, "body": "please rerun the gate", "system": False},
]


@dataclass
class FakeApi:
    """An in-memory notes store behind one platform's documented routes; every request is recorded."""

    platform: str
    token: str
    notes: list[dict[str, Any]] = field(default_factory=lambda: [dict(n) for n in OTHERS])
    requests: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    next_id: int = 100
    host: str = ""

    def routes(self) -> tuple[str, str, str]:
        if self.platform == "gitlab":
            notes = r"/api/v4/projects/42/merge_requests/7/notes"
            return notes, notes + r"/(\d+)", "PUT"
        return r"/repos/acme/models/issues/5/comments", r"/repos/acme/models/issues/comments/(\d+)", "PATCH"

    def authorised(self, headers: Any) -> bool:
        if self.platform == "gitlab":
            return headers.get("PRIVATE-TOKEN") == self.token or headers.get("JOB-TOKEN") == self.token
        fine = headers.get("Authorization") == f"Bearer {self.token}"
        if headers.get("Accept") != "application/vnd.github+json" or headers.get("X-GitHub-Api-Version") is None:
            self.problems.append(f"GitHub headers missing: {dict(headers)!r}")
            return False
        return fine

    def handle(self, method: str, raw_path: str, headers: Any, data: bytes) -> tuple[int, Any, dict[str, str]]:
        path, _, query = raw_path.partition("?")
        self.requests.append((method, path))
        if not headers.get("User-Agent"):
            return 403, {"message": "User-Agent required"}, {}
        if not self.authorised(headers):
            return 401, {"message": "401 Unauthorized"}, {}
        collection, item, update = self.routes()
        if method == "GET" and re.fullmatch(collection, path):
            return self.page(path, urllib.parse.parse_qs(query))
        if method in ("POST", update):
            if headers.get("Content-Type") != "application/json":
                return 415, {"message": "expected application/json"}, {}
            payload = json.loads(data)
            if set(payload) != {"body"} or not isinstance(payload["body"], str) or not payload["body"]:
                return 400, {"message": f"body is missing or has other keys: {sorted(payload)}"}, {}
            if method == "POST" and re.fullmatch(collection, path):
                self.next_id += 1
                note = {"id": self.next_id, "body": payload["body"], "system": False}
                self.notes.append(note)
                return 201, note, {}
            found = re.fullmatch(item, path)
            if found:
                note = next((n for n in self.notes if n["id"] == int(found.group(1))), None)
                if note is None:
                    return 404, {"message": "404 Not found"}, {}
                note["body"] = payload["body"]
                return 200, note, {}
        return 404, {"message": f"no route {method} {path}"}, {}

    def page(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any, dict[str, str]]:
        per_page = 2  # small pages, so the own note is found on a later page
        if int(query.get("per_page", ["20"])[0]) < per_page:
            return 400, {"message": "per_page"}, {}
        number = int(query.get("page", ["1"])[0])
        notes = self.notes[(number - 1) * per_page : number * per_page]
        more = len(self.notes) > number * per_page
        if self.platform == "gitlab":
            return 200, notes, {"X-Next-Page": str(number + 1) if more else ""}
        link = f'<http://{self.host}{path}?per_page=100&page={number + 1}>; rel="next"' if more else ""
        return 200, notes, {"Link": link} if link else {}

    def own_notes(self) -> list[dict[str, Any]]:
        return [n for n in self.notes if MARKER in n["body"]]


def _handler(api: FakeApi) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, payload, extra = api.handle(self.command, self.path, self.headers, self.rfile.read(length))
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in extra.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = _serve

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def fake_api() -> Iterator[Callable[[str, str], FakeApi]]:
    servers: list[http.server.ThreadingHTTPServer] = []

    def start(platform: str, token: str) -> FakeApi:
        api = FakeApi(platform, token)
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
        api.host = f"127.0.0.1:{server.server_port}"
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return api

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def blocked_verdict(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> Path:
    """A verdict.json of a real (FakeEngine) gate run that blocks on speedup."""
    gate_project("slowdown=2.0")
    pytester.runpytest("suites/test_sla.py", "-p", "no:cacheprovider").assert_outcomes(passed=4, failed=1)
    return pytester.path / "reports" / "verdict.json"


def _clean_ci_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GITLAB_CI", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_EVENT_PATH", "GITHUB_REF", "CI_JOB_URL"):
        monkeypatch.delenv(name, raising=False)


def _gitlab_env(monkeypatch: pytest.MonkeyPatch, api: FakeApi, token: str) -> None:
    _clean_ci_env(monkeypatch)
    monkeypatch.setenv("GITLAB_CI", "true")
    monkeypatch.setenv("CI_API_V4_URL", f"http://{api.host}/api/v4")
    monkeypatch.setenv("CI_PROJECT_ID", "42")
    monkeypatch.setenv("CI_MERGE_REQUEST_IID", "7")
    monkeypatch.setenv("CI_JOB_URL", "https://gitlab.example.com/acme/models/-/jobs/314")
    monkeypatch.setenv("SPECGATE_GITLAB_TOKEN", token)


def _files_hold(root: Path, token: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]


def test_gitlab_note_is_created_then_updated_in_place(
    fake_api: Callable[[str, str], FakeApi],
    blocked_verdict: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = "glpat-" + secrets.token_hex(10)
    api = fake_api("gitlab", token)
    _gitlab_env(monkeypatch, api, token)
    assert main(["comment", "--verdict", str(blocked_verdict)]) == 0
    first = capsys.readouterr()
    assert "created note 101 on merge request !7 of project 42" in first.out
    assert [m for m, _ in api.requests] == ["GET", "GET", "POST"]  # two pages of others' notes, then the new one
    (note,) = api.own_notes()
    body = note["body"]
    assert body.startswith(MARKER)
    assert "specgate: **BLOCK** on `cpu`" in body
    assert "| `speedup` | fake-pair / docs | sla | speedup S 0." in body  # the failed check with its evidence
    assert "| fake-pair | docs | spec |" in body  # the key metrics table
    job = "https://gitlab.example.com/acme/models/-/jobs/314"
    assert f"[Allure report]({job}/artifacts/file/reports/allure-report/index.html)" in body

    note["body"] = MARKER + "\nan older verdict"
    assert main(["comment", "--verdict", str(blocked_verdict)]) == 0
    second = capsys.readouterr()
    assert "updated note 101" in second.out
    assert api.requests[3:] == [("GET", "/api/v4/projects/42/merge_requests/7/notes")] * 2 + [
        ("PUT", "/api/v4/projects/42/merge_requests/7/notes/101")
    ]
    assert len(api.own_notes()) == 1 and api.own_notes()[0]["body"] == body
    assert len(api.notes) == len(OTHERS) + 1
    for text in (first.out, first.err, second.out, second.err):
        assert token not in text
    assert _files_hold(blocked_verdict.parent.parent, token) == []


def test_github_comment_is_created_then_updated_and_added_to_the_job_summary(
    fake_api: Callable[[str, str], FakeApi],
    blocked_verdict: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = "ghs_" + secrets.token_hex(12)
    api = fake_api("github", token)
    _clean_ci_env(monkeypatch)
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": 5, "pull_request": {"number": 5}}))
    summary = tmp_path / "step-summary.md"
    env = {
        "GITHUB_ACTIONS": "true",
        "GITHUB_API_URL": f"http://{api.host}",
        "GITHUB_REPOSITORY": "acme/models",
        "GITHUB_EVENT_PATH": str(event),
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "2718",
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_TOKEN": token,
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["comment", "--verdict", str(blocked_verdict)]) == 0
    assert "created note 101 on pull request #5 of acme/models" in capsys.readouterr().out
    assert api.requests[-1] == ("POST", "/repos/acme/models/issues/5/comments")
    assert main(["comment", "--verdict", str(blocked_verdict)]) == 0
    out = capsys.readouterr()
    assert "updated note 101" in out.out
    assert api.requests[-1] == ("PATCH", "/repos/acme/models/issues/comments/101")
    assert api.problems == []
    (note,) = api.own_notes()
    assert "[reports (run artifacts)](https://github.com/acme/models/actions/runs/2718)" in note["body"]
    assert summary.read_text().count("specgate: **BLOCK** on `cpu`") == 2  # each step appends its summary
    assert token not in out.out + out.err
    assert _files_hold(tmp_path, token) == [] and _files_hold(blocked_verdict.parent.parent, token) == []


def test_a_missing_token_or_a_refusal_is_a_clear_error_without_the_token(
    fake_api: Callable[[str, str], FakeApi],
    blocked_verdict: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    token = "glpat-" + secrets.token_hex(10)
    api = fake_api("gitlab", "another-token")
    _gitlab_env(monkeypatch, api, token)
    monkeypatch.delenv("SPECGATE_GITLAB_TOKEN")
    assert main(["comment", "--verdict", str(blocked_verdict)]) == 1
    assert "$SPECGATE_GITLAB_TOKEN is not set" in capsys.readouterr().err
    assert api.requests == []

    monkeypatch.setenv("SPECGATE_GITLAB_TOKEN", token)
    assert main(["comment", "--verdict", str(blocked_verdict)]) == 1
    err = capsys.readouterr().err
    assert "GET http://" in err and "HTTP 401" in err and token not in err
    assert api.notes == OTHERS


def test_dry_run_prints_the_note_and_sends_nothing(
    blocked_verdict: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _clean_ci_env(monkeypatch)
    assert main(["comment", "--verdict", str(blocked_verdict), "--dry-run"]) == 1  # no platform to render for
    assert "pass --platform gitlab|github" in capsys.readouterr().err
    link = "--link=dashboard=https://grafana.example.com/d/specgate"
    assert main(["comment", "--verdict", str(blocked_verdict), "--platform", "gitlab", "--dry-run", link]) == 0
    out = capsys.readouterr().out
    assert out.startswith(MARKER) and "[dashboard](https://grafana.example.com/d/specgate)" in out


def test_verdict_command_exits_by_the_saved_verdict(
    blocked_verdict: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["verdict", "--verdict", str(blocked_verdict)]) == 1
    assert "VERDICT: BLOCK" in capsys.readouterr().out
    passed = tmp_path / "verdict.json"
    passed.write_text(blocked_verdict.read_text().replace('"verdict": "BLOCK"', '"verdict": "PASS"', 1))
    assert main(["verdict", "--verdict", str(passed)]) == 0
    assert main(["verdict", "--verdict", str(tmp_path / "missing.json")]) == 2
    assert "the release is blocked" in capsys.readouterr().err


def test_verdict_command_never_passes_a_run_that_did_not_finish(
    blocked_verdict: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict.json left by an earlier passing run must not pass a run that stopped with a usage error."""
    stale = tmp_path / "verdict.json"
    stale.write_text(blocked_verdict.read_text().replace('"verdict": "BLOCK"', '"verdict": "PASS"', 1))
    assert main(["verdict", "--verdict", str(stale), "--pytest-exit", "0"]) == 0
    for status in ("2", "3", "4"):
        assert main(["verdict", "--verdict", str(stale), "--pytest-exit", status]) == 2
        assert f"pytest exited with {status}" in capsys.readouterr().err
    assert main(["verdict", "--verdict", str(stale), "--pytest-exit", "1"]) == 1  # PASS beside a failed session
    assert main(["verdict", "--verdict", str(blocked_verdict), "--pytest-exit", "1"]) == 1
    monkeypatch.setenv("SPECGATE_PYTEST_EXIT", "4")  # how the GitHub workflow hands the status on
    assert main(["verdict", "--verdict", str(stale)]) == 2

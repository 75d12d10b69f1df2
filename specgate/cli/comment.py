"""`specgate comment`: post the verdict as one note on the merge request, and update that note on the next push.

    specgate comment                       # in a GitLab merge-request pipeline or a GitHub pull_request workflow
    specgate comment --dry-run             # print the note, post nothing

The note is `summary.md`'s content rendered from `reports/verdict.json` (the verdict, failed checks with their
evidence, the key metrics per pair, workload and arm, the recommendation) with links to the job's reports, and a
hidden marker line. Before posting, the existing notes are read and the one carrying the marker is updated in place,
so a merge request holds one specgate note however often it is pushed.

- GitLab (`GITLAB_CI=true`): the Notes API of merge requests, `$CI_API_V4_URL/projects/$CI_PROJECT_ID/
  merge_requests/$CI_MERGE_REQUEST_IID/notes`; token from `$SPECGATE_GITLAB_TOKEN` (a project access token with
  the `api` scope, sent as PRIVATE-TOKEN; name another variable with --token-env; `CI_JOB_TOKEN` is sent as
  JOB-TOKEN).
- GitHub (`GITHUB_ACTIONS=true`): the issue-comments API of the pull request, `$GITHUB_API_URL/repos/
  $GITHUB_REPOSITORY/issues/N/comments` (N from the event payload); token from `$GITHUB_TOKEN` (the workflow needs
  `permissions: pull-requests: write`). The note is also appended to `$GITHUB_STEP_SUMMARY`, the job's summary.

The token is read from the environment only; it is never printed, logged or written to a file.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specgate import __version__

MARKER = "<!-- specgate: merge-request note (updated in place by `specgate comment`) -->"
GITHUB_API_VERSION = "2022-11-28"
# the platforms' note size limits, with room to spare (GitHub: 65,536 characters, GitLab: 1,000,000)
BODY_LIMIT = {"github": 60_000, "gitlab": 900_000}
MAX_PAGES = 50
TIMEOUT_S = 30.0


class NoteError(Exception):
    """The note could not be posted: a missing setting, or the API refused. The message never holds the token."""


@dataclass(frozen=True, slots=True)
class NoteTarget:
    """Where the note goes and how to talk to the API there. `headers` hold the token: never printed."""

    platform: str
    list_url: str
    create_url: str
    update_url: str  # with `{id}`
    update_method: str
    headers: Mapping[str, str] = field(repr=False)
    describe: str = ""


def _env(name: str, hint: str, env: Mapping[str, str]) -> str:
    value = env.get(name, "")
    if not value:
        raise NoteError(f"${name} is not set: {hint}")
    return value


def _token(name: str, env: Mapping[str, str]) -> str:
    return _env(name, f"put the API token in ${name} (a masked CI variable), or name another with --token-env", env)


def gitlab_target(args: argparse.Namespace, env: Mapping[str, str]) -> NoteTarget:
    """The merge request's Notes API: list, create (POST) and update (PUT) a note."""
    api = (args.api_url or _env("CI_API_V4_URL", "pass --api-url https://HOST/api/v4", env)).rstrip("/")
    project = args.project or _env("CI_PROJECT_ID", "pass --project ID (or group/project)", env)
    hint = "run in a merge-request pipeline (rules: merge_request_event) or pass --merge-request"
    iid = args.merge_request or _env("CI_MERGE_REQUEST_IID", hint, env)
    token_env = args.token_env or "SPECGATE_GITLAB_TOKEN"
    header = "JOB-TOKEN" if token_env == "CI_JOB_TOKEN" else "PRIVATE-TOKEN"
    notes = f"{api}/projects/{urllib.parse.quote(str(project), safe='')}/merge_requests/{iid}/notes"
    return NoteTarget(
        platform="gitlab",
        list_url=notes + "?per_page=100&sort=asc&order_by=created_at",
        create_url=notes,
        update_url=notes + "/{id}",
        update_method="PUT",
        headers={header: _token(token_env, env), "Content-Type": "application/json", "Accept": "application/json"},
        describe=f"merge request !{iid} of project {project}",
    )


def _pull_number(env: Mapping[str, str]) -> str:
    event = env.get("GITHUB_EVENT_PATH", "")
    if event and Path(event).is_file():
        payload = json.loads(Path(event).read_text(encoding="utf-8"))
        number = (payload.get("pull_request") or {}).get("number") or payload.get("number")
        if number:
            return str(number)
    found = re.fullmatch(r"refs/pull/(\d+)/(?:merge|head)", env.get("GITHUB_REF", ""))
    if found:
        return found.group(1)
    raise NoteError("no pull request in this workflow's event: run on `pull_request`, or pass --pull-request N")


def github_target(args: argparse.Namespace, env: Mapping[str, str]) -> NoteTarget:
    """The pull request's issue-comments API: list, create (POST) and update (PATCH) a comment."""
    api = (args.api_url or env.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
    repo = args.project or _env("GITHUB_REPOSITORY", "pass --project OWNER/REPO", env)
    number = args.merge_request or _pull_number(env)
    token = _token(args.token_env or "GITHUB_TOKEN", env)
    return NoteTarget(
        platform="github",
        list_url=f"{api}/repos/{repo}/issues/{number}/comments?per_page=100",
        create_url=f"{api}/repos/{repo}/issues/{number}/comments",
        update_url=f"{api}/repos/{repo}/issues/comments/{{id}}",
        update_method="PATCH",
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": GITHUB_API_VERSION,
            "Content-Type": "application/json",
        },
        describe=f"pull request #{number} of {repo}",
    )


def detect_platform(env: Mapping[str, str]) -> str:
    if env.get("GITLAB_CI") == "true":
        return "gitlab"
    if env.get("GITHUB_ACTIONS") == "true":
        return "github"
    raise NoteError("not in GitLab CI or GitHub Actions: pass --platform gitlab|github")


def report_links(platform: str, env: Mapping[str, str], out_dir: str) -> list[tuple[str, str]]:
    """Links to this job's reports: GitLab's job artifacts, GitHub's run page (where its artifacts are listed)."""
    if platform == "gitlab" and env.get("CI_JOB_URL"):
        job = env["CI_JOB_URL"].rstrip("/")
        return [
            ("Allure report", f"{job}/artifacts/file/{out_dir}/allure-report/index.html"),
            ("all reports", f"{job}/artifacts/browse/{out_dir}/"),
            ("job", job),
        ]
    if platform == "github" and env.get("GITHUB_RUN_ID") and env.get("GITHUB_REPOSITORY"):
        server = env.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
        return [("reports (run artifacts)", f"{server}/{env['GITHUB_REPOSITORY']}/actions/runs/{env['GITHUB_RUN_ID']}")]
    return []


def note_body(verdict: Path, links: list[tuple[str, str]], limit: int) -> str:
    """The note: the marker line and the summary, without the list of every check when the note would be too long."""
    from specgate.reports.document import load_document
    from specgate.reports.summary import summary_markdown

    document = load_document(verdict)
    body = f"{MARKER}\n{summary_markdown(document, links)}"
    if len(body) > limit:
        body = f"{MARKER}\n{summary_markdown(document, links, all_checks=False)}"
    if len(body) > limit:
        cut = "\n\n… (cut to fit the note; every check is in the reports)\n"
        body = body[: limit - len(cut)] + cut
    return body


def _request(method: str, url: str, target: NoteTarget, body: str | None = None) -> tuple[Any, Mapping[str, str]]:
    data = None if body is None else json.dumps({"body": body}).encode("utf-8")
    headers = {**target.headers, "User-Agent": f"specgate/{__version__}"}
    if data is None:
        headers.pop("Content-Type", None)
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    secrets = [v.removeprefix("Bearer ") for k, v in target.headers.items() if k not in ("Accept", "Content-Type")]
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            payload = json.loads(response.read().decode("utf-8") or "null")
            return payload, dict(response.headers.items())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise NoteError(_redact(f"{method} {url}: HTTP {exc.code} {exc.reason}: {detail}", secrets)) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise NoteError(_redact(f"{method} {url}: {exc}", secrets)) from None


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


def _next_page(url: str, headers: Mapping[str, str]) -> str | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    if "x-next-page" in lowered:  # GitLab: empty on the last page
        following = lowered["x-next-page"].strip()
        return _with_page(url, int(following)) if following else None
    link = re.search(r'<([^>]+)>;\s*rel="next"', lowered.get("link", ""))  # GitHub
    return link.group(1) if link else None


def _with_page(url: str, page: int) -> str:
    parts = urllib.parse.urlsplit(url)
    query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "page"] + [("page", str(page))]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def find_note(target: NoteTarget) -> int | None:
    """The id of specgate's own earlier note (the first that carries the marker), if any."""
    url: str | None = target.list_url
    for _ in range(MAX_PAGES):
        if url is None:
            break
        notes, headers = _request("GET", url, target)
        if not isinstance(notes, list):
            raise NoteError(f"GET {url}: expected a list of notes, got {type(notes).__name__}")
        for note in notes:
            if isinstance(note, dict) and MARKER in str(note.get("body", "")) and not note.get("system"):
                return int(note["id"])
        url = _next_page(url, headers) if notes else None
    return None


def post_note(target: NoteTarget, body: str) -> tuple[str, int]:
    """Update specgate's note on the merge request, or create it; return ("updated" | "created", note id)."""
    existing = find_note(target)
    if existing is not None:
        note, _ = _request(target.update_method, target.update_url.format(id=existing), target, body)
        return "updated", int(note.get("id", existing)) if isinstance(note, dict) else existing
    note, _ = _request("POST", target.create_url, target, body)
    if not isinstance(note, dict) or "id" not in note:
        raise NoteError(f"POST {target.create_url}: the response holds no note id")
    return "created", int(note["id"])


def append_step_summary(body: str, env: Mapping[str, str]) -> bool:
    """Append the note to GitHub's job summary (`$GITHUB_STEP_SUMMARY`), when the job has one."""
    path = env.get("GITHUB_STEP_SUMMARY", "")
    if not path:
        return False
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(body + "\n")
    return True


def comment(args: argparse.Namespace) -> int:
    env = os.environ
    verdict = Path(args.verdict)
    if not verdict.is_file():
        print(f"specgate comment: {verdict} does not exist: run the gate first (pytest suites/)", file=sys.stderr)
        return 2
    from specgate.errors import SpecgateError

    try:
        platform = args.platform or detect_platform(env)
        links = report_links(platform, env, args.reports_path) + [(t, u) for t, u in (args.link or [])]
        body = note_body(verdict, links, BODY_LIMIT[platform])
        if args.dry_run:
            print(body)
            return 0
        if platform == "github" and append_step_summary(body, env):
            print("specgate comment: the summary was added to the job summary ($GITHUB_STEP_SUMMARY)")
        target = gitlab_target(args, env) if platform == "gitlab" else github_target(args, env)
        action, note_id = post_note(target, body)
    except (NoteError, SpecgateError, OSError, ValueError) as exc:
        print(f"specgate comment: {exc}", file=sys.stderr)
        return 1
    print(f"specgate comment: {action} note {note_id} on {target.describe}")
    return 0


def _link(value: str) -> tuple[str, str]:
    title, sep, url = value.partition("=")
    if not sep or not title or not url:
        raise argparse.ArgumentTypeError(f"--link {value!r}: expected TITLE=URL")
    return title, url


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "comment",
        help="Post the verdict as one note on the merge request (GitLab) or pull request (GitHub), updated in place.",
        description="Post (or update) one note with the verdict summary on the merge request, through the GitLab "
        "Notes API or the GitHub issue-comments API. Settings default to the CI's own variables.",
    )
    parser.add_argument("--verdict", default="reports/verdict.json", metavar="PATH", help="Default: %(default)s.")
    parser.add_argument(
        "--platform", choices=("gitlab", "github"), default=None, help="Default: from $GITLAB_CI / $GITHUB_ACTIONS."
    )
    parser.add_argument(
        "--api-url", default=None, help="API root (default: $CI_API_V4_URL; $GITHUB_API_URL or api.github.com)."
    )
    parser.add_argument(
        "--project",
        default=None,
        help="Project ID or path, or OWNER/REPO (default: $CI_PROJECT_ID, $GITHUB_REPOSITORY).",
    )
    parser.add_argument(
        "--merge-request",
        "--pull-request",
        default=None,
        metavar="N",
        help="Merge request IID / pull request number (default: $CI_MERGE_REQUEST_IID / the workflow's event).",
    )
    parser.add_argument(
        "--token-env",
        default=None,
        metavar="NAME",
        help="Environment variable holding the API token (default: SPECGATE_GITLAB_TOKEN / GITHUB_TOKEN).",
    )
    parser.add_argument(
        "--reports-path",
        default="reports",
        metavar="PATH",
        help="The reports folder inside the job's artifacts, for the links (default: %(default)s).",
    )
    parser.add_argument(
        "--link", action="append", type=_link, metavar="TITLE=URL", help="Another link under the headline."
    )
    parser.add_argument("--dry-run", action="store_true", help="Print the note instead of posting it.")
    parser.set_defaults(handler=comment)

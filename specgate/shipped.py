"""What specgate ships besides its code: the gate suites (with their workloads), the hardware profiles and the CI
templates. A wheel carries them under `specgate/_shipped/` (copied from the repository's top-level folders at build
time); in a source checkout they are those folders. A repository's own files override these (its
`hardware/<name>.yaml` wins over the packaged profile of that name).
"""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = {  # where a source checkout keeps what a wheel ships under _shipped/
    "suites": "suites",
    "hardware": "hardware",
    "ci/gitlab": "ci/gitlab",
    "ci/github": ".github/workflows",
}


def shipped(kind: str) -> Path | None:
    """The folder of shipped `kind` ("suites", "hardware", "ci/gitlab", "ci/github"), or None when this install
    has none."""
    inside = PACKAGE / "_shipped" / kind
    if inside.is_dir():
        return inside
    checkout = PACKAGE.parent / CHECKOUT[kind]
    if (PACKAGE.parent / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    return None


def template(name: str) -> Path:
    """A file of `specgate/templates/` (what `specgate init` writes)."""
    return PACKAGE / "templates" / name

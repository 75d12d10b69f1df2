"""Ship the repository's gate suites (with their workloads), hardware profiles and CI templates inside the package.

The top-level `suites/`, `hardware/` and CI files stay the one source (this repository is also an initialised gate
repository); a wheel carries copies under `specgate/_shipped/`, which `specgate.shipped` finds (in a source checkout
it reads the top-level folders directly). Everything else about the build is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = {  # source in this repository → place under specgate/_shipped/
    "suites": "suites",
    "hardware": "hardware",
    "ci/gitlab/specgate.gitlab-ci.yml": "ci/gitlab/specgate.gitlab-ci.yml",
    ".github/workflows/specgate.yml": "ci/github/specgate.yml",
}


class BuildWithShipped(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "specgate" / "_shipped"
        for source, place in SHIPPED.items():
            origin, destination = ROOT / source, target / place
            if origin.is_dir():
                shutil.copytree(origin, destination, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(origin, destination)


setup(cmdclass={"build_py": BuildWithShipped})

"""The `specgate` command line. Each subcommand module registers its parser and sets a `handler(args) -> int`:

specgate init       make a repository a gate repository: specgate.yaml, suites, a CI template, .gitignore
specgate report     rebuild the reports from verdict.json; Allure HTML from Allure results
specgate baseline   list, show and diff stored baselines (the same comparisons as the gate)
specgate comment    post or update the verdict note on the merge request (GitLab) or pull request (GitHub)
specgate verdict    print the saved verdict; exit 0 on PASS, 1 on BLOCK, 2 without one (CI jobs)
specgate merge      combine the reports of several runs (runners, hardware, pairs) into one verdict
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from specgate import __version__
from specgate.cli import baseline, comment, init, merge, report, verdict


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specgate", description="specgate: release gate for speculative decoding.")
    parser.add_argument("--version", action="version", version=f"specgate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    init.add_parser(subparsers)
    report.add_parser(subparsers)
    baseline.add_parser(subparsers)
    comment.add_parser(subparsers)
    verdict.add_parser(subparsers)
    merge.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `specgate` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return int(handler(args))


if __name__ == "__main__":
    sys.exit(main())

"""`specgate verdict`: the exit status of a CI job, from the saved verdict alone.

    status=0; pytest suites/ --hardware=cpu || status=$?    # the job goes on to write its reports, post its note
    specgate verdict --pytest-exit "$status"                # 0 on PASS, 1 on BLOCK, 2 when there is no verdict

The pipeline then fails exactly when the verdict is BLOCK, and fails closed when the gate wrote no verdict (a usage
error, a crash before the end of the session). With `--pytest-exit` (or `SPECGATE_PYTEST_EXIT`) a `verdict.json`
left by an earlier run cannot pass a run that never finished: pytest's usage error (4), interruption (2) or
internal error (3) is "no verdict", and a PASS beside a failed pytest session (1) is a BLOCK.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

PASSED, BLOCKED, NO_VERDICT = 0, 1, 2


def verdict(args: argparse.Namespace) -> int:
    from specgate.errors import SpecgateError
    from specgate.reports.document import load_document
    from specgate.reports.terminal import verdict_lines

    exit_status = args.pytest_exit
    if exit_status is not None and exit_status not in (0, 1):
        print(
            f"specgate verdict: pytest exited with {exit_status} (2 interrupted, 3 internal error, 4 usage error): the "
            f"gate did not finish, so the release is blocked; any {args.verdict} is not this run's",
            file=sys.stderr,
        )
        return NO_VERDICT
    try:
        document = load_document(Path(args.verdict))
    except SpecgateError as exc:
        print(f"specgate verdict: {exc}; the gate did not finish, so the release is blocked", file=sys.stderr)
        return NO_VERDICT
    for line in verdict_lines(document):
        print(line)
    if document.passed and exit_status == 1:
        print(
            "specgate verdict: the verdict says PASS but pytest exited with 1 (a test failed): blocked",
            file=sys.stderr,
        )
        return BLOCKED
    return PASSED if document.passed else BLOCKED


def _exit_status(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected pytest's exit status, a whole number, got {text!r}") from None


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verdict",
        help="Print the saved verdict; exit 0 on PASS, 1 on BLOCK, 2 when there is none (for CI jobs).",
        description="Print the verdict of a gate run from verdict.json and exit with its status: 0 PASS, 1 BLOCK, "
        "2 missing or unreadable (the release is blocked).",
    )
    parser.add_argument("--verdict", default="reports/verdict.json", metavar="PATH", help="Default: %(default)s.")
    parser.add_argument(
        "--pytest-exit",
        type=_exit_status,
        default=os.environ.get("SPECGATE_PYTEST_EXIT") or None,
        metavar="N",
        help="The gate's pytest exit status (default: $SPECGATE_PYTEST_EXIT): other than 0 or 1 blocks.",
    )
    parser.set_defaults(handler=verdict)

"""`specgate verdict`: the exit status of a CI job, from the saved verdict alone.

    pytest suites/ --hardware=cpu || true     # the job goes on to write its reports and post its note
    specgate verdict                          # 0 on PASS, 1 on BLOCK, 2 when there is no readable verdict

The pipeline then fails exactly when the verdict is BLOCK, and fails closed when the gate wrote no verdict (a usage
error, a crash before the end of the session): the verdict, not pytest's exit status, decides.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

PASSED, BLOCKED, NO_VERDICT = 0, 1, 2


def verdict(args: argparse.Namespace) -> int:
    from specgate.errors import SpecgateError
    from specgate.reports.document import load_document
    from specgate.reports.terminal import verdict_lines

    try:
        document = load_document(Path(args.verdict))
    except SpecgateError as exc:
        print(f"specgate verdict: {exc}; the gate did not finish, so the release is blocked", file=sys.stderr)
        return NO_VERDICT
    for line in verdict_lines(document):
        print(line)
    return PASSED if document.passed else BLOCKED


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verdict",
        help="Print the saved verdict; exit 0 on PASS, 1 on BLOCK, 2 when there is none (for CI jobs).",
        description="Print the verdict of a gate run from verdict.json and exit with its status: 0 PASS, 1 BLOCK, "
        "2 missing or unreadable (the release is blocked).",
    )
    parser.add_argument("--verdict", default="reports/verdict.json", metavar="PATH", help="Default: %(default)s.")
    parser.set_defaults(handler=verdict)

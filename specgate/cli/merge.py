"""`specgate merge`: the reports folders of several gate runs (other hardware, runners or pairs) → one verdict.

    specgate merge specgate-parts/ --expect cpu:specgate-cpu a800:gpu-a800 --out reports
    specgate comment                   # one note on the merge request, from reports/verdict.json
    specgate verdict                   # the pipeline's status: 0 PASS, 1 BLOCK

Each folder is a run's reports folder (with its `verdict.json`), or a folder of them (the CI jobs' artifacts side by
side). Writes `verdict.json` and `summary.md` (every part labelled `hardware @ runner`), `junit.xml`, Allure results
in `allure-results/` and the parts' run records in `runs/` (`specgate.reports.merge`, `.merge_files`). A part that
blocked, never reported (`--expect`), or cannot be read makes the merged verdict BLOCK by name. Exits 0 when the
merged verdict was written, whatever it says (the job goes on to post the note; `specgate verdict` decides), 2 when
nothing could be written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def merge(args: argparse.Namespace) -> int:
    from specgate.errors import SpecgateError
    from specgate.reports.document import write_document
    from specgate.reports.merge import load_parts, merge_documents, parse_expected, with_expected
    from specgate.reports.merge_files import copy_runs, merge_allure, merge_junit
    from specgate.reports.summary import write_summary
    from specgate.reports.terminal import verdict_lines

    out = Path(args.out)
    try:
        expected = parse_expected(args.expect or [])
        found = load_parts([Path(f) for f in args.folders], exclude=out)
        parts, warnings = with_expected([p for p, _ in found], expected)
        folders = {p.label: folder for p, folder in found}
        located = [(p, folders.get(p.label, out / "missing")) for p in parts]
        out.mkdir(parents=True, exist_ok=True)
        warnings += merge_junit(located, out / args.junit_name, args.junit_name)
        warnings += merge_allure(located, out / args.allure_name, args.allure_name)
        copy_runs(located, out / "runs")
        document = merge_documents(parts, str(out), warnings)
        write_document(document, out / "verdict.json")
        write_summary(document, out)
    except (SpecgateError, OSError, ValueError) as exc:
        print(f"specgate merge: {exc}", file=sys.stderr)
        return 2
    for line in verdict_lines(document):
        print(line)
    for warning in warnings:
        print(f"specgate merge WARNING: {warning}", file=sys.stderr)
    return 0


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "merge",
        help="Combine the reports of several gate runs (runners, hardware, pairs) into one verdict.",
        description="Combine the verdict.json, JUnit, Allure results and run records of several gate runs into one "
        "verdict, summary, JUnit file and Allure results folder; BLOCK when any part blocks, is missing or "
        "cannot be read.",
    )
    parser.add_argument("folders", nargs="+", metavar="DIR", help="A run's reports folder, or a folder of them.")
    parser.add_argument("--out", default="reports", metavar="DIR", help="Folder of the merged reports (%(default)s).")
    parser.add_argument(
        "--expect",
        action="append",
        metavar="HARDWARE[:RUNNER]",
        help="A part that must report (repeatable, or space/comma separated; a JSON or YAML list of CI matrix "
        "entries also reads): one that never did blocks by name.",
    )
    parser.add_argument(
        "--junit-name", default="junit.xml", metavar="NAME", help="JUnit file in each part (%(default)s)."
    )
    parser.add_argument(
        "--allure-name", default="allure-results", metavar="NAME", help="Allure results in each part (%(default)s)."
    )
    parser.set_defaults(handler=merge)

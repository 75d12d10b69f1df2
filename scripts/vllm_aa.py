"""The vllm engine's A/A and self-test, run again and again: does an unchanged configuration pass on vLLM, and does
an injected slowdown block?

    python scripts/vllm_aa.py --aa 5 --inject 5 [--slowdown 0.10] [--lock FILE] [--out reports/vllm-aa]

Each run is `pytest suites/ --hardware=cpu --engine=vllm --workload=doc_edit` in reference mode (smollm2-pld
beside smollm2-pld-released: the same configuration, an A/A), with `--inject-slowdown` for the self-test runs.
A `--workload` subset ends PARTIAL by design, so the exit status is not the verdict: per run, the outcome of every
`reference:*` comparison (PASS / UNKNOWN / REGRESSED) is read from reports/verdict.json, with its change, its
minimum detectable effect and its method, the vLLM servers each arm group started (the evaluation's notes) and the
wall time. Each run's verdict.json, its run record (reports/runs/cpu/smollm2-pld/doc_edit.json, as run.json:
every unit's samples, to split by round, instance or arm order) and terminal output are kept under --out; a
summary table is printed and written to --out/summary.md (appended to, so runs of several sessions add up).
With `--lock FILE` each run holds `flock FILE` (a machine shared with other measurements). Runs alternate A/A and
self-test.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
COMMAND = [
    "-m",
    "pytest",
    "suites/",
    "--hardware=cpu",
    "--engine=vllm",
    "--workload=doc_edit",
    "-q",
    "-p",
    "no:cacheprovider",
]

RECORD = REPO / "reports" / "runs" / "cpu" / "smollm2-pld" / "doc_edit.json"  # each run writes its record here


def outcomes(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """The reference:* comparisons of a verdict document."""
    found = []
    for check in verdict.get("checks", []):
        if check["name"].startswith("reference:"):
            details = check.get("details") or {}
            found.append(
                {
                    "name": check["name"],
                    "outcome": "REGRESSED"
                    if str(check.get("message", "")).startswith("REGRESSED")
                    else details.get("outcome") or ("PASS" if check["passed"] else "BLOCK"),
                    "change": details.get("relative_change"),
                    "mde": details.get("mde"),
                    "method": details.get("method", ""),
                }
            )
    return found


def starts(verdict: dict[str, Any]) -> list[str]:
    """The servers' account in the evaluations' notes (how many instances each arm group had)."""
    return [note for e in verdict.get("evaluations", []) for note in e.get("notes", []) if "instance" in note]


def run_once(kind: str, index: int, slowdown: float, lock: str | None, out: Path) -> dict[str, Any]:
    command = [sys.executable, *COMMAND]
    if kind == "inject":
        command.append(f"--inject-slowdown={slowdown:g}")
    if lock:
        command = ["flock", lock, *command]
    folder = out / f"{time.strftime('%Y%m%d-%H%M%S')}-{kind}-{index}"
    folder.mkdir(parents=True)
    verdict_path = REPO / "reports" / "verdict.json"
    verdict_path.unlink(missing_ok=True)
    RECORD.unlink(missing_ok=True)
    started = time.perf_counter()
    with (folder / "pytest.log").open("w") as log:
        result = subprocess.run(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=False)
    wall_s = time.perf_counter() - started
    took = re.findall(r" in ([0-9.]+)s \(", (folder / "pytest.log").read_text(errors="replace"))
    verdict: dict[str, Any] = {}
    if verdict_path.exists():
        shutil.copy(verdict_path, folder / "verdict.json")
        verdict = json.loads(verdict_path.read_text())
    if RECORD.exists():
        shutil.copy(RECORD, folder / "run.json")
    return {
        "kind": kind,
        "folder": str(folder),
        "exit": result.returncode,
        "wall_s": float(took[-1]) if took else wall_s,  # pytest's own duration: the lock's wait left out
        "with_lock_wait_s": wall_s,
        "verdict": verdict.get("verdict", "none"),
        "comparisons": outcomes(verdict),
        "servers": starts(verdict),
        "errors": [str(e)[:300] for e in verdict.get("errors", [])],
    }


def line(record: dict[str, Any]) -> str:
    counts: dict[str, int] = {}
    for c in record["comparisons"]:
        counts[c["outcome"]] = counts.get(c["outcome"], 0) + 1
    tally = ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "no reference comparisons"
    detail = "; ".join(
        f"{c['name']} {c['outcome']} {100 * (c['change'] or 0):+.1f} % (MDE {100 * (c['mde'] or 0):.1f} %)"
        for c in record["comparisons"]
    )
    servers = " | ".join(re.sub(r"\s+", " ", s) for s in record["servers"]) or "no server notes"
    errors = f" ERRORS: {record['errors']}" if record["errors"] else ""
    return (
        f"| {record['kind']} | {record['wall_s'] / 60:.1f} min | {record['verdict']} | {tally} | {detail} | "
        f"{servers} |{errors}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aa", type=int, default=1, help="A/A runs (default 1)")
    parser.add_argument("--inject", type=int, default=1, help="self-test runs (default 1)")
    parser.add_argument("--slowdown", type=float, default=0.10, help="the self-test's --inject-slowdown (0.10)")
    parser.add_argument("--lock", help="hold `flock FILE` for each run")
    parser.add_argument("--out", type=Path, default=REPO / "reports" / "vllm-aa")
    args = parser.parse_args()
    kinds = []
    for i in range(max(args.aa, args.inject)):
        kinds += [("aa", i)] if i < args.aa else []
        kinds += [("inject", i)] if i < args.inject else []
    args.out.mkdir(parents=True, exist_ok=True)
    summary = args.out / "summary.md"
    if not summary.exists():
        summary.write_text(
            "| run | wall | verdict | reference:* outcomes | each comparison | servers |\n|---|---|---|---|---|---|\n"
        )
    for kind, index in kinds:
        record = run_once(kind, index, args.slowdown, args.lock, args.out)
        (Path(record["folder"]) / "record.json").write_text(json.dumps(record, indent=1))
        text = line(record)
        print(text, flush=True)
        with summary.open("a") as out:
            out.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

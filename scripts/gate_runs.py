"""Run the gate several times as a CI runner would and tabulate what it decided: the rerunnable evidence for how
the gate behaves on a quiet runner, beside a co-tenant CPU hog, and with an injected slowdown.

    python scripts/gate_runs.py --runs 5 [--hog] [--inject 0.10] [-- PYTEST_ARGS …]

Each run is `pytest suites/ --hardware=cpu` (or the arguments after `--`) in this checkout, with `--hog` a
`python -c "while True: pass"` process at the same priority for the whole run, and with `--inject` the gate's
`--inject-slowdown` self-test. Per run it prints the verdict, the wall time, each `reference:*` latency comparison
(outcome, measured change, MDE, per-unit spread), the SLA checks that failed and the
interference the verdict named; a JSON line per run goes to `--out` (default reports/gate_runs.jsonl), and each
run's output and verdict.json beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _pytest() -> list[str]:
    venv = ROOT / ".venv" / "bin" / "pytest"
    return [str(venv)] if venv.exists() else [sys.executable, "-m", "pytest"]


def summarise(verdict: dict, wall_s: float) -> dict:
    """One run's outcome from its verdict.json."""
    comparisons = []
    for check in verdict.get("checks", []):
        if not check["name"].startswith("reference:") or "relative_change" not in check.get("details", {}):
            continue
        details = check["details"]
        comparisons.append(
            {
                "check": f"{check['workload']}/{check['name']}",
                "outcome": "REGRESSED" if details.get("outcome") == "BLOCK" else details.get("outcome"),
                "change": details.get("relative_change"),
                "mde": details.get("mde"),
                "spread": details.get("spread"),
            }
        )
    sla = [
        f"{c['workload']}/{c['name']}: {c['message'][:160]}"
        for c in verdict.get("checks", [])
        if not c["passed"] and c.get("category") == "sla"
    ]
    return {
        "verdict": verdict.get("verdict"),
        "wall_s": round(wall_s, 1),
        "comparisons": comparisons,
        "sla_failed": sla,
        "failed": [f"{c['pair']}/{c['workload']}/{c['name']}" for c in verdict.get("checks", []) if not c["passed"]],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--hog", action="store_true", help="a CPU hog beside every run")
    parser.add_argument("--inject", type=float, help="--inject-slowdown for the candidate")
    parser.add_argument("--out", type=Path, default=ROOT / "reports" / "gate_runs.jsonl")
    parser.add_argument("pytest_args", nargs="*", help="arguments after --, instead of suites/ --hardware=cpu")
    args = parser.parse_args()
    command = _pytest() + (args.pytest_args or ["suites/", "--hardware=cpu"]) + ["-p", "no:cacheprovider"]
    if args.inject is not None:
        command.append(f"--inject-slowdown={args.inject}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    verdict_file = ROOT / "reports" / "verdict.json"
    for index in range(args.runs):
        verdict_file.unlink(missing_ok=True)  # a run that writes none must not be read as the previous run's
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
        try:
            started = time.perf_counter()
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
            wall = time.perf_counter() - started
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
        kept = args.out.with_name(f"{args.out.stem}-{time.strftime('%Y%m%d-%H%M%S')}-run{index + 1}")
        kept.with_suffix(".log").write_text(done.stdout + done.stderr, encoding="utf-8")
        verdict = verdict_file.read_text(encoding="utf-8") if verdict_file.exists() else None
        if verdict is not None:
            kept.with_suffix(".verdict.json").write_text(verdict, encoding="utf-8")
        row = summarise(json.loads(verdict), wall) if verdict is not None else {}
        row.update(run=index + 1, exit=done.returncode, hog=args.hog, inject=args.inject)
        with args.out.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row) + "\n")
        print(f"run {index + 1}: {row.get('verdict')} exit {done.returncode} in {wall / 60:.1f} min", flush=True)
        for c in row.get("comparisons", []):
            change = "" if c["change"] is None else f"{c['change']:+.1%}"
            mde = "" if c["mde"] is None else f", would catch ≥ {c['mde']:.1%}"
            mde += "" if c.get("spread") is None else f", per-unit spread {c['spread']:.1%}"
            print(f"  {c['check']}: {c['outcome']} {change}{mde}", flush=True)
        for line in row.get("sla_failed", []):
            print(f"  SLA {line}", flush=True)
        busy = [line for line in done.stdout.splitlines() if "the machine was" in line]
        for line in busy:
            print(f"  {line.strip()}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

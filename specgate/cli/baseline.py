"""`specgate baseline list|show|diff`: read stored baselines without running anything; `diff` decides with the
same comparison core as the gate (`specgate.checks.regression.compare_runs`)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from specgate.errors import BaselineError
from specgate.store.baselines import Baseline, list_baselines, load_baseline

LATENCY_FIELDS = ("ttft_ms", "tpot_ms", "e2el_ms")


def add_parser(subparsers: Any) -> None:
    """Register the `baseline` subcommand on the main CLI parser."""
    parser = subparsers.add_parser("baseline", help="List, show and diff stored baselines.")
    commands = parser.add_subparsers(dest="baseline_command", required=True)
    listing = commands.add_parser("list", help="List the stored baselines.")
    listing.add_argument("--dir", default="baselines", type=Path, help="Baselines folder (default: baselines).")
    show = commands.add_parser("show", help="What a baseline holds: samples, summaries, provenance.")
    show.add_argument("path", type=Path)
    diff = commands.add_parser("diff", help="Compare two baselines metric by metric, with the statistics.")
    diff.add_argument("old", type=Path)
    diff.add_argument("new", type=Path)
    diff.add_argument(
        "--alpha", type=float, default=None, help="Significance level (default: the NEW run's gate policy, else 0.01)."
    )
    diff.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="Practical relative tolerance (default: the NEW run's SLA limits, else 0.05).",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.baseline_command == "list":
            return _list(args.dir)
        if args.baseline_command == "show":
            return _show(load_baseline(args.path))
        return _diff(load_baseline(args.old), load_baseline(args.new), args)
    except BaselineError as exc:
        print(f"error: {exc}")
        return 2


def _list(root: Path) -> int:
    paths = list_baselines(root)
    if not paths:
        print(f"no baselines under {root}")
        return 0
    print(f"{'hardware':<12} {'pair':<20} {'workload':<16} {'date':<21} {'engine':<13} {'n':>4} {'α':>6} {'S':>6}")
    for path in paths:
        try:
            b = load_baseline(path)
        except BaselineError as exc:
            print(f"{path}: UNREADABLE ({exc})")
            continue
        r = b.record
        arm = r.arms.get("spec")
        rate = None if arm is None else arm.acceptance_rate
        n = 0 if arm is None else len(arm.samples)
        print(
            f"{r.hardware:<12} {r.pair:<20} {r.workload:<16} {r.recorded_at or '?':<21} "
            f"{r.engine or '?':<13} {n:>4} {_num(rate, '.3f'):>6} {_num(r.speedup(), '.2f'):>6}"
        )
    return 0


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _show(b: Baseline) -> int:
    r = b.record
    print(f"{b.path}: hardware {r.hardware}, pair {r.pair}, workload {r.workload}")
    print(f"  recorded {r.recorded_at} by specgate {r.specgate} at commit {r.git_commit}")
    print(f"  engine {r.engine}, versions {dict(r.versions)}, models {dict(r.models)}")
    print(f"  speedup S {_num(r.speedup(), '.3f')}×; accuracy {dict(r.accuracy) or '–'}")
    for name, arm in r.arms.items():
        print(
            f"  arm {name}: {len(arm.samples)} requests, {len(arm.run_walls_s)} runs, "
            f"α {_num(arm.acceptance_rate, '.4f')}"
        )
        for field in LATENCY_FIELDS:
            values, _keys = arm.values(field)
            if values:
                values.sort()
                mean = sum(values) / len(values)
                print(f"    {field:<8} mean {mean:9.2f}  min {values[0]:9.2f}  max {values[-1]:9.2f}")
    return 0


def _diff(old: Baseline, new: Baseline, args: argparse.Namespace) -> int:
    """The gate's `regression:*` checks with `old` as the stored baseline and the newest run of `new` as the run,
    under that run's own gate policy and limits (`--alpha` and `--tolerance` override them)."""
    from specgate.checks.judgement import against_baseline
    from specgate.checks.ladder_baseline import ladder_vs_baseline
    from specgate.checks.levels import family_size
    from specgate.checks.regression import Levels
    from specgate.checks.subject import Subject
    from specgate.config import GatePolicy, SlaLimits
    from specgate.store.records import plan_of

    run = new.record
    policy = GatePolicy(**{k: v for k, v in run.gate.items() if k in {f.name for f in dataclasses.fields(GatePolicy)}})
    sla = SlaLimits(**{k: v for k, v in run.limits.items() if k in {f.name for f in dataclasses.fields(SlaLimits)}})
    if args.alpha is not None:
        policy = dataclasses.replace(policy, alpha=args.alpha)
    if args.tolerance is not None:
        sla = dataclasses.replace(sla, regression_tolerance=args.tolerance)
    plan = plan_of(run)
    rounds = max((s.repetition for arm in run.arms.values() for s in arm.samples), default=0) + 1
    subject = Subject(plan, run, old, str(old.path), sla, len(run.prompts), rounds)
    print(f"diff {old.path} → {new.path} (α {policy.alpha}, tolerance {sla.regression_tolerance:.0%})")
    results = against_baseline(subject, policy, Levels(policy.alpha, 1, family_size([(plan, True)])))
    results.update(ladder_vs_baseline(subject, update=False, hardware=run.hardware))
    failed = False
    for key, result in results.items():
        if isinstance(result, Exception):
            failed = True
            print(f"  ERROR {key.name}: {result}")
            continue
        failed |= not result.passed
        print(f"  {'PASS' if result.passed else 'FAIL'} {result.name}: {result.message}")
    return 1 if failed else 0

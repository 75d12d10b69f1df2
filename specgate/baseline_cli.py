"""`specgate baseline list|show|diff`: read stored baselines without running anything."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from specgate.baselines import Baseline, list_baselines, load_baseline
from specgate.errors import BaselineError
from specgate.stats import compare_samples

LATENCY_FIELDS = (("ttft_ms", False), ("tpot_ms", False), ("e2el_ms", False))


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
    diff.add_argument("--alpha", type=float, default=0.01, help="Significance level (default: 0.01).")
    diff.add_argument("--tolerance", type=float, default=0.05, help="Practical relative tolerance (default: 0.05).")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        if args.baseline_command == "list":
            return _list(args.dir)
        if args.baseline_command == "show":
            return _show(load_baseline(args.path))
        return _diff(load_baseline(args.old), load_baseline(args.new), args.alpha, args.tolerance)
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
        arm = b.arms.get("spec")
        rate = None if arm is None else arm.acceptance_rate
        n = 0 if arm is None else len(arm.samples)
        speedup = _speedup(b)
        print(
            f"{b.hardware:<12} {b.pair:<20} {b.workload:<16} {b.provenance.get('date', '?'):<21} "
            f"{b.provenance.get('engine', '?'):<13} {n:>4} {_num(rate, '.3f'):>6} {_num(speedup, '.2f'):>6}"
        )
    return 0


def _num(value: float | None, fmt: str) -> str:
    return "–" if value is None else format(value, fmt)


def _speedup(b: Baseline) -> float | None:
    ref, cand = b.arms.get("ar"), b.arms.get("spec")
    if ref is None or cand is None or not sum(cand.run_walls_s):
        return None
    return sum(ref.run_walls_s) / sum(cand.run_walls_s)


def _show(b: Baseline) -> int:
    p = b.provenance
    print(f"{b.path}: hardware {b.hardware}, pair {b.pair}, workload {b.workload}")
    print(f"  recorded {p.get('date')} by specgate {p.get('specgate')} at commit {p.get('git_commit')}")
    print(f"  engine {p.get('engine')}, versions {p.get('versions')}, models {p.get('models')}")
    print(f"  speedup S {_num(_speedup(b), '.3f')}×; accuracy {dict(b.accuracy) or '–'}")
    for name, arm in b.arms.items():
        print(
            f"  arm {name}: {len(arm.samples)} requests, {len(arm.run_walls_s)} runs, "
            f"α {_num(arm.acceptance_rate, '.4f')}"
        )
        for field, _ in LATENCY_FIELDS:
            values, _keys = arm.values(field)
            if values:
                values.sort()
                mean = sum(values) / len(values)
                print(f"    {field:<8} mean {mean:9.2f}  min {values[0]:9.2f}  max {values[-1]:9.2f}")
    return 0


def _diff(old: Baseline, new: Baseline, alpha: float, tolerance: float) -> int:
    print(f"diff {old.path} → {new.path} (α {alpha}, tolerance {tolerance:.0%})")
    regressed = False
    for arm in sorted(set(old.arms) & set(new.arms)):
        a, b = old.arms[arm], new.arms[arm]
        for field, higher in LATENCY_FIELDS:
            (va, ka), (vb, kb) = a.values(field), b.values(field)
            if len(va) < 2 or len(vb) < 2:
                continue
            comparison = compare_samples(
                f"{arm}.{field}",
                va,
                vb,
                higher_is_better=higher,
                alpha=alpha,
                tolerance=tolerance,
                baseline_keys=ka,
                current_keys=kb,
                n_boot=1000,
            )
            regressed |= comparison.regressed
            print(f"  {comparison.describe()}")
        ra, rb = a.acceptance_rate, b.acceptance_rate
        if ra is not None and rb is not None:
            print(f"  {arm}.acceptance_rate: {ra:.4f} → {rb:.4f} ({(rb - ra) / ra:+.1%})")
        changed = sum(1 for x, y in zip(_outputs(a), _outputs(b), strict=False) if x != y)
        print(f"  {arm}.outputs: {changed} of {min(len(a.samples), len(b.samples))} requests changed")
    return 1 if regressed else 0


def _outputs(arm: Any) -> list[tuple[int, ...]]:
    return [s.output_ids for s in sorted(arm.samples, key=lambda s: s.key)]

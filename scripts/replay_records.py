"""Re-judge stored reference-mode run records offline: the comparisons beside the reference, as the gate judged them
before (mean log ratio, Student-t, REGRESSED only beyond the tolerance, Bonferroni over every statistic) and as it
judges them now (20 % trimmed mean with Yuen's standard error, max-t levels per arm, REGRESSED when significant and
not shown within the tolerance), with each comparison's minimum detectable effect.

    python scripts/replay_records.py RECORD.json [RECORD.json …] [--looks-before 5 --family-before 10]

A record is a `reports/runs/<hardware>/<pair>/<workload>.json` file (baseline format, schema 2 or 3) of a run in
reference mode: arms `ar`, `spec` and `ref-spec`. Records of engines that measured no CPU time are judged in wall
time (the clock the gate then uses too). Nothing here tunes the gate: it prints what the same code decides.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specgate.checks.beside import beside_latency  # noqa: E402
from specgate.checks.regression import Levels  # noqa: E402
from specgate.checks.subject import Subject  # noqa: E402
from specgate.comparison import SPECULATIVE_METRICS, Metric, clock_of  # noqa: E402
from specgate.config import GatePolicy, SlaLimits  # noqa: E402
from specgate.plan import Arm, MeasurementPlan  # noqa: E402
from specgate.stats.decision import t_quantile  # noqa: E402
from specgate.store.codec import from_data  # noqa: E402
from specgate.store.records import RunRecord  # noqa: E402


def load(path: Path) -> RunRecord:
    raw = json.loads(path.read_text(encoding="utf-8"))
    record: RunRecord = from_data(RunRecord, raw["runs"][-1], "run")
    return record


def plan_of(record: RunRecord) -> MeasurementPlan:
    from specgate.config import Speculation

    marker = Speculation("prompt_lookup", 3)
    names = ("ar", "spec", "ref-spec")
    arms = tuple(
        Arm(n, n.removeprefix("ref-"), record.pair, n.startswith("ref-"), "", None if n == "ar" else marker, "")
        for n in names
    )
    return MeasurementPlan(
        record.pair, record.workload, arms, (("spec", "ar"), ("ref-spec", "ar")), beside=(("spec", "ref-spec"),),
        reference="released",
    )  # fmt: skip


def _log_ratios(record: RunRecord, metric: Metric) -> np.ndarray:
    """The per-unit log ratios candidate/reference the gate used to average (probes included for TTFT)."""
    arms = record.arms
    view = record.ttft_view if metric.field == "ttft_ms" else (lambda a: arms[a])
    if metric.kind == "speedup":
        field = "wall_ms"
        a, b = arms["spec"].by_key(field), arms["ref-spec"].by_key(field)
    else:
        a, b = view("spec").by_key(metric.field), view("ref-spec").by_key(metric.field)
    keys = sorted(set(a) & set(b))
    return np.asarray([math.log(a[k] / b[k]) for k in keys])


def before(record: RunRecord, metric: Metric, policy: GatePolicy, looks: int, family: int) -> str:
    """The old decision: mean and its standard error, PASS if the upper bound < threshold, REGRESSED only when
    significant and the estimate beyond the threshold; MDE = max(threshold, t_b se) + t_0.95 se."""
    if metric.kind == "tail":
        return "(permutation test, unchanged)"
    d = _log_ratios(record, metric)
    n = len(d)
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(n))
    threshold = math.log1p(0.05)
    alpha_pass, alpha_block = policy.alpha / looks, policy.alpha / (looks * family)
    t_pass, t_block, t_power = (t_quantile(1 - a, n - 1) for a in (alpha_pass, alpha_block, 0.05))
    t_power = t_quantile(0.95, n - 1)
    upper = mean + t_pass * se
    significant = mean / se > t_block if se else mean > 0
    outcome = "PASS" if upper < threshold else ("REGRESSED" if significant and mean > threshold else "UNKNOWN")
    mde = math.expm1(max(threshold, t_block * se) + t_power * se)
    return f"{outcome:9s} {math.expm1(mean):+6.1%} (≤ {math.expm1(upper):+6.1%}), n={n:3d}, would catch ≥ {mde:5.1%}"


def after(record: RunRecord, policy: GatePolicy, family: int) -> dict[str, str]:
    plan = plan_of(record)
    subject = Subject(plan, record, None, "", SlaLimits(), len(record.prompts), 0)
    levels = Levels(policy.alpha, min(policy.looks, policy.max_repetitions - policy.repetitions + 1), family)
    found = {}
    for key, check in beside_latency(subject, policy, levels).items():
        name = key.name
        if isinstance(check, Exception):
            found[name] = f"cannot be compared: {check}"
            continue
        d = check.details
        upper = "" if check.ci is None else f" (≤ {check.ci[1]:+6.1%})"
        outcome = {"BLOCK": "REGRESSED"}.get(str(d["outcome"]), str(d["outcome"]))
        found[name] = f"{outcome:9s} {d['relative_change']:+6.1%}{upper}, n={check.n:3d}, would catch ≥ {d['mde']:5.1%}"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--looks-before", type=int, default=5, help="looks of the old gate (max − first rounds + 1)")
    parser.add_argument("--family-before", type=int, default=10, help="statistics in the old Bonferroni family")
    parser.add_argument("--family-after", type=int, default=4, help="groups in the family now (2 workloads × 2)")
    args = parser.parse_args()
    policy = GatePolicy()
    for path in args.records:
        record = load(path)
        clock = clock_of(policy.clock, record.arms["spec"], record.arms["ref-spec"])
        print(f"{path.name}: {record.pair}/{record.workload}, {len(record.arms['spec'].samples)} units, {clock} time")
        now = after(record, policy, args.family_after)
        for metric in SPECULATIVE_METRICS:
            name = f"reference:{metric.name}"
            print(
                f"  {metric.name:12s} before: {before(record, metric, policy, args.looks_before, args.family_before)}"
            )
            print(f"  {'':12s} after:  {now.get(name, '—')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

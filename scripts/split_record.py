"""Split a reference-mode run record by round and by engine instance: where does a difference between the candidate
and the reference come from?

    python scripts/split_record.py RECORD.json [RECORD.json …] [--metric tpot_ms] [--draws 20000]

A record is a `reports/runs/<hardware>/<pair>/<workload>.json` file of a run in reference mode (arms `spec` and
`ref-spec`). Per round (the unit's repetition) and per instance of the candidate's engine it prints the mean
candidate/reference ratio of the metric and each unit's ratio; then, over all units, the 20 % trimmed mean with
Yuen's standard error (the gate's estimator), its t, degrees of freedom and one-sided p-values (candidate slower,
candidate faster), the Wilcoxon signed-rank p (two-sided), and a sign-flip resampling of these same units (each
unit's log ratio keeps its size and takes a random sign, as it would if the arms did not differ): how often Yuen's
test reaches the observed one-sided p. A difference that one round or one instance carries points at the place
(a server switch, a new instance); one spread over rounds and instances that the resampling reaches rarely is
chance at the level it states. Nothing here changes a verdict: it reads what the run measured.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats as st

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specgate.stats.robust import trimmed  # noqa: E402
from specgate.store.codec import from_data  # noqa: E402
from specgate.store.records import RunRecord  # noqa: E402


def units(record: RunRecord, metric: str) -> list[tuple[int, str, float]]:
    """(round, candidate's instance, log ratio candidate/reference) per unit both arms measured."""
    arms = record.ttft_view if metric == "ttft_ms" else (lambda a: record.arms[a].latest())
    cand, ref = arms("spec"), arms("ref-spec")
    ref_by_key = {s.key: s for s in ref.samples}
    found = []
    for s in cand.samples:
        r = ref_by_key.get(s.key)
        a, b = getattr(s, metric), getattr(r, metric) if r else None
        if a and b:
            found.append((s.repetition, s.instance or "-", math.log(a / b)))
    return found


def one_sided(values: np.ndarray) -> tuple[float, float, float, float]:
    loc = trimmed(values)
    t = loc.estimate / loc.se if loc.se else 0.0
    return loc.estimate, t, loc.df, float(st.t.sf(t, loc.df))


def report(path: Path, metric: str, draws: int) -> None:
    raw = json.loads(path.read_text(encoding="utf-8"))
    record: RunRecord = from_data(RunRecord, raw["runs"][-1], "run")
    found = units(record, metric)
    if not found:
        print(f"{path}: no paired units of {metric} (is it a reference-mode record?)")
        return
    print(f"{path}: {record.pair}/{record.workload}, {record.engine or 'engine?'}, {metric}, {len(found)} units")
    for label, index in (("round", 0), ("candidate's instance", 1)):
        groups: dict[object, list[float]] = defaultdict(list)
        for unit in found:
            groups[unit[index]].append(unit[2])
        for key in sorted(groups):  # type: ignore[type-var]  # rounds are ints, instances strings
            d = np.asarray(groups[key])
            each = " [" + " ".join(f"{math.expm1(x):+.1%}" for x in d) + "]" if len(d) <= 12 else ""
            print(f"  {label} {key}: mean {math.expm1(d.mean()):+.1%} over {len(d)} units{each}")
    d = np.asarray([u[2] for u in found])
    estimate, t, df, p_slower = one_sided(d)
    p_faster = 1.0 - p_slower
    wilcoxon = float(st.wilcoxon(d).pvalue) if len(d) >= 6 and np.any(d) else float("nan")
    print(
        f"  trimmed mean {math.expm1(estimate):+.1%}, Yuen t {t:+.2f}, df {df:.0f}: p(candidate slower) "
        f"{p_slower:.4f}, p(candidate faster) {p_faster:.4f}; Wilcoxon two-sided {wilcoxon:.3f}"
    )
    p_observed = min(p_slower, p_faster)
    rng = np.random.default_rng(0)
    reached = sum(
        min(p := one_sided(d * rng.choice((-1.0, 1.0), size=len(d)))[3], 1.0 - p) <= p_observed for _ in range(draws)
    )
    print(
        f"  sign-flip resampling ({draws} draws): one-sided p ≤ {p_observed:.4f} (either direction) "
        f"in {reached / draws:.2%}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--metric", default="tpot_ms", choices=("ttft_ms", "tpot_ms", "e2el_ms", "wall_ms"))
    parser.add_argument("--draws", type=int, default=20000, help="sign-flip resampling draws (default 20000)")
    args = parser.parse_args()
    for path in args.records:
        report(path, args.metric, args.draws)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

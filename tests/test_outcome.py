"""A check's decision is typed: `Check.outcome` reads the outcome a comparison stated as an `Outcome`, and every
outcome the checks write is one of them; checks are built by one constructor, and a failed one names its kind
(`Check.failure`) from those typed fields, never from its message."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specgate.checks import (
    DRIFT,
    INFRASTRUCTURE,
    NO_BASELINE,
    REGRESSION,
    SLA,
    UNUSABLE_BASELINE,
    Check,
    Failure,
    Outcome,
    check,
)
from specgate.checks.ladder_baseline import NOT_MEASURED, NOT_RECORDED

REPO = Path(__file__).resolve().parent.parent


def _check(**details: object) -> Check:
    return Check("reference:tpot_ms", "pair", "docs", REGRESSION, False, "m", details=details)


def test_a_stated_outcome_is_read_as_its_member() -> None:
    assert _check(outcome="UNKNOWN").outcome is Outcome.UNKNOWN
    assert _check(outcome="BLOCK").outcome is Outcome.BLOCK
    assert _check().outcome is None  # an SLA or a report states none
    for constant in (NO_BASELINE, UNUSABLE_BASELINE, NOT_RECORDED, NOT_MEASURED):
        assert _check(outcome=constant).outcome == constant


def test_an_outcome_outside_the_enum_is_an_error() -> None:
    with pytest.raises(ValueError):
        _ = _check(outcome="REGRESSED").outcome


def test_every_outcome_the_checks_write_is_a_member() -> None:
    written = set()
    for path in (REPO / "specgate").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        written |= set(re.findall(r'"outcome": "([A-Z ]+)"', text))
        written |= set(re.findall(r'_check\(subject, \w+, (?:True|False), message, "([A-Z ]+)"', text))
    assert written and written <= {member.value for member in Outcome}, written


def test_the_package_builds_checks_through_one_constructor_that_refuses_bad_ones() -> None:
    direct = [
        f"{path.relative_to(REPO)}:{number}"
        for path in (REPO / "specgate").rglob("*.py")
        if path != REPO / "specgate" / "checks" / "__init__.py"
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"(?<![\w.])Check\(", line)
    ]
    assert direct == []  # everything else goes through specgate.checks.check
    built = check("reference:tpot_ms", ("pair", "docs"), REGRESSION, False, "m", details={"outcome": "UNKNOWN"})
    assert (built.pair, built.workload, built.outcome) == ("pair", "docs", Outcome.UNKNOWN)
    with pytest.raises(ValueError, match="category 'regresion'"):
        check("reference:tpot_ms", ("pair", "docs"), "regresion", False, "m")
    with pytest.raises(ValueError, match="outcome 'REGRESSED'"):
        check("reference:tpot_ms", ("pair", "docs"), REGRESSION, False, "m", details={"outcome": "REGRESSED"})


@pytest.mark.parametrize(
    ("name", "category", "details", "kind"),
    [
        ("samples", INFRASTRUCTURE, {}, Failure.INFRASTRUCTURE),
        ("p99_ttft", SLA, {}, Failure.SLA),
        ("reference:tpot_ms", REGRESSION, {"outcome": "BLOCK"}, Failure.LATENCY),
        ("regression:tpot_ms", REGRESSION, {"outcome": "UNKNOWN"}, Failure.UNDECIDED),
        ("regression:tpot_ms", REGRESSION, {"outcome": "NOT COMPARABLE"}, Failure.NOT_COMPARABLE),
        ("regression:output_drift", REGRESSION, {"outcome": "NOT COMPARABLE", "what": "outputs"}, Failure.OTHER_ENGINE),
        ("regression:tpot_ms", REGRESSION, {"outcome": NO_BASELINE}, Failure.BASELINE),
        ("regression:environment", REGRESSION, {"outcome": "NOT RECORDED"}, Failure.NO_HISTORY),
        ("reference:acceptance_rate", REGRESSION, {"outcome": "BLOCK"}, Failure.ACCEPTANCE),
        ("reference:spec-g6.acceptance_rate", REGRESSION, {"outcome": "BLOCK"}, Failure.ACCEPTANCE),
        ("reference:output_drift", REGRESSION, {}, Failure.OUTPUTS),
        ("greedy_identity", DRIFT, {}, Failure.OUTPUTS),
        ("regression:task_accuracy", REGRESSION, {}, Failure.ACCURACY),
        ("regression:ladder:kv4", REGRESSION, {"ladder": True, "outcome": "BLOCK"}, Failure.LADDER_REGRESSED),
        ("ladder:kv4", REGRESSION, {"ladder": True, "unscored": True}, Failure.LADDER_UNSCORED),
        ("ladder:kv4", REGRESSION, {"ladder": True}, Failure.LADDER),
    ],
)
def test_a_failed_check_names_its_kind_from_typed_fields(
    name: str, category: str, details: dict[str, object], kind: Failure
) -> None:
    failed = check(name, ("pair", "docs"), category, False, "any words at all", details=details)
    assert failed.failure is kind
    assert check(name, ("pair", "docs"), category, True, "any words", details=details).failure is None

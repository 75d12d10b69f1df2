"""A check's decision is typed: `Check.outcome` reads the outcome a comparison stated as an `Outcome`, and every
outcome the checks write is one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specgate.checks import NO_BASELINE, REGRESSION, UNUSABLE_BASELINE, Check, Outcome
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

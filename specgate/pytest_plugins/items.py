"""Which pair × workload (× arm or metric) a pytest item of a gate session checks: shared by the plugin and the
Allure integration."""

from __future__ import annotations

import pytest

from specgate.checks import Check
from specgate.checks.catalogue import Context, Target, applicable


def item_target(item: pytest.Item) -> Target | None:
    """The item's `pair`, `workload` and, for catalogue checks per arm or metric, `check_param` parameters."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    pair, workload = callspec.params.get("pair"), callspec.params.get("workload")
    if not isinstance(pair, str) or not isinstance(workload, str):
        return None
    param = callspec.params.get("check_param")
    return Target(pair, workload, param if isinstance(param, str) else None)


# the check a gate item recorded (set by the `gate_check` fixture), for the reports that name items by their check
ITEM_CHECK = pytest.StashKey[Check]()


def missing_checks(
    run: Context, pairs: list[str], workloads: list[str], items: list[pytest.Item], marker: str = "specgate_check"
) -> list[str]:
    """The applicable checks of the catalogue (on the run's pairs and workloads) that no selected item runs, as
    "pair/workload/check[param]"."""
    selected = set()
    for item in items:
        mark = item.get_closest_marker(marker)
        target = item_target(item)
        if mark is not None and target is not None:
            selected.add((str(mark.args[0]), target))
    return [
        f"{t.pair}/{t.workload}/{entry.name}" + (f"[{t.param}]" if t.param else "")
        for entry, t in applicable(run, pairs, workloads)
        if (entry.name, t) not in selected
    ]

"""The gate run by its parts: values made once (`Memo`), each plan built once, the hardware backend resolved and
checked once and handed to the engine, regression checks addressed by a typed key, and the partial-run rule."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from specgate.checks import Against, RegressionKey, baseline_key, reference_key
from specgate.config import HardwareProfile
from specgate.engines.fake import FakeEngine
from specgate.plan import Arm
from specgate.run import GateItems, GateOptions, GateRun
from specgate.run.memo import Memo


def test_a_memo_makes_each_value_once_and_raises_a_kept_failure_again() -> None:
    made: list[str] = []
    memo: Memo[str, int] = Memo()

    def make(key: str) -> Callable[[], int]:
        def build() -> int:
            made.append(key)
            if key == "broken":
                raise ValueError("no such thing")
            return len(key)

        return build

    assert memo.get("abc", make("abc")) == 3
    assert memo.get("abc", make("abc")) == 3
    for _ in range(2):
        with pytest.raises(RuntimeError, match="wrapped: no such thing"):
            memo.get("broken", make("broken"), lambda exc: RuntimeError(f"wrapped: {exc}"))
    assert made == ["abc", "broken"]
    assert memo.values() == [3]
    memo.clear()
    assert memo.values() == []


def test_a_partial_run_says_why_it_is_not_a_verdict() -> None:
    items = GateItems(expected=3, finished=3)
    assert items.shortfall() is None and items.gated
    items.finished = 2
    assert items.shortfall() == "1 of 3 gate checks did not run to the end: a partial run is not a pass"
    items.interrupted = True
    assert "interrupted" in str(items.shortfall())
    assert not GateItems().gated and GateItems(asked=True).gated


def test_regression_keys_name_their_checks() -> None:
    assert reference_key("tpot_ms").name == "reference:tpot_ms"
    assert baseline_key("ladder:kv") == RegressionKey(Against.BASELINE, "ladder:kv")
    assert baseline_key("ladder:kv").name == "regression:ladder:kv"
    assert reference_key("tpot_ms") != baseline_key("tpot_ms")


class _Counting:
    """A hardware backend that counts the availability checks made on it."""

    def __init__(self, real: Any) -> None:
        self.real, self.checks = real, 0

    def check_available(self) -> None:
        self.checks += 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def _receiving(received: list[object]) -> FakeEngine:
    """The fake engine, keeping the backend its `load` was handed in `received`."""

    class Receiving(FakeEngine):
        def load(self, arms: Sequence[Arm], hardware: HardwareProfile, backend: Any = None) -> None:
            received.append(backend)
            super().load(arms, hardware, backend)

    return Receiving()


def test_the_run_resolves_the_backend_and_each_plan_once_and_hands_the_backend_to_the_engine(
    gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import specgate.run.scope as scope
    from specgate.hardware.backends import get_backend

    root = gate_project()
    resolved: list[_Counting] = []

    def resolve(backend: str, device: str, *, profile: str | None = None) -> Any:
        resolved.append(_Counting(get_backend(backend, device, profile=profile)))
        return resolved[-1]

    def again(*args: object, **kwargs: object) -> None:
        raise AssertionError("the hardware backend was resolved a second time")

    built: list[tuple[str, str]] = []
    from specgate.plan import build_plan as real_plan

    def build_plan(project: Any, pair: str, workload: str, *args: Any, **kwargs: Any) -> Any:
        built.append((pair, workload))
        return real_plan(project, pair, workload, *args, **kwargs)

    monkeypatch.setattr(scope, "get_backend", resolve)
    monkeypatch.setattr(scope, "build_plan", build_plan)
    monkeypatch.setattr("specgate.measuring.get_backend", again)
    monkeypatch.setattr("specgate.hardware.fingerprint.get_backend", again)
    received: list[object] = []
    run = GateRun.from_options(GateOptions(config=root / "specgate.yaml", out_dir=root / "reports"))
    run.engine_factory = lambda name, base: _receiving(received)
    verdict = run.run_all()
    run.finish()
    assert verdict.checks and not verdict.errors
    assert len(resolved) == 1 and resolved[0].checks == 1  # resolved and checked once, before any engine
    assert received == [resolved[0]]
    assert sorted(built) == sorted(set(built)) == [(p, w) for p in run.pairs for w in run.workloads]


def test_a_failed_measurement_is_raised_for_each_of_its_regression_checks(
    gate_project: Callable[..., Path],
) -> None:
    root = gate_project()
    run = GateRun.from_options(GateOptions(config=root / "specgate.yaml", out_dir=root / "reports"))

    class Broken(FakeEngine):
        def run(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("the engine fell over")

    run.engine_factory = lambda name, base: Broken()
    pair, workload = run.pairs[0], run.workloads[0]
    for key in (baseline_key("tpot_ms"), baseline_key("output_drift")):
        with pytest.raises(Exception, match="the engine fell over"):
            run.regression_check(pair, workload, key)
    run.close()

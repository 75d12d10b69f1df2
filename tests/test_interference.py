"""How busy the machine was, in the words an UNKNOWN carries: interference the engine measured, none measured, or
none measurable."""

from __future__ import annotations

import pytest

from specgate.checks.beside import _busy_text
from specgate.checks.interference import busy
from specgate.measure.samples import ArmSamples, Sample


def _requests(field: str, values: list[float | None], e2el: float = 1000.0, **alike: float) -> ArmSamples:
    """Requests of one second each, with `field` set to each of `values` in turn and the `alike` fields to one value."""
    samples = tuple(
        Sample(f"p{i}#0", f"p{i}", 0, 100.0, 10.0, e2el, e2el, 90, 0, 0, (), **{field: v}, **alike)  # type: ignore[arg-type]
        for i, v in enumerate(values)
    )
    return ArmSamples(samples, tuple(e2el / 1000 for _ in samples), tuple(s.key for s in samples))


def _arm(waits: list[float | None]) -> ArmSamples:
    return _requests("wait_ms", waits)


@pytest.mark.parametrize(
    ("field", "values", "head"),
    [
        ("wait_ms", [300.0, 300.0, 0.0, 0.0], "the measured process waited for a CPU 15% of its time"),
        ("others_ms", [480.0, 520.0, 0.0, 0.0], "other processes took 25% of the machine's CPU"),  # a server's
    ],
)
def test_a_busy_machine_is_named_with_its_share_and_units(field: str, values: list[float | None], head: str) -> None:
    """By the engine's own wait where it is measured; by other processes' CPU where only that is (a server's
    requests, with its own processes' CPU pressure of 40 % beside it)."""
    arm = _requests(field, values, pressure_ms=400.0)
    found = busy([arm])
    assert found.busy and found.interfered_units == 2
    assert found.describe().startswith(f"the machine was busy: {head}")
    assert "2 of 4 requests under interference" in found.describe()
    assert "quieter runner" in _busy_text([arm])


def test_a_quiet_machine_says_the_spread_is_not_interference_it_saw() -> None:
    text = _busy_text([_arm([1.0, 0.0, 2.0, 0.0])])
    assert text.startswith("the machine was quiet: the measured process waited for a CPU 0% of its time")
    assert "from below the machine" in text and "quieter runner" not in text


def test_no_interference_measured_says_nothing() -> None:
    assert _busy_text([_arm([None, None])]) == ""
    assert busy([_arm([None, None])]).describe() == "interference not measured"


def _served(others: list[float | None]) -> ArmSamples:
    """A server's requests: the engine's own wait unknown, other processes' CPU and a pressure of 40 % measured."""
    return _requests("others_ms", others, pressure_ms=400.0)


def test_a_servers_own_cpu_pressure_does_not_make_a_quiet_machine_busy() -> None:
    """A vLLM server's worker spins while its other processes want a CPU: pressure 40 % with nothing else running.
    Where other processes' CPU is measured, that decides, and the words say which is which."""
    found = busy([_served([5.0, 0.0, 10.0, 5.0])])
    assert not found.busy and found.interfered_units == 0
    assert found.describe().startswith("the machine was quiet: other processes took 0% of the machine's CPU")
    assert "CPU pressure 40% with the gate's own processes' waits" in found.describe()
    assert "from below the machine" in _busy_text([_served([5.0, 0.0, 10.0, 5.0])])


def test_without_other_processes_measured_pressure_still_decides() -> None:
    found = busy([_requests("others_ms", [None, None], pressure_ms=400.0)])
    assert found.busy and found.others_share is None and "with the gate's own" not in found.describe()


def test_rollback_sets_plain_decodings_tail_beside_the_same_kind_of_requests() -> None:
    """The P99 of 64 TTFTs (requests and probes) lies further out than the P99 of 16: with probes on the speculative
    arm only, plain decoding's tail is set beside the arm's full requests, and a plain decoding no faster on those
    is never the advice (the arm's 3,100 ms over probes too, 2,900 on its requests, plain 2,950)."""
    from specgate.checks.sla import _tail_rollback
    from specgate.checks.tail import Tail
    from specgate.config import SlaLimits

    sla = SlaLimits(p99_ttft_ms=2000.0)
    mine, alike = Tail(3100.0, 3100.0, 64, 64, True, ""), Tail(2900.0, 2900.0, 16, 16, True, "")
    slower = _tail_rollback("p", "cpu", None, sla, (mine, Tail(2950.0, 2950.0, 16, 16, True, ""), alike))
    assert len(slower) == 1 and "with and without speculation" in slower[0]
    assert "plain decoding 2950 ms against 2900 ms on its full requests alone" in slower[0]
    faster = _tail_rollback("p", "cpu", None, sla, (mine, Tail(2500.0, 2500.0, 16, 16, True, ""), alike))
    assert faster == ["roll back pair 'p' on 'cpu': P99 TTFT 3100 ms > 1.2 × SLA 2000 ms; fall back to plain decoding"]

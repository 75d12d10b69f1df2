"""How busy the machine was, in the words an UNKNOWN carries: interference the engine measured, none measured, or
none measurable."""

from __future__ import annotations

from specgate.checks.beside import _busy_text
from specgate.checks.interference import busy
from specgate.measure.samples import ArmSamples, Sample


def _arm(waits: list[float | None], e2el: float = 1000.0) -> ArmSamples:
    samples = tuple(
        Sample(f"p{i}#0", f"p{i}", 0, 100.0, 10.0, e2el, e2el, 90, 0, 0, (), wait_ms=w) for i, w in enumerate(waits)
    )
    return ArmSamples(samples, tuple(e2el / 1000 for _ in samples), tuple(s.key for s in samples))


def test_a_busy_machine_is_named_with_its_share_and_units() -> None:
    found = busy([_arm([300.0, 300.0, 0.0, 0.0])])
    assert found.busy and found.interfered_units == 2
    assert found.describe().startswith("the machine was busy: the measured process waited for a CPU 15% of its time")
    assert "2 of 4 requests under interference" in found.describe()
    assert "quieter runner" in _busy_text([_arm([300.0, 300.0, 0.0, 0.0])])


def test_a_quiet_machine_says_the_spread_is_not_interference_it_saw() -> None:
    text = _busy_text([_arm([1.0, 0.0, 2.0, 0.0])])
    assert text.startswith("the machine was quiet: the measured process waited for a CPU 0% of its time")
    assert "from below the machine" in text and "quieter runner" not in text


def test_no_interference_measured_says_nothing() -> None:
    assert _busy_text([_arm([None, None])]) == ""
    assert busy([_arm([None, None])]).describe() == "interference not measured"

"""What the machine did around a measured call (`specgate.measure.pressure`): the CPU other processes took is the
machine's CPU time less the gate's own processes' (this one and its servers' groups), exactly, whatever else runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from specgate.measure.pressure import PressureReading, between, own_cpu, read_pressure

SPIN = "import time\nend = time.process_time() + 30\nwhile time.process_time() < end: pass\n"


def _reading(used: float, own: dict[int, float] | None, cpus: int = 2) -> PressureReading:
    return PressureReading(None, None, used, cpus, own)


def test_other_work_is_the_machines_cpu_less_the_gates_own_over_the_cpus() -> None:
    met = between(_reading(10.0, {1: 1.0, 2: 5.0}), _reading(14.0, {1: 2.0, 2: 5.5, 3: 0.5}))
    assert met.others_s == (4.0 - 1.0 - 0.5 - 0.5) / 2  # pid 3 started meanwhile: all its CPU time is the gate's


def test_other_work_is_unknown_when_one_of_the_gates_processes_ended_meanwhile() -> None:
    assert between(_reading(10.0, {1: 1.0, 2: 5.0}), _reading(14.0, {1: 2.0})).others_s is None
    assert between(_reading(10.0, None), _reading(14.0, {1: 2.0})).others_s is None


def test_a_process_in_a_servers_group_is_the_gates_own_and_any_other_is_not() -> None:
    """Two readings of the same moments, one counting a spinning process as a server's and one not: the other work
    differs by exactly that process's CPU time (over the number of CPUs), whatever else the machine ran."""
    child = subprocess.Popen([sys.executable, "-c", SPIN], start_new_session=True)
    try:
        time.sleep(0.3)
        group = frozenset({child.pid})
        first = read_pressure()
        as_server, as_other = own_cpu(group), own_cpu(frozenset())
        time.sleep(1.0)
        last = read_pressure()
        as_server_after, as_other_after = own_cpu(group), own_cpu(frozenset())
    finally:
        child.kill()
        child.wait()
    assert as_server is not None and as_other is not None and as_server_after is not None and as_other_after
    assert child.pid in as_server and child.pid not in as_other and os.getpid() in as_other
    spun = as_server_after[child.pid] - as_server[child.pid]
    assert spun > 0.2  # it ran (at least a fifth of a CPU for a second, on a machine however busy)

    def others(before: dict[int, float], after: dict[int, float]) -> float:
        found = between(
            PressureReading(None, None, first.used_s, first.cpus, before),
            PressureReading(None, None, last.used_s, last.cpus, after),
        ).others_s
        assert found is not None
        return found

    tick = 1 / os.sysconf("SC_CLK_TCK")
    foreign, served = others(as_other, as_other_after) * last.cpus, others(as_server, as_server_after) * last.cpus
    assert foreign >= spun - 3 * tick  # not the gate's: all of its CPU time is other work
    assert served <= foreign - spun + 3 * tick  # a server's: none of it is


def test_other_processes_cpu_is_measured_only_where_the_gate_knows_its_own() -> None:
    """An engine measuring servers it did not start (`ServesFromElsewhere`) may have them on this machine: their CPU
    would read as other work, so it is not measured there; an in-process engine's call has it measured."""
    from specgate.config import Speculation
    from specgate.engines.base import Prompt
    from specgate.engines.fake import FakeBehaviour, FakeEngine
    from specgate.measure.protocol import timed_run
    from specgate.plan import two_arm_plan

    class Endpoint(FakeEngine):
        def endpoints(self) -> dict[str, str]:
            return {"spec": "http://127.0.0.1:8000/v1"}

    prompt = Prompt("p0", "document 0 " * 10, max_new_tokens=8)
    found = []
    for engine in (FakeEngine(FakeBehaviour()), Endpoint(FakeBehaviour())):
        engine._arms = {arm.name: arm for arm in two_arm_plan("fake", "w", Speculation("prompt_lookup", 3)).arms}
        found.append(timed_run(engine, [prompt], "spec", 0, None).others_s)
    assert found[0] is not None and found[1] is None

"""Progress lines while a pair × workload is measured: nobody should wait minutes on a silent terminal.

`ProgressLines` is a `specgate.measure.protocol.Progress` that writes through any `write(text, final)` callable:
on a terminal (`live=True`) one line rewritten in place after every unit; elsewhere (a CI log) a line when the
measurement starts, at every look, when it ends, and in between at most every `every_s` seconds (at least one line
a minute by default: a unit's line is written early when the next unit, as long as the last one, would end
past that). Each line names the pair × workload, the round, the units done of those planned, the elapsed
time and an estimate of the time left (from the time per arm-request so far, as later rounds may run fewer arms:
plain decoding in the first only, the arms of undecided comparisons after a look; the time spent starting an
engine's servers is left out of it); a look says what each comparison decided so far and what is measured next, and
an engine that starts servers while it measures says when each starts and is up.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from specgate.measure.protocol import Next
from specgate.plan import MeasurementPlan

Write = Callable[[str, bool], None]


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s"


class ProgressLines:
    """Progress of the measurements of a run, as lines (see the module docstring)."""

    def __init__(self, write: Write, *, live: bool, every_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self._write = write
        self._live = live
        self._every = every_s
        self._clock = clock
        self._start = 0.0
        self._last = 0.0  # when the last line was written
        self._unit_end = 0.0  # when the last unit ended
        self._prompts = 1

    def started(self, plan: MeasurementPlan, units: int, rounds: int) -> None:
        self._start = self._last = self._unit_end = self._clock()
        self._prompts = max(1, units)
        arms = ", ".join(plan.names)
        self._write(
            f"specgate: measuring {plan.pair} / {plan.workload}: arms {arms}; {units} prompts × {rounds} rounds to "
            "start with",
            True,
        )

    def unit_done(
        self,
        plan: MeasurementPlan,
        round_index: int,
        done: int,
        planned: int,
        work: tuple[int, int] | None = None,
        setup_s: float = 0.0,
    ) -> None:
        now = self._clock()
        unit_s, self._unit_end = now - self._unit_end, now
        if not self._live and now - self._last + unit_s < self._every and done < planned:
            return
        self._last = now
        elapsed = now - self._start
        work_done, work_planned = work if work is not None else (done, planned)  # later rounds may run fewer arms
        measuring = max(0.0, elapsed - setup_s)  # starting servers is not a cost per unit
        left = measuring / work_done * (work_planned - work_done) if work_done else 0.0
        prompt = (done - 1) % self._prompts + 1
        self._write(
            f"specgate: {plan.pair} / {plan.workload}: round {round_index + 1}, prompt {prompt}/{self._prompts}; "
            f"{done}/{planned} units, {_duration(elapsed)} elapsed, about {_duration(left)} left",
            not self._live,
        )

    def looked(self, plan: MeasurementPlan, round_index: int, next_rounds: Next) -> None:
        self._last = self._clock()
        then = (
            "stop"
            if next_rounds.rounds <= 0
            else f"{next_rounds.rounds} more round(s) of {', '.join(next_rounds.arms or plan.names)}"
        )
        self._write(
            f"specgate: {plan.pair} / {plan.workload} after round {round_index}: {next_rounds.why} → {then}", True
        )

    def note(self, plan: MeasurementPlan, text: str) -> None:
        self._last = self._clock()
        self._write(f"specgate: {plan.pair} / {plan.workload}: {text}", True)


def printer(stream_write: Callable[[str], object], live: bool) -> Write:
    """A `Write` over a text stream: live lines are rewritten in place (carriage return), others end with a newline."""
    width = [0]

    def write(text: str, final: bool) -> None:
        if live and not final:
            stream_write("\r" + text.ljust(width[0]))
            width[0] = len(text)
        else:
            stream_write(("\r" if live and width[0] else "") + text.ljust(width[0] if live else 0) + "\n")
            width[0] = 0

    return write

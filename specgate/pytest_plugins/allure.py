"""Allure integration: what a gate run adds to the results allure-pytest writes under `--alluredir`.

Active only when allure-pytest is installed and `--alluredir` is given (see `specgate.pytest_plugins.reports`):
- labels on every gate test: epic / feature / story = hardware / pair / workload, and the same as
  parentSuite / suite / subSuite, so both the Behaviors and the Suites tree read hardware → pair → workload;
- per check a step with the observed value, the limit, the baseline, n and the 95 % CI as step parameters and the
  evidence attached; a failed check's step fails with the check's message;
- once per pair × workload, attached to the `evaluation` fixture (Allure shows it in the set-up of every check of
  that pair × workload, stored once): the metrics table of all arms (HTML), the plots (PNG) and, when outputs
  differ, the first divergences side by side (HTML);
- at the end `environment.properties` (hardware, engines, machine fingerprint, versions, model hashes, git commit)
  and `categories.json`, one category per kind of failure (`specgate.checks.Failure`: SLA breach, latency
  regression, undecided, acceptance drop, drift, a missing baseline, infrastructure error, …), matched on the
  failure messages the gate produced in this run, each under its check's kind, and on the known shapes of them.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any, cast

import pytest

from specgate import __version__
from specgate.checks import Check, Failure
from specgate.evaluation import Evaluation
from specgate.pytest_plugins.items import item_target
from specgate.reports.provenance import commit_info
from specgate.run import GateRun
from specgate.store.codec import dumps

# Message shapes of each kind of failure (`specgate.checks.Failure`), for results of other runs that share the
# results folder; no two kinds share a shape. This run's own failure messages are matched exactly, under their kind.
KNOWN_SHAPES: dict[Failure, tuple[str, ...]] = {
    Failure.SLA: (
        "P99 TTFT ",
        "decode rate ",
        "speedup S ",
        "acceptance rate α ",
        "BLOCK: no TTFT ",
        "BLOCK: no decode rate ",
        "BLOCK: speedup could not ",
        "BLOCK: arm ",
    ),
    Failure.LATENCY: ("REGRESSED: +",),
    Failure.UNDECIDED: ("BLOCK: UNKNOWN",),
    Failure.ACCEPTANCE: ("REGRESSED: acceptance rate ", "REGRESSED: per-position acceptance "),
    Failure.OUTPUTS: ("greedy drift ", "BLOCK: no request completed in both arms"),
    Failure.LADDER_REGRESSED: ("REGRESSED: step ",),
    Failure.INFRASTRUCTURE: ("BLOCK: cannot measure reliably",),
    Failure.NO_HISTORY: ("BLOCK: the runtime changed (",),
}
ANY = r"[\s\S]*"


def literal(text: str) -> str:
    """`text` as a regular expression that Java (Allure 2) and JavaScript (Allure 3) both read literally."""
    return re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", text)


def categories(checks: Sequence[Check]) -> list[dict[str, Any]]:
    """Allure's `categories.json`: one category per kind of gate failure (`Check.failure`) that this run had or that
    has a known message shape, broken tests as infrastructure."""
    result = []
    for kind in Failure:
        messages = dict.fromkeys(c.message for c in checks if c.failure is kind)
        alternatives = [literal(m) + ANY for m in messages] + [literal(s) + ANY for s in KNOWN_SHAPES.get(kind, ())]
        if alternatives:
            regex = f"(?:Failed: )?(?:{'|'.join(alternatives)})"
            result.append({"name": kind.heading, "matchedStatuses": ["failed"], "messageRegex": regex})
    # an exception outside a check (engine crash, timeout, bad config) makes the test broken, not failed
    result.append({"name": Failure.INFRASTRUCTURE.heading, "matchedStatuses": ["broken"]})
    return result


def _property(text: str, key: bool = False) -> str:
    """Escape for Java's .properties format (ASCII only, as `Properties.load` reads Latin-1)."""
    out = []
    for index, char in enumerate(text):
        if char in "\\=:#!" or (char == " " and (key or index == 0)):
            out.append("\\" + char)
        elif char in "\t\n\r\f":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r", "\f": "\\f"}[char])
        elif ord(char) > 126:
            out.extend(f"\\u{unit:04x}" for unit in _utf16(char))
        else:
            out.append(char)
    return "".join(out)


def _utf16(char: str) -> list[int]:
    data = char.encode("utf-16-be")
    return [int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2)]


def environment(run: GateRun) -> dict[str, str]:
    """What the Allure report's Environment widget shows: hardware, engines, the machine fingerprint, versions,
    model hashes, commit."""
    hw = run.hardware
    commit = commit_info(run.project.source.parent)
    values = {
        "hardware": hw.name,
        "hardware.backend": hw.backend,
        "hardware.device": hw.device,
        "hardware.description": hw.description,
        "pairs": ", ".join(run.pairs),
        "workloads": ", ".join(run.workloads),
        "specgate": __version__,
        "git.commit": commit.id + (" (dirty)" if commit.dirty else ""),
        "git.branch": commit.branch,
        "verdict": run.verdict().verdict,
    }
    for evaluation in run.evaluations():
        pair = evaluation.where[0]
        values[f"engine.{pair}"] = evaluation.measurement.engine
        fingerprint = run.fingerprint(evaluation)  # the machine its latency belongs to (baselines match on it)
        values[f"machine.{pair}"] = f"{fingerprint.describe()} (fingerprint {fingerprint.key})"
        values.update({f"version.{name}": v for name, v in evaluation.measurement.versions.items()})
        for arm, models in evaluation.measurement.models.items():
            values.update({f"model.{pair}.{arm}.{role}": sha for role, sha in models.items()})
    return values


def environment_properties(values: dict[str, str]) -> str:
    return "".join(f"{_property(k, key=True)}={_property(v)}\n" for k, v in values.items())


def _rounded(value: float | None) -> float | None:
    return None if value is None else float(f"{value:.4g}")


def check_step(check: Check) -> None:
    """One Allure step for a check: parameters observed/limit/baseline/n/CI, evidence attached, failed if it failed."""
    import allure

    evidence = dumps(
        {"message": check.message, "details": dict(check.details)}, indent=2, default=str, ensure_ascii=False
    )
    ci = None if check.ci is None else (_rounded(check.ci[0]), _rounded(check.ci[1]))

    title = f"{check.name} [{check.category}]: {'passed' if check.passed else 'FAILED'} - {check.message}"

    @allure.step(title.replace("{", "{{").replace("}", "}}"))  # allure formats the title with the parameters
    def step(
        observed: float | None,
        limit: float | None,
        baseline: float | None,
        unit: str,
        n: int | None,
        ci_95: tuple[float | None, float | None] | None,
    ) -> None:
        allure.attach(evidence, name=f"evidence: {check.name}", attachment_type=allure.attachment_type.JSON)
        if not check.passed:
            raise AssertionError(check.message)

    with contextlib.suppress(AssertionError):  # the step records the failure; gate_check fails the test
        step(_rounded(check.observed), _rounded(check.limit), _rounded(check.baseline), check.unit, check.n, ci)


def attach_evaluation(evaluation: Evaluation, run: GateRun) -> None:
    """Attach the metrics table, the plots and the drift excerpt of one pair × workload to the current item."""
    import allure

    from specgate.reports.document import evaluation_record
    from specgate.reports.plots import drift_html, evaluation_plots
    from specgate.reports.tables import metrics_html

    kind = allure.attachment_type
    pair, workload = evaluation.where
    record = evaluation_record(evaluation)
    allure.attach(metrics_html(record, run.hardware.name), name="Metrics per arm", attachment_type=kind.HTML)
    for plot in evaluation_plots(evaluation, run.sla(pair), long=run.workload(workload).long):
        allure.attach(plot.png, name=plot.name, attachment_type=kind.PNG)
    drift = drift_html(evaluation)
    if drift is not None:
        allure.attach(drift, name="Drift: first divergences side by side", attachment_type=kind.HTML)
    if record.ladder:
        from specgate.reports.ladder_table import ladder_html, pareto_png

        allure.attach(ladder_html(record), name="Speed-versus-accuracy ladder", attachment_type=kind.HTML)
        png = pareto_png(record)
        if png is not None:
            allure.attach(png, name="Ladder: speed vs accuracy (Pareto front)", attachment_type=kind.PNG)
    if record.sweep is not None:
        from specgate.reports.sweep_table import sweep_html, sweep_png

        allure.attach(sweep_html(record), name="Concurrency sweep", attachment_type=kind.HTML)
        sweep_plot = sweep_png(record)
        if sweep_plot is not None:
            allure.attach(sweep_plot, name="Sweep: speedup against concurrency", attachment_type=kind.PNG)


class AllureGate:
    """The pytest plugin that feeds a gate run into allure-pytest's results."""

    def __init__(self, run: GateRun, results_dir: Path, warn: Callable[[str], None]) -> None:
        self.run = run
        self.results_dir = results_dir
        self.warn = warn

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        # inside allure-pytest's setup wrapper, before the fixtures: labels hold even when an engine fails
        target = item_target(item)
        if target is None or not item.get_closest_marker("gate"):
            return
        import allure

        add_label = cast(Callable[[str, str], None], allure.dynamic.label)
        hardware = self.run.hardware.name
        labels = [
            ("epic", hardware),
            ("parentSuite", hardware),
            ("feature", target.pair),
            ("suite", target.pair),
            ("story", target.workload),
            ("subSuite", target.workload),
        ]
        for name, value in labels:
            add_label(name, value)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        first = len(self.run.checks)
        try:
            return (yield)
        finally:
            for check in self.run.checks[first:]:
                self._safely(f"Allure step for check {check.key}", check_step, check)

    @pytest.hookimpl(wrapper=True, trylast=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any]) -> Generator[None, object, object]:
        # innermost wrapper: allure-pytest's record of this fixture's set-up is still open, so attachments land
        # there, once per pair × workload
        result = yield
        if fixturedef.argname == "evaluation" and isinstance(result, Evaluation):
            self._safely(f"Allure attachments for {'/'.join(result.where)}", attach_evaluation, result, self.run)
        return result

    def pytest_sessionfinish(self) -> None:
        self._safely("Allure environment and categories", self.write_files)

    def write_files(self) -> None:
        from specgate.store.atomic import write_atomic

        write_atomic(self.results_dir / "environment.properties", environment_properties(environment(self.run)))
        text = json.dumps(categories(self.run.checks), indent=2, ensure_ascii=False)
        write_atomic(self.results_dir / "categories.json", text + "\n")

    def _safely(self, what: str, action: Callable[..., None], *args: Any) -> None:
        try:
            action(*args)
        except Exception as exc:  # the Allure report is optional, the verdict is not
            self.warn(f"{what} failed: {type(exc).__name__}: {exc}")

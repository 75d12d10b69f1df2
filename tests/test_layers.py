"""Imports point down the layer table of ARCHITECTURE.md: no module imports one of a higher layer, whether at the top
of the file, inside a function or under `TYPE_CHECKING` (each ties the modules all the same). Upward imports that
were still there were listed, each with why; none are left, and the list can only shrink: an entry that no longer
exists fails too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_architecture import _imports

from specgate.errors import ConfigError
from specgate.hardware.backends import CpuBackend
from specgate.registry import _REGISTRY, Capability, EngineSpec, backend_names, engine_names, engine_specs, register

REPO = Path(__file__).resolve().parent.parent

# Low to high; a unit is a top-level module or subpackage of specgate. A module may import its own unit and the
# units listed before it.
LAYERS = (
    "errors",
    "shipped",
    "registry",  # the names a configuration may use: engines, hardware backends, telemetry sources
    "stats",  # statistics, no domain types
    "accuracy",  # task scoring
    "content",  # content checkers of outputs (word lists, patterns), built while the config loads
    "config",  # validated configuration
    "model_files",
    "models",  # model files and their identity
    "plan",  # arms and plans
    "hardware",  # profiles' backends, telemetry, fingerprints, cost formulas
    "engines",  # the engines
    "measure",  # the measured loop, observers, traces → samples and summaries
    "costs",  # cost, energy and roofline of the measured arms
    "ladder",
    "evaluation",  # Measurement → Evaluation
    "comparison",  # the one comparison core
    "store",  # records and baselines
    "checks",  # pure judgements
    "faults",
    "preflight",  # the files a run reads, checked before anything loads
    "measuring",  # one pair × workload measured the way the gate does
    "reports",  # renderers of the verdict document
    "outputs",  # writes records, faults, baselines and reports
    "run",  # GateRun
    "suites",
    "pytest_plugins",
    "plugin",
    "cli",
)

# Upward imports still in the code: (importing module, imported unit) → why it is there. None are left; an entry
# may only be removed, with the import it excuses.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward_imports(package: Path, layers: tuple[str, ...]) -> set[tuple[str, str]]:
    """(module, unit) for every import of a higher layer's unit, function-local and type-checking ones included."""
    rank = {unit: i for i, unit in enumerate(layers)}
    units = {p.stem for p in package.glob("*.py")} | {p.name for p in package.iterdir() if p.is_dir()}
    found = set()
    for path in package.rglob("*.py"):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__")
        if module == package.name:
            continue  # the package's own __init__ sits above every layer
        for target in _imports(path, package):
            if not target.startswith(f"{package.name}.") or unit_of(target) not in units:
                continue  # outside the package, or a name of its root (`from specgate import __version__`)
            mine, theirs = unit_of(module), unit_of(target)
            assert mine in rank and theirs in rank, f"{module} or {target} is missing from the layer table"
            if rank[theirs] > rank[mine]:
                found.add((module, theirs))
    return found


def test_imports_point_down_the_layer_table() -> None:
    found = upward_imports(REPO / "specgate", LAYERS)
    assert sorted(found - set(KNOWN_UPWARD)) == [], "imports of a higher layer"
    assert sorted(set(KNOWN_UPWARD) - found) == [], "listed upward imports that no longer exist: drop them"


def test_every_unit_of_the_package_is_in_the_layer_table() -> None:
    package = REPO / "specgate"
    units = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"}
    units |= {p.name for p in package.iterdir() if (p / "__init__.py").is_file()}
    assert sorted(units - set(LAYERS)) == []
    assert sorted(set(LAYERS) - units) == []


def test_the_architecture_page_names_every_layer() -> None:
    page = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = page.split("## Layers", 1)[1].split("\n## ", 1)[0]
    assert [unit for unit in LAYERS if unit not in table] == []


def test_an_upward_import_inside_a_function_or_for_type_checking_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("")
    (package / "low" / "a.py").write_text("def f():\n    from pkg.high import thing\n")
    (package / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import high\n"
    )
    (package / "high.py").write_text("from pkg.low import a\nthing = 1\n")
    assert upward_imports(package, ("low", "high")) == {("pkg.low.a", "high"), ("pkg.low.b", "high")}
    assert upward_imports(package, ("high", "low")) == {("pkg.high", "low")}


def engine_name_comparisons(
    package: Path, names: set[str], *, about: tuple[str, ...] = (), registries: tuple[str, ...] = ("registry.py",)
) -> list[str]:
    """`path:line` of every comparison of a string with an engine name outside the registry (`x == "vllm"`,
    `engine in ("openai", …)`): what an engine is and does belongs in its `EngineSpec`. With `about`, only
    comparisons whose other side's code mentions one of those words (a backend name is compared with a `backend`
    or `device`, while "cpu" is also a clock's name); `registries` are the modules (paths in the package) exempt."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).as_posix() in registries:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            values: list[object] = []
            others: list[str] = []
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant):
                    values.append(side.value)
                elif isinstance(side, ast.Tuple | ast.List | ast.Set):
                    values += [e.value for e in side.elts if isinstance(e, ast.Constant)]
                else:
                    others.append(ast.unparse(side))
            named = any(isinstance(v, str) and v in names for v in values)
            if named and (not about or any(word in other for other in others for word in about)):
                found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_no_code_outside_the_registry_branches_on_an_engine_name() -> None:
    names = {spec.name for spec in engine_specs()} | {"fake"}
    assert engine_name_comparisons(REPO / "specgate", names) == []


def test_no_code_outside_the_registry_and_the_backend_classes_branches_on_a_backend_name() -> None:
    """What code asks of a backend by name is its `BackendSpec` (`specgate.registry.backend_spec`); the backend
    classes (`specgate.hardware.backends`) are the one other place that knows each backend."""
    exempt = ("registry.py", "hardware/backends.py")
    found = engine_name_comparisons(
        REPO / "specgate", set(backend_names()), about=("backend", "device"), registries=exempt
    )
    assert found == []


def test_a_branch_on_a_backend_name_is_found_and_a_clock_named_cpu_is_not(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "engine.py").write_text(
        'def f(hardware, clock):\n    a = hardware.device == "cpu"\n    b = clock == "cpu"\n'
        '    return backend in ("cuda", "x") or a or b\n'
    )
    found = engine_name_comparisons(package, {"cpu", "cuda"}, about=("backend", "device"))
    assert found == ["pkg/engine.py:2", "pkg/engine.py:4"]


def test_a_branch_on_an_engine_name_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "registry.py").write_text('def served(engine):\n    return engine == "openai"\n')
    (package / "preflight.py").write_text('def check(engine):\n    return engine in ("vllm", "x") or 1 == 2\n')
    assert engine_name_comparisons(package, {"openai", "vllm"}) == ["pkg/preflight.py:2"]


def test_an_engine_registered_in_one_line_reaches_config_optimisations_and_the_fingerprint() -> None:
    from specgate.config.optimisation import KvCache, Optimisation, check_support
    from specgate.hardware.fingerprint import machine_fingerprint

    spec = EngineSpec(
        "mine", "specgate.engines.fake:FakeEngine", "json", "pip install mine", library="minelib",
        optimisations={"kv_cache": Capability({"minekv": ("int8",)})},
    )  # fmt: skip
    register(spec)
    try:
        assert "mine" in engine_names()
        kv = Optimisation(KvCache("int8", "minekv"), None, None)
        assert check_support(kv, "mine", "pairs.p.arms.a") == []
        assert check_support(Optimisation(KvCache("int4", "minekv"), None, None), "mine", "pairs.p.arms.a") != []
        versions = {"engine": "mine", "minelib": "1.2.3", "transformers": "9.9"}
        found = machine_fingerprint("cpu", 1, versions, "float32", ("none", 0, ""))
        assert (found.engine, found.engine_version) == ("mine", "1.2.3")
    finally:
        _REGISTRY.pop("mine")


class MineBackend(CpuBackend):
    """A backend of the test's own: the host CPU under another name, naming its own accelerator."""

    def accelerator(self) -> tuple[str, int, str]:
        return "Mine accelerator", 2, "mine-driver 7"


def test_a_backend_registered_in_one_line_reaches_the_config_get_backend_and_the_fingerprint(tmp_path: Path) -> None:
    from specgate.config import load_hardware_profile
    from specgate.hardware.backends import get_backend
    from specgate.hardware.fingerprint import run_fingerprint
    from specgate.registry import _BACKENDS, BackendSpec, register_backend

    (tmp_path / "minebox.yaml").write_text("name: minebox\nbackend: mine\ndevice: 'mine:1'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="backend"):
        load_hardware_profile("minebox", tmp_path)  # not registered yet: the config refuses the name
    register_backend(BackendSpec("mine", f"{__name__}:MineBackend", r"mine(:\d+)?", topology=("mine-smi", "topo")))
    try:
        profile = load_hardware_profile("minebox", tmp_path)
        backend = get_backend(profile.backend, profile.device, profile=profile.name)
        assert isinstance(backend, MineBackend)
        with pytest.raises(ConfigError, match="expected 'mine:0' or 'mine' followed by ':<index>'"):
            get_backend("mine", "cuda:0")
        versions = {"engine": "transformers", "transformers": "9.9", "torch": "2.13.0"}
        found = run_fingerprint(profile, "transformers", versions, "float32")
        assert (found.accelerator, found.accelerator_count, found.driver) == ("Mine accelerator", 2, "mine-driver 7")
    finally:
        _BACKENDS.pop("mine")

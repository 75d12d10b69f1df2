"""Every JSON file specgate writes is strict JSON (no NaN or Infinity) and the verdict and run records match the
JSON Schemas shipped in the package (generated from the dataclasses; `tests/conftest.py` also checks every verdict
and record the other tests make specgate write)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import json_problems
from specgate.measure.metrics import Speedup
from specgate.reports import schemas
from specgate.store.codec import dumps, from_data, to_data


def _strict(text: str) -> Any:
    def reject(constant: str) -> None:
        raise ValueError(f"bare {constant}")

    return json.loads(text, parse_constant=reject)


def test_non_finite_floats_are_written_as_null_and_read_back_as_nan() -> None:
    speedup = Speedup("ar", "spec", 1.5, (math.nan, math.inf), 1, None, 3, 0.0, "1 paired engine call: no spread")
    text = dumps(speedup)
    assert _strict(text)["ci"] == [None, None]
    back = from_data(Speedup, json.loads(text))
    assert math.isnan(back.ci[0]) and back.no_interval == speedup.no_interval
    assert to_data({"x": (1.0, -math.inf)}) == {"x": [1.0, None]}


def test_the_shipped_schemas_are_the_generated_ones() -> None:
    """A dataclass that gains or changes a field changes its schema: regenerate with
    `python -m specgate.reports.schemas` (and raise schema_version when old files no longer fit)."""
    for name in schemas.GENERATORS:
        assert schemas.shipped(name) == json.loads(schemas.schema_text(name)), name


def test_the_schema_rejects_a_document_that_does_not_fit(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    root = gate_project()
    pytester.runpytest("suites/test_sla.py", "-p", "no:cacheprovider")
    text = (root / "reports" / "verdict.json").read_text()
    assert json_problems(text, schemas.VERDICT) == []
    wrong = json.loads(text)
    wrong["evaluations"][0]["arms"][0]["summary"]["n_requests"] = "eight"
    wrong["schema_version"] = 2
    problems = json_problems(json.dumps(wrong), schemas.VERDICT)
    assert any("schema_version" in p for p in problems)
    assert any("n_requests" in p for p in problems)
    assert json_problems('{"schema_version": NaN}', schemas.VERDICT) == ["not strict JSON: bare NaN"]


def test_a_gate_run_writes_strict_json_that_a_javascript_parser_reads(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """The files CI scripts and dashboards read (`actions/github-script`: Node's JSON.parse): verdict.json (whose ITL
    has no interval, and says why), benchmark.json and the run records, parsed strictly and validated."""
    root = gate_project()
    result = pytester.runpytest("suites/test_sla.py", "suites/test_drift.py", "-p", "no:cacheprovider")
    reports = root / "reports"
    written = sorted(p for p in reports.rglob("*.json"))
    assert reports / "verdict.json" in written and reports / "benchmark.json" in written, result.stdout.str()
    for path in written:
        _strict(path.read_text())
    verdict = _strict((reports / "verdict.json").read_text())
    itl = verdict["evaluations"][0]["arms"][0]["summary"]["itl_ms"]
    assert itl["mean_ci"] == [None, None]
    assert "not independent" in itl["no_interval"]
    records = list((reports / "runs").rglob("*.json"))
    assert records
    for path in records:
        assert json_problems(path.read_text(), schemas.RUN_RECORD) == [], path
    node = shutil.which("node")
    if node is not None:
        script = "const fs = require('fs'); for (const f of process.argv.slice(1)) JSON.parse(fs.readFileSync(f));"
        subprocess.run([node, "-e", script, *map(str, written)], check=True)

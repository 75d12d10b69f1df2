"""A workload path may name environment variables (data each machine keeps elsewhere, e.g. public sets that are
not shipped): set, the file is read from there; unset, the error names the variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.config.project import load_project_config
from specgate.measure.workloads import workload_problems

CONFIG = """\
pairs:
  p: {target: embedded:smollm2-135m-instruct, speculation: {method: prompt_lookup, num_tokens: 3}}
workloads:
  public: {path: "${SPECGATE_TEST_SETS}/questions.jsonl", task: numeric}
"""


def _workload(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "specgate.yaml").write_text(CONFIG, encoding="utf-8")
    return load_project_config(tmp_path / "specgate.yaml").workloads["public"]


def test_a_set_variable_points_the_workload_at_its_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "sets"
    data.mkdir()
    (data / "questions.jsonl").write_text('{"id": "q1", "prompt": "1+1?", "reference": "2"}\n', encoding="utf-8")
    monkeypatch.setenv("SPECGATE_TEST_SETS", str(data))
    workload = _workload(tmp_path)
    assert workload.path == data / "questions.jsonl"
    assert workload_problems(workload, min_samples=1) == []


def test_an_unset_variable_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECGATE_TEST_SETS", raising=False)
    problems = workload_problems(_workload(tmp_path), min_samples=1)
    assert len(problems) == 1 and "SPECGATE_TEST_SETS in workloads.public.path are not set" in problems[0]

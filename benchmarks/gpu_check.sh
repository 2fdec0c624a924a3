#!/usr/bin/env bash
# The GPU check (issue 7): one prepared run on a GPU machine that has torch and
# transformers but no vLLM / Monarch. Carried wheels in .whl/ (TorchTitan and its small
# pure-Python dependencies) are installed to /tmp/site when present. Writes to $OUT.
#   bash benchmarks/gpu_check.sh            # qwen3-1.7b, random init, bf16
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
if ! python3 -c "import torchtitan" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null | tee "$OUT/nvidia-smi.txt" || true
export PYTHONUNBUFFERED=1
python3 benchmarks/gpu_check.py --model "${MODEL:-qwen3-1.7b}" --out "$OUT" "$@" 2>&1 | tee "$OUT/gpu_check.log"

#!/usr/bin/env bash
# The pyfunc board, re-made from the tiny-code start fine-tuned on pyfunc's warm-start split
# (400 functions RL never trains or is evaluated on), with both controls. Resumable: run it
# again after an interruption. 45 runs of 2e12 FLOPs, about 2.5 hours with 2 at a time on 2
# cores (the sandbox's scoring and the held-out evaluation take most of each run).
#
#   bash scripts/boards/pyfunc.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=results/tiny-code-pyfunc-split
resume=$([ -f $out/experiment.json ] && echo --resume || true)
# shellcheck disable=SC2086
.venv/bin/python -m harness compare grpo dr_grpo dapo cispo gspo sapo custom \
    --model tiny-code --env pyfunc --max-response-len 12 --prompts-per-step 64 --budget 2e12 \
    --seeds 5 --sampled-eval-points 3 --jobs 2 --quiet --controls --out $out $resume

#!/usr/bin/env bash
# The running_sum board, end to end, resumable: every step continues where the last
# sitting stopped (--resume), so run it again after an interruption. Hours of CPU
# (docs/statistics.md): the sweep is 128 runs, the board 180, the on-policy ablation 32 +
# 40, at ~5 minutes a run and 2 at a time on 2 cores.
#
#   bash scripts/boards/running_sum.sh [sweep|board|ablation|all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
what=${1:-all}
builtins="grpo dr_grpo dapo gspo cispo sapo custom gpg opo reinforce_pp rloo gmpo clip_cov kl_cov remax ppo"
# the board's shared settings: the sweep's budget; 8 evaluation points (the sweep's 4 keep
# tuning cheap; the compute fit needs more), pass@k from 4 samples at the 3 checkpoints the
# headline averages
board="--env running_sum --model tiny-sum --budget 4e12 --eval-points 8 --eval-samples 4 \
--sampled-eval-points 3 --seeds 10 --jobs 2 --quiet"

resume_flag() { [ -f "$1/experiment.json" ] && echo --resume || true; }

if [ "$what" = sweep ] || [ "$what" = all ]; then
    out=results/tune-running-sum
    $py -m harness tune configs/tune/running_sum.toml --out $out --jobs 2 --quiet $(resume_flag $out)
fi
if [ "$what" = board ] || [ "$what" = all ]; then
    out=results/tiny-sum-running-sum
    # shellcheck disable=SC2086
    $py -m harness compare $builtins $board --tuned results/tune-running-sum/selection.json \
        --controls --out $out $(resume_flag $out)
fi
if [ "$what" = ablation ] || [ "$what" = all ]; then
    out=results/tune-running-sum-on-policy
    $py -m harness tune configs/tune/running_sum-on-policy.toml --out $out --jobs 2 --quiet \
        $(resume_flag $out)
    out=results/tiny-sum-on-policy
    # grpo and opo at 1 and 4 updates per batch, each arm at its own tuned lr, same seeds
    # shellcheck disable=SC2086
    $py -m harness compare grpo opo --vary mini_batches=1,4 $board \
        --tuned results/tune-running-sum-on-policy/selection.json --out $out $(resume_flag $out)
fi

#!/usr/bin/env bash
# The running_sum board, end to end, resumable: every step continues where the last
# sitting stopped (--resume), so run it again after an interruption. Hours of CPU
# (docs/statistics.md): the sweep is 63 runs (+ any edge extensions), the board a pilot of
# 5 seeds x 10 rows then the seeds its power plan asks for (20-40 x 10 rows), at ~4-8
# minutes a run and 2 at a time on 2 cores. One commit and one CPU class per experiment:
# run it from a clean checkout, and resume it on the same kind of machine.
#
#   bash scripts/boards/running_sum.sh [sweep|board|all]   (default all)
set -euo pipefail
cd "$(dirname "$0")/../.."
py=.venv/bin/python
what=${1:-all}
# the seed's seven, at their papers' constants; grpo (the first) is the baseline
builtins="grpo dr_grpo dapo cispo gspo sapo custom"
sweep=results/tune-running-sum-paper
# the board's shared settings: the sweep's budget and evaluation points (the headline is
# the mean of the last 3 of 8), pass@k from 4 samples at those 3 checkpoints
board="--env running_sum --model tiny-sum --budget 4e12 --eval-points 8 --eval-samples 4 \
--sampled-eval-points 3 --jobs 2 --quiet"

resume_flag() { [ -f "$1/experiment.json" ] && echo --resume || true; }

if [ "$what" = sweep ] || [ "$what" = all ]; then
    $py -m harness tune configs/tune/running_sum.toml --out $sweep --jobs 2 --quiet \
        $(resume_flag $sweep)
fi
if [ "$what" = board ] || [ "$what" = all ]; then
    out=results/running-sum-paper
    # shellcheck disable=SC2086
    $py -m harness compare $builtins $board --tuned $sweep/selection.json --controls \
        --resolve 0.02 --seeds 5 --min-seeds 20 --max-seeds 40 --out $out $(resume_flag $out)
fi

#!/usr/bin/env bash
# Every test, CI's and the re-checks CI leaves out: the default set, the slow set, and the
# tests marked `recheck`, which re-measure committed figures on real data (the code rewards
# on the 427 sanitized MBPP tasks and the 164 HumanEval problems: the table walks and the
# guessed constants, ~8 minutes on 2 cores). Run it before changing what they measure.
#
#   bash scripts/check-all.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
.venv/bin/python -m pytest -m slow --durations=25 "$@"

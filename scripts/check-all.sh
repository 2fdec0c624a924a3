#!/usr/bin/env bash
# Every test, CI's and the ones CI leaves out: the default set, then the whole slow set,
# including the tests marked `extra` (the further cases of a capability CI covers once:
# each trainer-sampler correction, each killed service, every built-in's golden metrics,
# every benchmark, --jobs over two hosts, a 100k-token batch) and `recheck` (re-measurements
# of committed figures on real data: the code rewards on the 427 sanitized MBPP tasks and
# the 164 HumanEval problems, table walks and guessed constants). Run it before changing
# what they cover; it takes about 90 minutes on 2 cores.
#
#   bash scripts/check-all.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
.venv/bin/python -m pytest -m slow --durations=25 "$@"

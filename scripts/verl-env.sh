#!/usr/bin/env bash
# Install verl's core_algos and the few packages its import needs into .verl/ at the
# repository root, for the batch-level parity check against verl
# (benchmarks/parity/verl_check.py, tests/test_parity_verl.py; docs/parity.md, "verl").
#
# verl is not in the project's environment (docs/stack.md): `import verl` imports ray, and
# verl's metadata pins transformers<5.11 while this project pins 5.16-5.19. So the
# packages go into their own folder with --no-deps (nothing in .venv changes), and the
# check puts that folder on sys.path. Idempotent: a second run with the same list does
# nothing. ~257 MB, mostly ray.
#
#   scripts/verl-env.sh            # install (or say it is already there)
#   scripts/verl-env.sh --force    # remove .verl/ and install again
#   PYTHON=python3 scripts/verl-env.sh   # another interpreter (default .venv/bin/python)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TARGET="$ROOT/.verl"
STAMP="$TARGET/.installed"
PYTHON="${PYTHON:-$ROOT/.venv/bin/python}"

# the versions measured to import together with this project's torch (2026-12-07)
PACKAGES=(
  verl==0.9.1
  ray==2.60.0
  omegaconf==2.4.0
  hydra-core==1.3.8
  antlr4-python3-runtime==4.9.3
  tensordict==0.15.3
  codetiming==1.4.0
  dill==0.4.1
  pylatexenc==2.11
  msgpack==1.2.4
  pyvers==0.2.3
  orjson==3.13.0
)
WANT="$(printf '%s\n' "${PACKAGES[@]}")"

if [[ "${1:-}" == "--force" ]]; then
  echo "verl-env: removing $TARGET"
  rm -rf "$TARGET"
fi

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "verl-env: $TARGET already holds:"
  sed 's/^/  /' "$STAMP"
  echo "verl-env: nothing to do (--force reinstalls)"
  exit 0
fi

if [[ ! -x "$PYTHON" ]]; then
  echo "verl-env: no interpreter at $PYTHON (run scripts/setup.sh, or set PYTHON)" >&2
  exit 1
fi

echo "verl-env: installing into $TARGET with --no-deps (the project's .venv is not touched):"
printf '  %s\n' "${PACKAGES[@]}"
rm -rf "$TARGET"
mkdir -p "$TARGET"
"$PYTHON" -m pip install --quiet --no-deps --target "$TARGET" "${PACKAGES[@]}"

echo "verl-env: checking that verl.trainer.ppo.core_algos imports"
PYTHONPATH="$TARGET" "$PYTHON" -c "
import verl.trainer.ppo.core_algos as c
print('verl-env: policy losses:', ', '.join(sorted(c.POLICY_LOSS_REGISTRY)))
"
printf '%s\n' "${PACKAGES[@]}" > "$STAMP"
echo "verl-env: done ($(du -sh "$TARGET" | cut -f1)); python -m benchmarks.parity.verl_check"

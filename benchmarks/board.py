"""Board runs: what one run of a leaderboard costs in wall time, where that time goes, and
how it compares with the bare loop. For each board (the tiny arithmetic board and the
running_sum testbed, with their boards' settings) a ``harness compare grpo --seeds 2
--jobs 1`` runs in a subprocess, exactly as a board's rows run (the second run reuses the
first one's generation engine); then the bare torch loop (benchmarks/baselines/
bare_grpo.py) runs as many steps of the same shape (model, prompts per step, group size,
response limit, one optimizer step per batch) on the same machine.

Per board: seconds per run (the compare's elapsed time over its runs: process start,
start-up, training, evaluation, checkpoints, the report), the training loop's share, the
evaluation's share and start-up per run; runs per core-hour (3600 / (seconds per run x
cores), one run at a time on all cores); and the bare loop's summed step seconds for the
same steps over forge-zoo's seconds: over its training loop (the framework's overhead on
training alone, as in the RL step benchmark, though a board step runs 4 mini-batches and
an old-log-prob pass the bare loop skips) and over the whole run (what evaluation,
start-up and bookkeeping add).

    python -m benchmarks.board [--quick]
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import timed_harness
from zoo.files import read_json_lines


@dataclass(frozen=True)
class Board:
    name: str
    env: str
    model: str
    flags: tuple[str, ...]
    """The board's own flags (its experiment.json command), less algorithms and seeds."""


BOARDS = (
    Board("tiny arithmetic (results/tiny-arithmetic)", "arithmetic", "tiny", ()),
    Board(
        "running_sum testbed (results/tiny-sum-running-sum)",
        "running_sum",
        "tiny-sum",
        (
            "--budget",
            "4e12",
            "--eval-points",
            "8",
            "--eval-samples",
            "4",
            "--sampled-eval-points",
            "3",
        ),
    ),
)

QUICK_FLAGS = ("--steps", "3", "--prompts-per-step", "8", "--eval-samples", "0")
"""A smoke-test setting (figures meaningless): a few short steps, a small evaluation."""


def run_compare(board: Board, out: Path, quick: bool) -> tuple[float, list[Path]]:
    """Elapsed seconds of the board's compare (grpo, 2 seeds, one run at a time) and its
    run folders."""
    flags = list(board.flags)
    if quick:  # (the last of a repeated flag wins; --steps replaces the budget)
        flags = [f for f in flags if f not in ("--budget", "4e12")] + list(QUICK_FLAGS)
    elapsed = timed_harness(
        "compare",
        "grpo",
        "--seeds",
        "2",
        "--jobs",
        "1",
        "--quiet",
        "--env",
        board.env,
        "--model",
        board.model,
        *flags,
        "--out",
        str(out),
    )
    return elapsed, sorted((out / "runs").iterdir())


def run_parts(run_dir: Path) -> dict[str, Any]:
    """A run's steps, shape and seconds (start-up, training loop, evaluation) from its
    config.json, metrics.jsonl and complete.json."""
    config = json.loads((run_dir / "config.json").read_text())
    records = read_json_lines(run_dir / "metrics.jsonl").rows
    complete = json.loads((run_dir / "complete.json").read_text())
    steps = [r for r in records if r["step"] > 0]
    run = config["run"]
    return {
        "model_path": config["model_path"],
        "steps": len(steps),
        "prompts_per_step": run["prompts_per_step"],
        "group_size": run["group_size"],
        "max_response_len": run["max_response_len"],
        "startup": complete["startup_seconds"],
        "loop": steps[-1]["seconds"],
        "evaluation": sum(r.get("eval_seconds", 0.0) for r in records),
    }


def bare_seconds(env_name: str, parts: dict[str, Any]) -> float:
    """Summed step seconds of the bare loop over ``parts``' steps and shape (its model
    loading excluded: start-up is not part of a step)."""
    from benchmarks.rl_step import StepSetting, bare_records

    setting = StepSetting(
        parts["prompts_per_step"],
        parts["group_size"],
        parts["max_response_len"],
        steps=parts["steps"],
        warmup=0,
    )
    return sum(r["step_seconds"] for r in bare_records(parts["model_path"], setting, env_name))


def board_row(board: Board, root: Path, quick: bool) -> dict[str, Any]:
    elapsed, runs = run_compare(board, root / board.env, quick)
    parts = [run_parts(r) for r in runs]
    per_run = elapsed / len(runs)
    loop = sum(p["loop"] for p in parts) / len(parts)
    evaluation = sum(p["evaluation"] for p in parts) / len(parts)
    bare = bare_seconds(board.env, parts[0])  # (the seeds' runs take the same steps)
    cores = torch.get_num_threads()
    return {
        "board": board.name,
        "steps per run": parts[0]["steps"],
        "s per run": per_run,
        "runs per core-hour": 3600 / (per_run * cores),
        "start-up s, 1st run": parts[0]["startup"],
        "start-up s, 2nd run": parts[1]["startup"],
        "training loop share": loop / per_run,
        "evaluation share": evaluation / per_run,
        "bare loop s (same steps)": bare,
        "bare s / training loop s": bare / loop,
        "bare s / run s": bare / per_run,
    }


def board_table(root: Path, quick: bool = False) -> list[dict[str, Any]]:
    return [board_row(board, root, quick) for board in BOARDS]


if __name__ == "__main__":
    from benchmarks.common import script_main

    script_main(__doc__, board_table, ".3g")

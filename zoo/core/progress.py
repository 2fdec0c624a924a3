"""Progress bars (rich), silenced when ``quiet`` or when output is not a terminal and
FORGE_ZOO_PROGRESS=0."""

from __future__ import annotations

import os

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def make_progress(quiet: bool = False, *extra_columns) -> Progress:
    disable = quiet or os.environ.get("FORGE_ZOO_PROGRESS") == "0"
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        *extra_columns,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=disable,
        transient=False,
    )


def run_columns() -> tuple:
    """Columns of a training run's bar: last reward, last held-out reward, tokens/s."""
    return (
        TextColumn("reward {task.fields[reward]:.3f}"),
        TextColumn("eval {task.fields[eval]:.1%}"),
        TextColumn("{task.fields[tps]:,.0f} gen tok/s"),
    )


def add_run_task(progress: Progress, description: str, cfg):
    """A bar whose total is the run's budget, in its unit (steps, FLOPs, samples, s)."""
    return progress.add_task(
        description, total=cfg.budget[1], reward=float("nan"), eval=float("nan"), tps=0.0
    )


def update_run_task(progress: Progress, task, cfg, record: dict) -> None:
    unit = cfg.budget[0]
    done = {"steps": record["step"], "flops": record["flops"], "samples": record["samples"],
            "seconds": record["seconds"]}[unit]  # fmt: skip
    fields = {}
    if "eval_reward" in record:
        fields["eval"] = record["eval_reward"]
    if record["step"] > 0:
        fields["reward"] = record["reward_mean"]
        fields["tps"] = record["generate_tokens_per_s"]
    progress.update(task, completed=min(done, cfg.budget[1]), **fields)

"""Progress of runs: rich's bars on a terminal; on anything else (a batch job's log, nohup,
``> file``) plain, complete lines, one per task at most every FORGE_ZOO_LOG_EVERY seconds
(default 30) and one when it finishes; nothing when ``quiet`` or FORGE_ZOO_PROGRESS=0."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

LOG_EVERY_SECONDS = 30.0
"""Default spacing of a task's lines when the output is not a terminal."""


def make_progress(quiet: bool = False, *extra_columns: ProgressColumn) -> Progress | LineProgress:
    """Bars on a terminal, lines elsewhere (``LineProgress``), nothing when quiet."""
    disable = quiet or os.environ.get("FORGE_ZOO_PROGRESS") == "0"
    if not disable and not Console().is_terminal:
        every = float(os.environ.get("FORGE_ZOO_LOG_EVERY", LOG_EVERY_SECONDS))
        return LineProgress(extra_columns, every=every)
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


@dataclass
class _LineTask:
    description: str
    total: float | None
    fields: dict[str, Any]
    completed: float = 0.0
    started: float = field(default_factory=time.monotonic)
    last_line: float = -float("inf")
    printed: tuple = ()


class LineProgress:
    """The subset of ``rich.progress.Progress`` the harness uses (add_task, update, advance,
    remove_task, a context manager), written as lines: ``description: done/total (pct) |
    the extra columns' text | elapsed``. A task prints when it has moved and ``every``
    seconds have passed since its last line, and once more when it completes or is
    removed, so a log holds every task's last state in full, whatever its width."""

    def __init__(
        self,
        columns: tuple[ProgressColumn, ...] = (),
        every: float = LOG_EVERY_SECONDS,
        stream: TextIO | None = None,
    ) -> None:
        # Only text columns have a format to fill in; a bar or spinner has no plain form.
        self.formats = [c.text_format for c in columns if isinstance(c, TextColumn)]
        self.every = every
        self.stream = stream
        self.tasks: dict[int, _LineTask] = {}
        self.next_id = 0

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        for task_id in list(self.tasks):
            self._line(task_id, force=True)

    def add_task(self, description: str, total: float | None = 100.0, **fields: Any) -> int:
        self.tasks[self.next_id] = _LineTask(description, total, fields)
        self.next_id += 1
        return self.next_id - 1

    def update(
        self,
        task_id: int,
        *,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        total: float | None = None,
        **fields: Any,
    ) -> None:
        task = self.tasks[task_id]
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        if description is not None:
            task.description = description
        if total is not None:
            task.total = total
        task.fields.update(fields)
        finished = task.total is not None and task.completed >= task.total
        self._line(task_id, force=finished)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self.update(task_id, advance=advance)

    def remove_task(self, task_id: int) -> None:
        self._line(task_id, force=True)
        del self.tasks[task_id]

    def render(self, task_id: int) -> str:
        """The task's line, without a timestamp."""
        task = self.tasks[task_id]
        view = SimpleNamespace(
            description=task.description,
            completed=task.completed,
            total=task.total,
            fields=task.fields,
        )
        done = f"{task.completed:.4g}"
        if task.total:
            done += f"/{task.total:.4g} ({task.completed / task.total:.0%})"
        parts = [f"{Text.from_markup(task.description).plain}: {done}"]
        parts += [Text.from_markup(f.format(task=view)).plain for f in self.formats]
        elapsed = int(time.monotonic() - task.started)
        parts.append(f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d} elapsed")
        return " | ".join(parts)

    def _line(self, task_id: int, force: bool = False) -> None:
        task, now = self.tasks[task_id], time.monotonic()
        state = (task.description, task.completed, tuple(sorted(task.fields.items())))
        if state == task.printed or (not force and now - task.last_line < self.every):
            return
        task.printed, task.last_line = state, now
        stream = self.stream or sys.stdout
        print(time.strftime("%H:%M:%S ") + self.render(task_id), file=stream, flush=True)


def run_columns() -> tuple[ProgressColumn, ...]:
    """Columns of a training run's bar: last reward, last held-out reward, tokens/s."""
    return (
        TextColumn("reward {task.fields[reward]:.3f}"),
        TextColumn("eval {task.fields[eval]:.1%}"),
        TextColumn("{task.fields[tps]:,.0f} gen tok/s"),
    )


def add_run_task(progress: Progress | LineProgress, description: str, cfg: Any) -> int:
    """A bar whose total is the run's budget, in its unit (steps, FLOPs, samples, s)."""
    return progress.add_task(
        description, total=cfg.budget.limit[1], reward=float("nan"), eval=float("nan"), tps=0.0
    )


def update_run_task(progress: Progress | LineProgress, task: int, cfg: Any, record: dict) -> None:
    unit = cfg.budget.limit[0]
    done = {
        "steps": record["step"],
        "flops": record["flops"],
        "samples": record["samples"],
        "seconds": record["seconds"],
    }[unit]
    fields = {}
    if "eval_reward" in record:
        fields["eval"] = record["eval_reward"]
    if record["step"] > 0:
        fields["reward"] = record["reward_mean"]
        fields["tps"] = record["generate_tokens_per_s"]
    progress.update(task, completed=min(done, cfg.budget.limit[1]), **fields)

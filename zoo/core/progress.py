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

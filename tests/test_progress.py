"""Output that is not a terminal (a batch job's log, nohup, ``> file``): complete plain
lines, never cut to 80 columns, and progress at most every N seconds."""

from __future__ import annotations

import io
import os
import subprocess
import sys

import pandas as pd
from harness_cli import REPO

from zoo.run.progress import LineProgress, make_progress, run_columns


def test_a_log_holds_the_whole_summary_table_at_80_columns():
    experiment = REPO / "results" / "tiny-arithmetic"  # a committed 7 x 10-seed board
    code = f"from pathlib import Path; from harness.cli import print_summary; print_summary(Path({str(experiment)!r}))"  # noqa: E501
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True
    ).stdout  # stdout is a pipe: no terminal
    assert "…" not in out and "\x1b[" not in out  # no ellipsis, no colour codes
    summary = pd.read_csv(experiment / "tables" / "summary.csv")
    for row in summary.itertuples():
        interval = f"{row.headline_mean:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}]"
        assert any(row.algorithm in line and interval in line for line in out.splitlines()), (
            row.algorithm,
            out,
        )
    assert "last 3 compute checkpoints" in out  # the caption, whole


def test_progress_lines_are_complete_and_spaced():
    log = io.StringIO()
    with LineProgress(run_columns(), every=3600, stream=log) as progress:
        task = progress.add_task(
            "[bold]dapo__running_sum__seed7",
            total=4e12,
            reward=float("nan"),
            eval=float("nan"),
            tps=0.0,
        )
        for step in range(1, 11):  # ten updates within the hour: one line, then the last
            progress.update(
                task, completed=4e11 * step, reward=0.3 + step / 100, eval=0.25, tps=1500.0
            )
    lines = log.getvalue().splitlines()
    assert len(lines) == 2, lines
    assert "dapo__running_sum__seed7: 4e+11/4e+12 (10%) | reward 0.310" in lines[0]
    assert "4e+12/4e+12 (100%) | reward 0.400 | eval 25.0% | 1,500 gen tok/s" in lines[1]
    assert "[bold]" not in lines[0]


def test_progress_is_lines_off_a_terminal_and_nothing_when_quiet(monkeypatch):
    monkeypatch.delenv("FORGE_ZOO_PROGRESS", raising=False)
    assert isinstance(make_progress(False), LineProgress)  # pytest's stdout is not a terminal
    assert not isinstance(make_progress(True), LineProgress)

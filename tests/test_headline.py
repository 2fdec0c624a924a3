"""The headline of a run (harness/scores.py): the mean held-out reward of its last 3
compute checkpoints, never the untrained start, and the text that names the checkpoints an
experiment actually used, in the report, the leaderboard legend and the printed summary.
Synthetic run folders written here (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import harness.analysis
from harness.analysis import write_analysis
from harness.cli import print_summary
from harness.leaderboard import headline_legend
from harness.scores import (
    HEADLINE,
    checkpoint_rows,
    experiment_headline,
    headline_checkpoints,
    headline_text,
    load_runs,
    run_scores,
)
from zoo.services.ledger import PHASES

BUDGET = 1e10
OLD_HEADLINE = (
    "held-out greedy reward, the mean of each run's last 3 compute checkpoints "
    "(6/8, 7/8 and 8/8 of the budget with the default 8 points), then the mean over seeds"
)
"""What experiment.json said before the start was left out; old experiments keep it."""


def reward(point: int, seed: int, algorithm: str) -> float:
    """Held-out reward at checkpoint ``point``: 0.242 at the start, then rising; each seed
    and algorithm shifted, so every checkpoint's value differs."""
    if point == 0:
        return 0.242
    return 0.25 + 0.01 * point + 0.003 * seed + (0.02 if algorithm == "dapo" else 0.0)


def write_run(out: Path, algorithm: str, seed: int, points: int) -> None:
    """A run with a FLOPs budget and ``points`` eval points, one training step per eval
    point (the ledger's FLOPs reach k/points of the budget at step k)."""
    run_dir = out / "runs" / f"{algorithm}__arithmetic__seed{seed}"
    run_dir.mkdir(parents=True)
    run = {
        "algorithm": algorithm,
        "env": "arithmetic",
        "seed": seed,
        "model": "tiny",
        "steps": 1000,
        "eval_every": 25,
        "budget_flops": BUDGET,
        "eval_points": points,
        "mini_batches": 1,
        "epochs": 1,
    }
    (run_dir / "config.json").write_text(json.dumps({"run": run}))
    records = []
    for step in range(points + 1):
        flops = BUDGET * step / points
        record: dict = {
            "step": step,
            "samples": 64 * step,
            "flops": flops,
            "seconds": step,
            "eval_reward": reward(step, seed, algorithm),
        }
        if step > 0:
            for p in PHASES:
                record.update(
                    {f"{p}_flops": flops / len(PHASES), f"{p}_seconds": 0.1, f"{p}_tokens": 100}
                )
        records.append(record)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def write_experiment(out: Path, points: int) -> Path:
    """grpo and dapo, seeds 0 and 1; experiment.json as an experiment from before this
    change wrote it (the fixed headline string)."""
    out.mkdir(parents=True)
    machine = {"cpu": "test", "cores": 1, "memory_gib": 1, "torch_threads": 1}
    manifest = {
        "command": f"python -m harness compare --eval-points {points} (synthetic)",
        "created": "today",
        "versions": {"forge-zoo": "test"},
        "machine": machine,
        "headline": OLD_HEADLINE,
    }
    (out / "experiment.json").write_text(json.dumps(manifest))
    for algorithm in ("grpo", "dapo"):
        for seed in (0, 1):
            write_run(out, algorithm, seed, points)
    return out


def test_headline_checkpoints_never_include_the_start():
    assert headline_checkpoints(8) == [6, 7, 8]
    assert headline_checkpoints(3) == [1, 2, 3]
    assert headline_checkpoints(2) == [1, 2]
    assert headline_checkpoints(1) == [1]


@pytest.mark.parametrize(
    ("points", "averaged", "text"),
    [
        (
            1,
            [1],
            "held-out greedy reward at each run's last checkpoint (1/1 of the budget), "
            "then the mean over seeds",
        ),
        (
            2,
            [1, 2],
            "held-out greedy reward, the mean of each run's last 2 compute "
            "checkpoints (1/2, 2/2 of the budget), then the mean over seeds",
        ),
        (
            8,
            [6, 7, 8],
            "held-out greedy reward, the mean of each run's last 3 compute "
            "checkpoints (6/8, 7/8, 8/8 of the budget), then the mean over seeds",
        ),
    ],
)
def test_headline_averages_the_trained_checkpoints_and_says_which(
    tmp_path: Path, points: int, averaged: list[int], text: str
):
    out = write_experiment(tmp_path / "exp", points)
    frame = pd.DataFrame([row for run in load_runs(out) for row in checkpoint_rows(run)])
    assert sorted(frame["point"].unique()) == list(range(points + 1))
    scores = run_scores(frame).set_index(["algorithm", "seed"])
    for algorithm in ("grpo", "dapo"):
        for seed in (0, 1):
            expected = sum(reward(k, seed, algorithm) for k in averaged) / len(averaged)
            assert scores.loc[(algorithm, seed), "headline"] == pytest.approx(expected)
    assert headline_text(points) == text
    assert experiment_headline(out) == text


def test_report_legend_and_summary_name_the_checkpoints_used(tmp_path: Path, monkeypatch, capsys):
    one = write_experiment(tmp_path / "one", points=1)
    with pytest.MonkeyPatch.context() as patch:  # few resamples: the fit is not checked here
        patch.setattr(harness.analysis, "FIT_BOOTSTRAP_REPS", 5)
        write_analysis(one)
    report = (one / "report.md").read_text()
    assert f"Headline, fixed before the runs: {headline_text(1)}." in report
    assert "last 3" not in report and "6/8" not in report  # not the old fixed string
    summary = pd.read_csv(one / "tables" / "summary.csv").set_index("algorithm")
    assert summary.loc["grpo", "headline_mean"] == pytest.approx(
        (reward(1, 0, "grpo") + reward(1, 1, "grpo")) / 2
    )
    monkeypatch.setenv("COLUMNS", "400")  # rich wraps the caption to the terminal width
    print_summary(one)
    assert "last checkpoint (1/1 of the budget)" in capsys.readouterr().out
    # The leaderboard legend: once when the section's experiments agree, else per experiment.
    eight = write_experiment(tmp_path / "eight", points=8)
    alone = headline_legend([str(eight)], "arithmetic")
    assert alone.startswith(
        "Headline (held-out greedy reward, the mean of each run's last 3 "
        "compute checkpoints (6/8, 7/8, 8/8 of the budget), then"
    )
    mixed = headline_legend([str(one), str(eight)], "arithmetic")
    assert mixed.startswith(f"Headline ({HEADLINE})")  # the rule in words, then each
    one_text = "one: held-out greedy reward at each run's last checkpoint (1/1 of the budget)"
    assert f"Headline by experiment: {one_text}" in mixed
    assert f"eight: {headline_text(8)}" in mixed

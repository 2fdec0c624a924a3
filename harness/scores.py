"""A run's numbers as a board reads them: its compute checkpoints (held-out reward at
k/K of its budget) and its headline, the one number per run every table, verdict and
leaderboard ranks by. Kept apart from harness/analysis.py (tables, plots, the report) so
that the statistics modules and the commands that only need the headline read it without
the plotting stack."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from harness.runner import read_metrics
from zoo.core.config import ConfigError
from zoo.files import UnreadableFile, jsonl_shown, read_json

SPENT_KEY = {"flops": "flops", "samples": "samples", "seconds": "seconds", "steps": "step"}


def budget_of(run: dict) -> tuple[str, float, int]:
    """(unit, amount, K evaluation points) of a run's config."""
    r = run["config"]["run"]
    for unit, key in (
        ("flops", "budget_flops"),
        ("samples", "budget_samples"),
        ("seconds", "budget_seconds"),
    ):
        if r.get(key):
            return unit, float(r[key]), int(r["eval_points"])
    steps = int(r["steps"])
    return "steps", float(steps), max(1, steps // int(r["eval_every"]))


def load_runs(out: Path) -> list[dict]:
    """The runs of an experiment folder that hold records. A config.json or metrics.jsonl
    that cannot be read whole is an UnreadableFile naming it (exit status 2): a row must
    not lose a seed to a damaged file without a word."""
    runs = []
    for run_dir in sorted((out / "runs").iterdir()):
        if not (run_dir / "config.json").exists():
            continue
        config = read_json(run_dir / "config.json")
        records = read_metrics(run_dir)
        if records:
            run = config.get("run")
            if not isinstance(run, dict) or not {"algorithm", "env", "seed"} <= set(run):
                raise UnreadableFile(run_dir / "config.json", "holds no run config")
            runs.append(
                {
                    "dir": run_dir,
                    "config": config,
                    "records": records,
                    # the row: the algorithm, or its setting in an ablation (--vary)
                    "algorithm": run.get("variant") or run["algorithm"],
                    "plugin": run["algorithm"],
                    "env": run["env"],
                    "seed": run["seed"],
                }
            )
    return runs


def check_headlines(out: Path, runs: list[dict], manifest: dict) -> None:
    """Refuse (ConfigError, exit status 2) an experiment whose summary would rank a row on
    fewer seeds than experiment.json says it ran (a run with no records, or whose
    evaluations stop short of its budget), or on a headline that is not a number. Said
    before anything is written, naming the first such run."""
    points = pd.DataFrame([row for run in runs for row in checkpoint_rows(run)])
    scores = run_scores(points) if len(points) else pd.DataFrame()
    headlines = {(r.env, r.algorithm, r.seed): r.headline for r in scores.itertuples()}
    loaded = {r["dir"].name: r for r in runs}
    problems = []
    for name in manifest.get("runs") or {}:
        run = loaded.get(name)
        if run is not None and (run["env"], run["algorithm"], run["seed"]) in headlines:
            continue
        folder = out / "runs" / name
        if run is not None:
            problems.append(f"the evaluations of {folder} stop before the end of its budget")
        elif (folder / "config.json").exists():
            problems.append(f"{jsonl_shown(folder / 'metrics.jsonl')} holds no record")
        else:
            problems.append(f"{folder} holds no config.json")
    for run in runs:  # (a mean over checkpoints would pass over a NaN among them)
        bad = [r for r in run["records"] if not math.isfinite(r.get("eval_reward", 0.0))]
        if bad:
            problems.append(
                f"{jsonl_shown(run['dir'] / 'metrics.jsonl')} gives eval_reward "
                f"{bad[0]['eval_reward']} at step {bad[0].get('step')}"
            )
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ConfigError(
            f"{problems[0]}{more}: the summary of {out} would rank its row on fewer seeds "
            "than it ran, or on no number. Continue the experiment (compare --resume), or "
            "restore the run"
        )


HEADLINE_POINTS = 3
HEADLINE = (
    "held-out greedy reward, the mean of each run's last 3 compute checkpoints after the "
    "untrained start (all of them when it has fewer), then the mean over seeds"
)
"""The one number per run the leaderboards rank by, fixed before any run (it is written
into every experiment.json when the experiment starts). Three checkpoints rather than the
last alone: one evaluation of 500 problems has a binomial standard error near 2 points.
The start (checkpoint 0) is never averaged: with ``--eval-points`` 1 or 2 it would pull
the headline halfway back to the untrained model. The rule in words; ``headline_text``
names the checkpoints one experiment's eval points give."""


def headline_checkpoints(points: int) -> list[int]:
    """The checkpoints k of 1..``points`` (k/points of the budget; 0 is the untrained
    start) whose held-out reward a run's headline averages: the last HEADLINE_POINTS of
    them, fewer when the run has fewer, never the start."""
    return list(range(max(1, points - HEADLINE_POINTS + 1), points + 1))


def headline_text(points: int) -> str:
    """HEADLINE for runs with ``points`` compute checkpoints after the start, naming the
    ones averaged, e.g. "the last 3 compute checkpoints (6/8, 7/8, 8/8 of the budget)"."""
    used = headline_checkpoints(points)
    where = f"({', '.join(f'{k}/{points}' for k in used)} of the budget)"
    if len(used) == 1:
        per_run = f"held-out greedy reward at each run's last checkpoint {where}"
    else:
        last = f"last {len(used)} compute checkpoints"
        per_run = f"held-out greedy reward, the mean of each run's {last} {where}"
    return f"{per_run}, then the mean over seeds"


def experiment_headline(out: Path, env: str | None = None) -> str:
    """``headline_text`` for the runs of an experiment folder (those of ``env`` only, when
    given), from each run's config.json: one wording, or one per number of eval points
    when its runs differ; HEADLINE when no config says how many it had."""
    points, splits = set(), set()
    for path in (out / "runs").glob("*/config.json"):
        run = read_json(path).get("run", {})
        if env is not None and run.get("env", env) != env:
            continue
        splits.add(run.get("eval_split", "heldout"))
        try:
            points.add(budget_of({"config": {"run": run}})[2])
        except KeyError:
            continue  # a config without its evaluation schedule: only the rule can be said
    if not points:
        text = HEADLINE
    elif len(points) == 1:
        text = headline_text(points.pop())
    else:
        text = "; ".join(f"with {k} eval points: {headline_text(k)}" for k in sorted(points))
    # a tuning sweep (harness tune) scores the validation split, never the held-out one
    return text.replace("held-out", "validation") if splits == {"validation"} else text


SAMPLED_METRICS = ("eval_pass_at_1", "eval_pass_at_4", "eval_pass_at_8", "eval_mean_at_8")
"""Sampled held-out metrics (zoo/services/evaluation.py), summarised like the headline."""


def checkpoint_rows(run: dict) -> list[dict]:
    """Held-out reward at each compute checkpoint k = 0..K: the first evaluation at or
    past k/K of the budget (k = 0: the starting weights), with the sampled metrics the
    run logged there."""
    unit, amount, points = budget_of(run)
    evals = [r for r in run["records"] if "eval_reward" in r]
    # optimizer steps taken by each step's end (records from before "updates": nan)
    updates = np.cumsum(
        [r.get("updates", 0 if r["step"] == 0 else math.nan) for r in run["records"]]
    )
    steps_at = {r["step"]: float(u) for r, u in zip(run["records"], updates, strict=True)}
    rows = []
    for k in range(points + 1):
        target = amount * k / points
        hit = next((r for r in evals if r[SPENT_KEY[unit]] >= target - 1e-9), None)
        if hit is None:
            break  # the run did not get there (interrupted)
        rows.append(
            {
                "env": run["env"],
                "algorithm": run["algorithm"],
                "seed": run["seed"],
                "point": k,
                "budget_fraction": k / points,
                "flops": hit["flops"],
                "seconds": hit["seconds"],
                "reward": hit["eval_reward"],
                "optimizer_steps": 0.0 if k == 0 else steps_at.get(hit["step"], math.nan),
                **{m: hit[m] for m in SAMPLED_METRICS if m in hit},
            }
        )
    return rows


def run_scores(points: pd.DataFrame) -> pd.DataFrame:
    """One row per run: the headline (mean reward over its checkpoints
    ``headline_checkpoints``: the last HEADLINE_POINTS, never the start), the same for
    each sampled metric, and the area under its reward curve over the budget fraction.
    Runs that did not reach the end of the budget are left out."""
    last = points["point"].max()
    rows = []
    for (env, algo, seed), d in points.groupby(["env", "algorithm", "seed"]):
        d = d.sort_values("point")
        if d["point"].max() < last:
            continue
        tail = d[d["point"].isin(headline_checkpoints(last))]
        row = {
            "env": env,
            "algorithm": algo,
            "seed": seed,
            "headline": tail["reward"].mean(),
            "final": d["reward"].iloc[-1],
            "auc": np.trapezoid(d["reward"], d["budget_fraction"]),
        }
        for m in SAMPLED_METRICS:
            if m in tail and tail[m].notna().all():
                row[m.removeprefix("eval_")] = tail[m].mean()
        rows.append(row)
    return pd.DataFrame(rows)

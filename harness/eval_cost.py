"""What a board's evaluation costs and what precision it buys, per row (report.md's
"What the evaluation costs and buys", tables/evaluation.csv).

The headline of a run is the mean greedy reward over its last ``HEADLINE_POINTS``
evaluations of the same held-out problems. Three sources of noise reach it:

- **checkpoints**: the reward moves from one evaluation to the next as training goes on;
  averaging K of them divides that standard deviation by sqrt(K) (``checkpoint_se``);
- **seeds**: runs of the same row at other seeds end elsewhere (``seed_sd``, the spread a
  pair's test and interval are made of; the checkpoint noise is part of it);
- **problems**: N held-out problems estimate the reward on the task with a standard
  error of at most sqrt(p (1 - p) / N) (``problems_se``, exact for 0/1 rewards); every row
  is scored on the same problems, so it moves all rows together and cancels in a paired
  difference: it bounds how well the absolute level is known, not the ranking.

And the cost: seconds per greedy-only evaluation and per evaluation that also samples
``eval_samples`` completions per problem for pass@k (``--sampled-eval-points`` of them,
at the end), from each record's ``eval_seconds``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

SAMPLED_KEY = "eval_mean_at_"
"""The prefix of the mean sampled reward: present exactly where an evaluation sampled."""


def eval_seconds(run: dict) -> tuple[list[float], list[float]]:
    """(greedy-only, sampled) seconds of a run's evaluations."""
    greedy, sampled = [], []
    for r in run["records"]:
        if "eval_seconds" in r:
            is_sampled = any(k.startswith(SAMPLED_KEY) for k in r)
            (sampled if is_sampled else greedy).append(r["eval_seconds"])
    return greedy, sampled


def held_out_problems(run: dict) -> int | None:
    """How many problems one evaluation scores: the env's split as the run configured
    it (None when the env cannot be built here, e.g. a data set not in the cache)."""
    from zoo.envs import get_env

    cfg = run["config"]["run"]
    try:
        env = get_env(cfg["env"], **(cfg.get("env_config") or {}))
        return len(env.eval_split(cfg.get("eval_split", "heldout")))
    except Exception:  # any failure to build the env here: the figure is unknown
        return None


def evaluation_table(runs: list[dict], points: pd.DataFrame, headline_points: int) -> pd.DataFrame:
    """Per (env, algorithm): evaluation points per run, mean seconds of a greedy-only and of
    a sampled evaluation, the checkpoint noise of the headline (median over runs of the
    standard deviation of the reward over its ``headline_points`` last checkpoints, and
    that over sqrt(K)), the headline's seed standard deviation, and the problem-set bound."""
    problems = {}
    for run in runs:  # one env build per env
        problems.setdefault(run["env"], held_out_problems(run))
    rows = []
    by_row: dict[tuple[str, str], list[dict]] = {}
    for run in runs:
        by_row.setdefault((run["env"], run["algorithm"]), []).append(run)
    for (env, algorithm), members in by_row.items():
        mine = points[(points.env == env) & (points.algorithm == algorithm)]
        last = mine["point"].max()
        tail = mine[(mine.point > last - headline_points) & (mine.point > 0)]
        per_seed = tail.groupby("seed")["reward"]
        checkpoint_sd = float(per_seed.std().median()) if len(tail) else math.nan
        headlines = per_seed.mean()
        p, n = float(headlines.mean()), problems[env]
        greedy = [s for run in members for s in eval_seconds(run)[0]]
        sampled = [s for run in members for s in eval_seconds(run)[1]]
        rows.append(
            {
                "env": env,
                "algorithm": algorithm,
                "runs": len(members),
                "evaluations_per_run": (len(greedy) + len(sampled)) / len(members),
                "greedy_s": float(np.mean(greedy)) if greedy else math.nan,
                "sampled_s": float(np.mean(sampled)) if sampled else math.nan,
                "checkpoint_sd": checkpoint_sd,
                "checkpoint_se": checkpoint_sd / math.sqrt(headline_points),
                "seed_sd": float(headlines.std()) if len(headlines) > 1 else math.nan,
                "problems": n,
                "problems_se": math.sqrt(max(p * (1 - p), 0.0) / n) if n else math.nan,
            }
        )
    return pd.DataFrame(rows)

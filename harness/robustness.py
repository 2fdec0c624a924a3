"""How much a board's ranking can be trusted beyond its pairwise tests: how far each rank
could move under other seeds, whether it already held at half the budget, whether the
curves were still rising when the budget ran out, whether it survives matching optimizer
steps instead of FLOPs, and how often the board's decision rule separates an algorithm
from itself.

Pure functions over the ``points`` frame of harness/scores.py (one row per env,
algorithm, seed and compute checkpoint k = 0..K, with ``reward`` the held-out greedy
reward there) or over its ``run_scores`` frame (one row per run, ``headline``). K is taken
per env as the largest checkpoint any of its runs reached, and, as in ``run_scores``, only
runs that reached K count. A run's headline is always the board's own: the mean reward over
``headline_checkpoints(K)`` (the last 3 checkpoints, never the start).

The headline's rule comes from harness/scores.py, the one place that defines it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as sps

from harness.scores import headline_checkpoints, run_scores
from harness.stats import MIN_BOOTSTRAP_SEEDS, holm, t_interval

RANK_COLUMNS = ["env", "algorithm", "mean", "rank", "rank_low", "rank_high", "paired_bootstrap"]


def _ranks(means: np.ndarray) -> np.ndarray:
    """Ranks (1 = highest mean) along the last axis, whose order is the algorithms' name
    order; equal means are ranked by that order (the earlier name first):
    rank_i = 1 + #{j : m_j > m_i} + #{j < i : m_j == m_i}."""
    m = np.asarray(means, dtype=float)
    above = (m[..., None, :] > m[..., :, None]).sum(axis=-1)
    earlier = np.tril(np.ones((m.shape[-1], m.shape[-1]), dtype=bool), k=-1)
    tied_before = ((m[..., None, :] == m[..., :, None]) & earlier).sum(axis=-1)
    return 1 + above + tied_before


def _rank_bounds(means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best, worst) rank each algorithm could be given along the last axis when equal means
    may be ordered either way: best = 1 + #{j : m_j > m_i},
    worst = #{j : m_j > m_i} + #{j : m_j == m_i} (itself included)."""
    m = np.asarray(means, dtype=float)
    above = (m[..., None, :] > m[..., :, None]).sum(axis=-1)
    equal = (m[..., None, :] == m[..., :, None]).sum(axis=-1)
    return 1 + above, above + equal


def rank_intervals(
    scores: pd.DataFrame,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    min_seeds: int = MIN_BOOTSTRAP_SEEDS,
) -> pd.DataFrame:
    """Per env: each algorithm's mean headline, its rank (1 = best mean, equal means ranked
    by name) and a percentile bootstrap interval of that rank.

    Why: a table sorted by means shows an order even where the seeds cannot tell two rows
    apart; the rank interval says which places an algorithm could have taken with other
    seeds. Algorithms whose intervals overlap are not ordered by the board.

    ``scores`` has one row per run: env, algorithm, seed, headline (``run_scores``).
    Each of ``reps`` replicates draws seeds with replacement, recomputes every algorithm's
    mean and ranks the means; rank_low is the (1 - confidence)/2 quantile of an
    algorithm's replicate ranks and rank_high the (1 + confidence)/2 quantile, both taken
    as observed ranks (numpy's ``inverted_cdf``), so whole numbers. In a replicate where
    means are exactly equal (identical runs, lumpy discrete rewards) the tied algorithms
    may take any of the tied places: rank_low reads each replicate's best such place,
    rank_high its worst, so two indistinguishable algorithms get [1, 2] and not the
    name order's [1, 1] and [2, 2].

    Runs with the same seed share their prompt stream, so the draw is paired: one set of
    seed indices serves every algorithm that ran the board's seed set, which keeps a
    seed's shared luck in all of them (a seed that is easy for all moves no rank). The
    board's seed set is the set of seeds that most of the env's algorithms ran exactly
    (on equal counts the larger set); an algorithm with any other set, one with seeds the
    others lack (the negative-control twin runs grpo's seeds + 1000) or one missing a seed
    (a run that did not finish), is resampled over its own seeds, independently.
    ``paired_bootstrap`` says which (True only when at least two algorithms share the
    draw). Not the intersection of all seed sets: the twin's seeds are disjoint from the
    rest, so one twin, or one crashed run, would leave no algorithm paired.

    As everywhere in harness/stats.py, a percentile bootstrap is only reported from
    ``min_seeds`` seeds up (default MIN_BOOTSTRAP_SEEDS, see there why): when any algorithm
    of an env resamples from fewer seeds, that env's rank_low and rank_high are nan (every
    rank depends on every algorithm's resampled mean). Pass ``min_seeds=1`` to have them
    anyway. Extra column ``seeds``: the algorithm's number of runs.
    """
    duplicated = scores.duplicated(["env", "algorithm", "seed"])
    if duplicated.any():
        raise ValueError(f"scores has several rows for one run: {scores[duplicated].head()}")
    tail = (1 - confidence) / 2
    rng = np.random.default_rng(seed)
    rows = []
    for env, e in scores.groupby("env", sort=True):
        by_algo = {
            a: d.set_index("seed")["headline"].sort_index()
            for a, d in e.groupby("algorithm", sort=True)
        }
        names = list(by_algo)  # name order, as _ranks expects
        sets = Counter(tuple(by_algo[a].index) for a in names)
        common = max(sorted(sets), key=lambda seeds: (sets[seeds], len(seeds)))  # first max
        joint = [a for a in names if tuple(by_algo[a].index) == common]
        paired = set(joint) if len(joint) >= 2 else set()
        means = np.array([by_algo[a].mean() for a in names])
        ranks = _ranks(means)
        pools = [len(common) if a in paired else len(by_algo[a]) for a in names]
        low = high = np.full(len(names), math.nan)
        if min(pools) >= min_seeds:
            boot = np.empty((reps, len(names)))
            shared = rng.integers(0, len(common), (reps, len(common))) if paired else None
            for i, a in enumerate(names):
                values = by_algo[a].to_numpy(dtype=float)
                idx = shared if a in paired else rng.integers(0, len(values), (reps, len(values)))
                boot[:, i] = values[idx].mean(axis=1)
            best, worst = _rank_bounds(boot)
            low = np.quantile(best, tail, axis=0, method="inverted_cdf")
            high = np.quantile(worst, 1 - tail, axis=0, method="inverted_cdf")
        for i, a in enumerate(names):
            rows.append(
                {
                    "env": env,
                    "algorithm": a,
                    "mean": float(means[i]),
                    "rank": int(ranks[i]),
                    "rank_low": float(low[i]),
                    "rank_high": float(high[i]),
                    "paired_bootstrap": a in paired,
                    "seeds": len(by_algo[a]),
                }
            )
    return pd.DataFrame(rows, columns=[*RANK_COLUMNS, "seeds"])


def _complete_runs(points: pd.DataFrame) -> dict[str, tuple[int, pd.DataFrame]]:
    """env -> (K, its points restricted to the runs that reached K), K the env's largest
    checkpoint."""
    out = {}
    for env, e in points.groupby("env", sort=True):
        last = int(e["point"].max())
        reached = e.groupby(["algorithm", "seed"])["point"].transform("max") == last
        out[env] = (last, e[reached])
    return out


def _headlines(points: pd.DataFrame) -> pd.Series:
    """(algorithm -> mean over seeds of the run headlines) of one env's complete runs,
    each headline by harness/analysis.py's ``run_scores``, so exactly the board's."""
    return run_scores(points).groupby("algorithm")["headline"].mean().sort_index()


def half_budget_stability(points: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Whether an env's ranking had already settled at half the budget.

    Why: a ranking that reshuffles between half and full budget is one a somewhat larger
    or smaller budget would likely have reshuffled again; one that held is less an
    artefact of where the budget happened to stop.

    Per (env, algorithm), over the runs that reached K: ``headline_full``, the board's
    headline (each run's mean reward over ``headline_checkpoints(K)``, i.e. K-2..K, then
    the mean over seeds), and ``headline_half``, the same rule as if the budget had ended
    at checkpoint H = floor(K/2): each run's mean over ``headline_checkpoints(H)``, the last
    3 of 1..H, never the start; then ``rank_full`` and ``rank_half`` in the env (1 = best,
    equal means ranked by name) and ``rank_move`` = rank_full - rank_half (negative: it
    climbed). With K < 2 there is no half-budget checkpoint: headline_half and rank_half
    are nan.

    Second frame, per env: Kendall's tau-b between the half- and full-budget orders and its
    p-value (scipy.stats.kendalltau, exact for small n without ties), ``n`` algorithms,
    and the largest rank move (``moved``: the algorithm with the largest |rank_move|, the
    better full rank on equal moves; ``moved_from`` its half-budget rank, ``moved_to`` its
    full-budget rank; None / nan when no rank changed). tau is computed on the headline
    means, not on the name-broken ranks, so that two exactly equal means count as a tie
    (what tau-b corrects for) rather than as an order; tau = 1 is the same order, -1 the
    reverse. It is nan with fewer than 2 algorithms or when one side is all ties.
    """
    per_algo, per_env = [], []
    for env, (last, e) in _complete_runs(points).items():
        full = _headlines(e)
        half_point = last // 2
        if half_point >= 1:
            half = _headlines(e[e["point"] <= half_point]).reindex(full.index)
            rank_half = _ranks(half.to_numpy()).astype(float)
        else:
            half = pd.Series(math.nan, index=full.index)
            rank_half = np.full(len(full), math.nan)
        rank_full = _ranks(full.to_numpy())
        frame = pd.DataFrame(
            {
                "env": env,
                "algorithm": full.index,
                "headline_full": full.to_numpy(),
                "headline_half": half.to_numpy(),
                "rank_full": rank_full,
                "rank_half": rank_half,
                "rank_move": rank_full - rank_half,
            }
        )
        per_algo.append(frame)
        tau = p = math.nan
        if len(full) >= 2 and half_point >= 1:
            result = sps.kendalltau(half.to_numpy(), full.to_numpy())
            tau, p = float(result.statistic), float(result.pvalue)
        row = {
            "env": env,
            "kendall_tau": tau,
            "p_value": p,
            "n": len(full),
            "moved": None,
            "moved_from": math.nan,
            "moved_to": math.nan,
        }
        moves = frame.assign(size=frame["rank_move"].abs()).sort_values(
            ["size", "rank_full"], ascending=[False, True]
        )
        if len(moves) and moves["size"].iloc[0] > 0:
            top = moves.iloc[0]
            row.update(
                moved=top["algorithm"],
                moved_from=float(top["rank_half"]),
                moved_to=float(top["rank_full"]),
            )
        per_env.append(row)
    return pd.concat(per_algo, ignore_index=True), pd.DataFrame(per_env)


def _slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope sum((x - x̄)(y - ȳ)) / sum((x - x̄)^2); nan with < 2 distinct x."""
    dx = x - x.mean()
    ss = float((dx**2).sum())
    return float((dx * (y - y.mean())).sum() / ss) if ss > 0 else math.nan


def still_rising(points: pd.DataFrame, alpha: float = 0.05) -> pd.DataFrame:
    """Whether each algorithm was still improving when the budget ran out.

    Why: the board compares algorithms at one budget. An algorithm whose reward was still
    climbing at the end would probably have placed higher with more compute; a "win" over
    it may only say that it learns more slowly.

    Per (env, algorithm), over the runs that reached K: for each seed the least-squares
    slope b_s of reward against budget_fraction over the checkpoints k >= ceil(K/2),
    b = sum((x - x̄)(y - ȳ)) / sum((x - x̄)^2), in reward per whole budget; ``slope`` is
    their mean over seeds, ``slope_low``/``slope_high`` its 95% Student t interval, and
    ``p_value`` the one-sided t-test of mean slope > 0: t = b̄ / (s_b / sqrt(n)),
    p = P(T_{n-1} > t) (no spread: 0.0 when b̄ > 0, else 1.0, the convention of
    harness/stats.py). ``still_rising`` = p_value < alpha; ``p_holm`` is p_value
    Holm-adjusted over the env's algorithms, for whoever wants the family-wise reading
    (the flag does not use it). With one seed, or K < 2 (no second half with two
    checkpoints), p_value is nan and the flag False.

    ``last_gain``: the mean over seeds of reward(K) - reward(floor(K/2)), the plain size of
    the second half's improvement, in reward.
    """
    rows = []
    for env, (last, e) in _complete_runs(points).items():
        start, mid = math.ceil(last / 2), last // 2
        env_rows = []
        for algo, a in e.groupby("algorithm", sort=True):
            slopes, gains = [], []
            for _, run in a.groupby("seed", sort=True):
                tail = run[run["point"] >= start]
                slopes.append(
                    _slope(
                        tail["budget_fraction"].to_numpy(dtype=float),
                        tail["reward"].to_numpy(dtype=float),
                    )
                )
                reward = run.set_index("point")["reward"]
                gains.append(float(reward.get(last, math.nan) - reward.get(mid, math.nan)))
            b = np.array(slopes)
            mean, low, high = t_interval(b)
            p = math.nan
            if len(b) >= 2 and not np.isnan(b).any():
                se = float(b.std(ddof=1) / math.sqrt(len(b)))
                p = float(sps.t.sf(mean / se, len(b) - 1)) if se > 0 else float(mean <= 0)
            env_rows.append(
                {
                    "env": env,
                    "algorithm": algo,
                    "seeds": len(b),
                    "slope": mean,
                    "slope_low": low,
                    "slope_high": high,
                    "p_value": p,
                    "still_rising": bool(p < alpha),
                    "last_gain": float(np.mean(gains)),
                }
            )
        adjusted = holm([r["p_value"] for r in env_rows])
        rows += [{**r, "p_holm": q} for r, q in zip(env_rows, adjusted, strict=True)]
    return pd.DataFrame(rows)


def step_matched_scores(points: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """Every run's headline re-read at matched optimizer steps instead of matched FLOPs.

    Why: at one FLOP budget an algorithm that spends fewer FLOPs per update (fewer samples
    per prompt, no critic, no reference model) takes more optimizer steps. Re-scoring every
    run at the same number of steps separates "learns more per update" from "affords more
    updates"; a ranking that holds in both is not just the price of an update.

    ``points`` needs an ``optimizer_steps`` column: the run's cumulative optimizer steps at
    each checkpoint (non-decreasing in k; 0 at the start, k = 0, where nan is read as 0).
    Per env, S = the smallest final optimizer_steps (at K) over the runs that reached K:
    the most steps every run took. Each run's reward is a function of its steps, linear
    between its checkpoints (point 0 at 0 steps included); ``headline_at_steps`` is its
    mean at S k / K for k in ``headline_checkpoints(K)`` (K-2..K), the board's headline rule
    with steps for budget. Those step counts lie within every run's own range (S is at most
    its final count), so nothing is extrapolated. The run with the fewest steps keeps its
    FLOP-matched headline exactly when its checkpoints are evenly spaced in steps.

    Returns (frame with env, algorithm, seed, headline_at_steps, final_steps, one row per
    run that reached K; {env: S}), a dict even for one env, so callers index by env alike.
    Raises ValueError when a run has no start checkpoint, a nonzero count there, a count
    that decreases, or a non-integer S.
    """
    rows, matched = [], {}
    for env, (last, e) in _complete_runs(points).items():
        finals = e[e["point"] == last].set_index(["algorithm", "seed"])["optimizer_steps"]
        steps = float(finals.min())
        if not steps.is_integer():
            raise ValueError(f"env {env}: optimizer_steps at K must be whole, min is {steps}")
        matched[env] = int(steps)
        targets = np.array([steps * k / last for k in headline_checkpoints(last)])
        for (algo, seed), run in e.groupby(["algorithm", "seed"], sort=True):
            run = run.sort_values("point")
            if run["point"].iloc[0] != 0:
                raise ValueError(f"{env}/{algo}/seed {seed}: no start checkpoint (point 0)")
            x = run["optimizer_steps"].to_numpy(dtype=float, copy=True)
            x[0] = 0.0 if math.isnan(x[0]) else x[0]
            if x[0] != 0 or (np.diff(x) < 0).any() or np.isnan(x).any():
                raise ValueError(
                    f"{env}/{algo}/seed {seed}: optimizer_steps must start at 0 "
                    f"and never decrease, got {x.tolist()}"
                )
            value = np.interp(targets, x, run["reward"].to_numpy(dtype=float)).mean()
            rows.append(
                {
                    "env": env,
                    "algorithm": algo,
                    "seed": seed,
                    "headline_at_steps": float(value),
                    "final_steps": int(finals.loc[(algo, seed)]),
                }
            )
    columns = ["env", "algorithm", "seed", "headline_at_steps", "final_steps"]
    return pd.DataFrame(rows, columns=columns), matched


def _paired_t_rejects(samples: np.ndarray, alpha: float) -> np.ndarray:
    """Row-wise decision of the board's paired test on rows of differences: two-sided
    one-sample t-test of mean 0 (dof n - 1), reject when p < alpha. A row without spread
    follows harness/stats.py: p = 1.0 if its mean is 0 (no difference), else 0.0."""
    n = samples.shape[1]
    mean = samples.mean(axis=1)
    se = samples.std(axis=1, ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = 2 * sps.t.sf(np.abs(mean / se), n - 1)
    p = np.where(se == 0, np.where(mean == 0, 1.0, 0.0), p)
    return p < alpha


def decision_rule_false_positives(
    differences: np.ndarray, alpha: float, reps: int = 4000, seed: int = 0
) -> dict[str, Any]:
    """How often the board's decision rule declares a difference between an algorithm and
    itself, under the seed noise the board actually has.

    Why: the paired t-test's false-positive rate is alpha only for normal differences. With
    3-10 seeds of discrete rewards the noise can be skewed, heavy-tailed or lumpy (many
    exact ties), and the rate can be far from alpha; an A/A control (an algorithm against
    a copy of itself with independent sampling noise) shows that noise.

    ``differences``: the control's per-seed paired differences. ``alpha``: the level at
    which the board decides, already adjusted for the family (e.g. 0.05 / 6 for Holm's
    strictest step over 6 pairs). Each of ``reps`` replicates draws n differences with
    replacement and multiplies each by an independent random sign, so the null
    (a symmetric distribution about 0) holds exactly while the magnitudes keep the noise's
    shape; the replicate is tested as the board does (two-sided paired t-test, p < alpha;
    a replicate without spread rejects iff its mean is nonzero, as in harness/stats.py).

    Returns {"rate": rejections / reps, "reps", "n", "alpha",
    "interval": (low, high)}: the 95% Clopper-Pearson interval of the rate
    (scipy.stats.binomtest, exact, so it never undercovers).

    Caveats: the resample has repeated values (a bootstrap of n values holds about
    0.63 n distinct ones), which thins its spread and makes the estimate err high for
    small n. At n = 3 the replicates that repeat one difference with one sign (1/36 of
    them) have no spread and a nonzero mean, so they reject at any alpha: the rate cannot
    fall below 0.028 (at n = 4, 0.002). And the sign flip imposes the null whatever the
    differences' mean, so it cannot reveal a biased control (a nonzero mean is turned
    into spread); check the control's own mean for that.
    """
    d = np.asarray(differences, dtype=float).ravel()
    n = len(d)
    if n < 2 or not np.isfinite(d).all():
        raise ValueError(f"need at least 2 finite differences, got {d.tolist()}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    rng = np.random.default_rng(seed)
    samples = d[rng.integers(0, n, (reps, n))] * rng.choice([-1.0, 1.0], (reps, n))
    rejected = int(_paired_t_rejects(samples, alpha).sum())
    ci = sps.binomtest(rejected, reps).proportion_ci(0.95, method="exact")
    return {
        "rate": rejected / reps,
        "reps": reps,
        "n": n,
        "alpha": alpha,
        "interval": (float(ci.low), float(ci.high)),
    }

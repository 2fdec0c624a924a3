"""Statistics people can trust (rliable's method, Agarwal et al., NeurIPS 2021,
arXiv 2108.13264). The compute-performance fit is in harness/fits.py.

rliable itself is not used: its only release here is an sdist that pulls in `arch` and
seaborn; the estimators it would provide are a few lines of numpy/scipy below.

Leaderboards here compare algorithms over a handful of seeds (3 to ~10), so every
function errs towards saying less: a percentile bootstrap is only reported from
``MIN_BOOTSTRAP_SEEDS`` seeds up (below that it collapses to the seeds' min and max),
small samples get Student t intervals and tests, a ranking comes with Holm-adjusted
p-values and tie groups, and the sigmoid fit says whether its asymptote is identified by
the data at all.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as sps
from scipy.stats import trim_mean

MIN_BOOTSTRAP_SEEDS = 10
"""Fewest seeds from which a percentile bootstrap interval is reported. With n seeds the
bootstrap distribution of a location statistic lives inside [min, max] of the seeds and,
for n = 3, its 2.5% and 97.5% points are the min and the max themselves: an interval that
is only the data's range, whatever the confidence asked for."""


def bootstrap_interval_allowed(n: int) -> bool:
    """Whether ``n`` seeds are enough for a percentile bootstrap interval
    (``n >= MIN_BOOTSTRAP_SEEDS``)."""
    return n >= MIN_BOOTSTRAP_SEEDS


def iqm(values: np.ndarray) -> float:
    """Interquartile mean: the mean of the middle 50% (25% trimmed from each end)."""
    return float(trim_mean(np.asarray(values, dtype=float).ravel(), proportiontocut=0.25))


def stratified_bootstrap_ci(
    runs_by_task: list[np.ndarray], reps: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile interval of the IQM over all runs, resampling runs (seeds) with
    replacement within each task (env), so every task keeps its number of runs."""
    rng = np.random.default_rng(seed)
    stats = np.empty(reps)
    for i in range(reps):
        sample = [task[rng.integers(0, len(task), len(task))] for task in runs_by_task]
        stats[i] = iqm(np.concatenate(sample))
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(stats, [tail, 100 - tail])
    return float(low), float(high)


def iqm_interval(
    values: np.ndarray, reps: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float, float]:
    """(IQM, low, high): the IQM and its percentile bootstrap interval over seeds, the
    bounds nan below ``MIN_BOOTSTRAP_SEEDS`` values (see there why)."""
    v = np.asarray(values, dtype=float).ravel()
    if not bootstrap_interval_allowed(len(v)):
        return (iqm(v) if len(v) else math.nan), math.nan, math.nan
    low, high = stratified_bootstrap_ci([v], reps=reps, confidence=confidence, seed=seed)
    return iqm(v), low, high


def t_interval(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student t interval of the mean,
    mean +- t_{(1+confidence)/2, n-1} * s / sqrt(n), s the sample standard deviation
    (ddof 1). It assumes roughly normal seed-to-seed noise but, unlike the bootstrap,
    keeps its coverage with 3 seeds. One value: (value, nan, nan); none: all nan."""
    v = np.asarray(values, dtype=float).ravel()
    n = len(v)
    if n == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if n == 1:
        return mean, math.nan, math.nan
    half = float(sps.t.ppf((1 + confidence) / 2, n - 1) * v.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half


def min_detectable_difference(
    sd: float,
    n_a: int,
    n_b: int | None = None,
    alpha: float = 0.05,
    power: float = 0.8,
    paired: bool = False,
) -> float:
    """Smallest true difference of means that a two-sided t-test at level ``alpha``
    detects with probability ``power``, given the seeds' standard deviation ``sd``.

    Unpaired (equal-variance two-sample test, ``n_b`` defaults to ``n_a``): standard
    error se = sd * sqrt(1/n_a + 1/n_b), dof = n_a + n_b - 2. Paired: ``sd`` is the
    standard deviation of the per-seed differences, n_a pairs, se = sd / sqrt(n_a),
    dof = n_a - 1. Under a true difference delta the statistic follows a noncentral t
    with noncentrality delta / se, so the power is
    P(T > t_crit) + P(T < -t_crit), t_crit = t_{1 - alpha/2, dof};
    the noncentrality that gives ``power`` is solved for exactly (brentq on the
    noncentral t, no normal approximation; Cohen 1988, ch. 2) and delta = ncp * se.

    A difference between two leaderboard entries smaller than this is one the seeds
    could not have resolved. nan when dof < 1 or ``sd`` is nan; 0.0 when ``sd`` is 0.
    """
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    if paired:
        if n_b is not None and n_b != n_a:
            raise ValueError(f"paired needs as many seeds on both sides, got {n_a} and {n_b}")
        dof, se_unit = n_a - 1, 1 / math.sqrt(n_a) if n_a > 0 else math.nan
    else:
        n_b = n_a if n_b is None else n_b
        dof = n_a + n_b - 2
        se_unit = math.sqrt(1 / n_a + 1 / n_b) if n_a > 0 and n_b > 0 else math.nan
    if dof < 1 or math.isnan(sd):
        return math.nan
    if sd == 0:
        return 0.0
    if power <= alpha:  # a test with no effect already rejects alpha of the time
        return 0.0
    crit = sps.t.ppf(1 - alpha / 2, dof)

    def shortfall(ncp: float) -> float:
        # The far tail P(T < -t_crit) is written as P(T' > t_crit) with T' of
        # noncentrality -ncp: scipy's nct.cdf returns nan out there (scipy 1.17).
        upper = sps.nct.sf(crit, dof, ncp)
        lower = np.nan_to_num(sps.nct.sf(crit, dof, -ncp), nan=0.0)
        return float(upper + lower) - power

    high = 2 * crit + 4.0
    while shortfall(high) < 0:  # heavy tails at dof 1-2 need a wider bracket
        high *= 2
    ncp = optimize.brentq(shortfall, 0.0, high, xtol=1e-12, rtol=1e-12)
    return float(ncp * sd * se_unit)


def row_mdd(headlines: Sequence[float]) -> float:
    """One row's minimum detectable difference at 80% power and 5%, for another row with as
    many seeds and the same spread (nan with fewer than 2 seeds): what ``reproduce`` judges
    a re-run of the row against, and the ``mdd_80`` of all-pairs summaries."""
    values = np.asarray(headlines, dtype=float)
    sd = float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    return min_detectable_difference(sd, len(values), len(values))


def _two_sided_t_p(diff_mean: float, se: float, dof: float) -> float:
    """Two-sided p of a t statistic, the degenerate zero-variance cases decided here
    (scipy would return nan): no spread and no difference -> 1.0, no spread and a
    difference -> 0.0."""
    if not (dof > 0) or math.isnan(se):
        return math.nan
    if se == 0:
        return 1.0 if diff_mean == 0 else 0.0
    return float(2 * sps.t.sf(abs(diff_mean / se), dof))


@dataclass(frozen=True)
class PairComparison:
    """X against Y over seeds (see ``probability_of_improvement``)."""

    p_improve: float
    """P(X > Y) + 0.5 P(X == Y): 0.5 is no difference, 1.0 every X run beats every Y run."""
    ci_low: float
    """Percentile bootstrap bound of ``p_improve``; nan below MIN_BOOTSTRAP_SEEDS seeds."""
    ci_high: float
    mean_difference: float
    """mean(X) - mean(Y)."""
    p_value: float
    """Two-sided: paired t-test on the differences, or Welch's t-test when unpaired."""
    paired: bool
    n_x: int
    n_y: int


def probability_of_improvement(
    x: np.ndarray,
    y: np.ndarray,
    paired: bool = False,
    reps: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    min_seeds: int = MIN_BOOTSTRAP_SEEDS,
) -> PairComparison:
    """rliable's probability of improvement of X over Y (Agarwal et al. 2021, sec. 4.3)
    with a t-test beside it.

    Unpaired: P = 1/(n_x n_y) sum_i sum_j ([x_i > y_j] + 0.5 [x_i == y_j]), which is the
    Mann-Whitney U of X divided by n_x n_y. Paired (seed s of X and of Y share something,
    e.g. the same data order): P = 1/n sum_s ([x_s > y_s] + 0.5 [x_s == y_s]); X and Y
    must then have equal lengths.

    The interval is a percentile bootstrap over seeds: unpaired, X and Y are resampled
    independently; paired, the seed indices are resampled jointly so pairs stay
    together. It is left nan when either side has fewer than ``min_seeds`` seeds
    (default MIN_BOOTSTRAP_SEEDS), for the reason given there; the p-value and
    ``min_detectable_difference`` are what a 3-seed comparison can honestly offer.

    p_value: paired t-test on x - y (dof n - 1), or Welch's unequal-variance t-test
    (Welch-Satterthwaite dof) when unpaired; nan with fewer than 2 seeds on a side; when
    there is no spread at all: 1.0 if the means are equal, 0.0 otherwise.
    """
    xs = np.asarray(x, dtype=float).ravel()
    ys = np.asarray(y, dtype=float).ravel()
    nx, ny = len(xs), len(ys)
    if nx == 0 or ny == 0:
        raise ValueError(f"need seeds on both sides, got {nx} and {ny}")
    if paired and nx != ny:
        raise ValueError(f"paired comparison needs equal lengths, got {nx} and {ny}")
    rng = np.random.default_rng(seed)
    tail = (1 - confidence) / 2 * 100
    low = high = math.nan
    if paired:
        score = np.sign(xs - ys) * 0.5 + 0.5  # 1 if x > y, 0.5 if equal, 0 if below
        point = float(score.mean())
        if min(nx, ny) >= min_seeds:
            idx = rng.integers(0, nx, (reps, nx))
            low, high = np.percentile(score[idx].mean(axis=1), [tail, 100 - tail])
        d = xs - ys
        se = float(d.std(ddof=1) / math.sqrt(nx)) if nx > 1 else math.nan
        p = _two_sided_t_p(float(d.mean()), se, nx - 1)
    else:
        point = _prob_greater(xs[None, :], ys[None, :])[0]
        if min(nx, ny) >= min_seeds:
            bx = xs[rng.integers(0, nx, (reps, nx))]
            by = ys[rng.integers(0, ny, (reps, ny))]
            low, high = np.percentile(_prob_greater(bx, by), [tail, 100 - tail])
        if nx > 1 and ny > 1:
            vx, vy = xs.var(ddof=1) / nx, ys.var(ddof=1) / ny
            se = math.sqrt(vx + vy)
            dof = (vx + vy) ** 2 / (vx**2 / (nx - 1) + vy**2 / (ny - 1)) if se > 0 else 1.0
            p = _two_sided_t_p(float(xs.mean() - ys.mean()), se, dof)
        else:
            p = math.nan
    return PairComparison(
        p_improve=float(point),
        ci_low=float(low),
        ci_high=float(high),
        mean_difference=float(xs.mean() - ys.mean()),
        p_value=p,
        paired=paired,
        n_x=nx,
        n_y=ny,
    )


def _prob_greater(bx: np.ndarray, by: np.ndarray) -> np.ndarray:
    """Row-wise P(X > Y) + 0.5 P(X == Y) over all (i, j) pairs of rows of bx and by."""
    cmp = np.sign(bx[:, :, None] - by[:, None, :]) * 0.5 + 0.5
    return cmp.mean(axis=(1, 2))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (Holm 1979), in the input order.

    With the m p-values sorted ascending p_(1) <= ... <= p_(m):
    adj_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)) (step-down, so the adjusted values
    keep the order of the raw ones). Rejecting where adj < alpha controls the chance of
    any false "X beats Y" among the m comparisons at alpha. nan entries (comparisons
    that could not be tested) stay nan and are not counted in m.
    """
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(p))
    m = len(ok)
    if m == 0:
        return out.tolist()
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out[order] = np.maximum.accumulate(scaled)
    return out.tolist()


def tie_groups(
    means: Mapping[str, float],
    adjusted_p: Mapping[tuple[str, str], float],
    alpha: float = 0.05,
) -> list[list[str]]:
    """Tiers of statistically tied algorithms, best first.

    Tier 1 is the algorithm with the highest mean plus every other algorithm whose
    difference to it is not significant (adjusted p >= alpha, nan, or no entry for the
    pair); those leave and the rule repeats on the rest. Within a tier the order is by
    mean. ``adjusted_p`` is keyed by pairs in either order (e.g. Holm-adjusted p of all
    pairwise tests).

    This is a greedy tiering around each tier's leader, not an equivalence relation:
    A ~ B and B ~ C does not make A ~ C, so C may sit a tier below A while tied with B.
    Equal means are broken by name so the output is deterministic.
    """

    def p_of(a: str, b: str) -> float:
        value = adjusted_p.get((a, b), adjusted_p.get((b, a), math.nan))
        return math.nan if value is None else float(value)

    rest = sorted(means, key=lambda k: (-means[k], k))
    groups = []
    while rest:
        leader = rest[0]
        tied = [a for a in rest[1:] if not p_of(leader, a) < alpha]  # nan counts as tied
        group = [leader, *tied]
        groups.append(group)
        rest = [a for a in rest if a not in group]
    return groups


def performance_profile(
    scores: Mapping[str, np.ndarray], taus: np.ndarray
) -> dict[str, np.ndarray]:
    """rliable's score distribution (Agarwal et al. 2021, sec. 4.2): for each algorithm
    and each tau, the fraction of its runs (all envs and seeds pooled) whose score is
    greater than tau, F(tau) = 1/N sum_runs [score > tau]. Scores must already be on a
    common scale (see ``normalised_scores``); non-finite scores raise ValueError rather
    than silently shrinking N."""
    t = np.asarray(taus, dtype=float).ravel()
    out = {}
    for algo, s in scores.items():
        runs = np.asarray(s, dtype=float).ravel()
        if len(runs) == 0 or not np.isfinite(runs).all():
            raise ValueError(f"{algo}: scores must be finite and non-empty")
        out[algo] = (runs[None, :] > t[:, None]).mean(axis=1)
    return out


def normalised_scores(
    per_env: Mapping[str, Mapping[str, np.ndarray]], start: Mapping[str, float]
) -> dict[str, np.ndarray]:
    """Per-run scores on a common scale, pooled over envs: on env e,
    (score - start[e]) / (best_e - start[e]), best_e the highest score of any run of any
    algorithm on e. 0 is the env's starting reward (the model before training), 1 the
    best run seen; below 0 a run got worse. Returns algorithm -> its runs over all envs
    (envs in sorted order), the input to ``performance_profile``.

    Every algorithm must have runs on every env (otherwise pooled profiles would compare
    different mixes of envs; ValueError). An env on which no run beat its start has no
    scale and is left out for every algorithm alike.
    """
    algos = None
    for env, by_algo in per_env.items():
        if algos is None:
            algos = set(by_algo)
        elif set(by_algo) != algos:
            raise ValueError(f"env {env}: algorithms {sorted(by_algo)} != {sorted(algos)}")
    out: dict[str, list[np.ndarray]] = {a: [] for a in sorted(algos or ())}
    for env in sorted(per_env):
        by_algo = {a: np.asarray(v, dtype=float).ravel() for a, v in per_env[env].items()}
        best = max(float(v.max()) for v in by_algo.values())
        span = best - start[env]
        if not span > 0:
            continue
        for a, v in by_algo.items():
            out[a].append((v - start[env]) / span)
    return {a: np.concatenate(v) if v else np.empty(0) for a, v in out.items()}

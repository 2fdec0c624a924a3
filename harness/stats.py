"""Statistics people can trust (rliable's method, Agarwal et al., NeurIPS 2021,
arXiv 2108.13264) and the compute-performance fit of Khatri et al., "The Art of Scaling
Reinforcement Learning Compute for LLMs", arXiv 2510.13786.

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
from scipy.special import expit
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


# --- the compute-performance fit ---------------------------------------------------------


def sigmoid_curve(c: np.ndarray, r0: float, a: float, b: float, c_mid: float) -> np.ndarray:
    """R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B)   (Khatri et al., eq. 1)."""
    c = np.asarray(c, dtype=float)
    return r0 + (a - r0) / (1.0 + (c_mid / c) ** b)


@dataclass
class SigmoidFit:
    a: float
    """Asymptotic reward."""
    b: float
    """Scaling exponent: how fast reward approaches A (compute efficiency)."""
    c_mid: float
    """Compute at which half of the gain A - R0 is reached."""
    r0: float
    rmse: float
    converged: bool
    """Finite and off every grid edge (kept for older callers; prefer ``identified``)."""
    note: str = ""
    """Same text as ``reason``."""
    identified: bool = False
    """Whether the data pin A down: converged, at least 3 points, and C_mid within the
    compute fitted. Report A only when True."""
    reason: str = ""
    """Why not identified ('' when identified)."""
    points_used: int = 0
    """Points left after the exclusion."""


# Default search ranges: B (the paper's values are ~1-3) and C_mid from a hundredth of the
# smallest to a hundred times the largest compute fitted. A is bounded by [R0, max(1,
# max reward)]: rewards here are pass rates in [0, 1].
B_RANGE = (0.05, 20.0)
C_MID_SPAN = 100.0


def fit_sigmoid(
    compute: np.ndarray,
    reward: np.ndarray,
    r0: float,
    exclude_below: float = 0.0,
    a_grid: np.ndarray | None = None,
    c_grid: np.ndarray | None = None,
    b_grid: np.ndarray | None = None,
) -> SigmoidFit:
    """Least-squares fit of R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B) (Khatri et al.
    eq. 1) with R0 fixed, in reward space.

    Only points with compute strictly greater than ``exclude_below`` are used (the
    paper drops the early, noisy regime; pass the first checkpoint's compute to drop
    it, or 0 to keep every point with positive compute).

    Method: for fixed (B, C_mid) the curve is linear in A - R0, so A has a closed form
    (A - R0 = sum s (r - R0) / sum s^2, s = 1 / (1 + (C_mid/C)^B)), clipped to its
    bounds. That leaves a 2-d search, done on a log grid over B x C_mid broadcast in
    numpy, then refined by a pattern search that moves a 5 x 5 box while it improves and
    halves it when it does not. The paper grid-searches A and C_mid and fits B; profiling
    A out minimises the same squared error exactly.

    Bounds: A in [min, max] of ``a_grid`` (default [R0, max(1, max reward)]), B in
    [min, max] of ``b_grid`` (default B_RANGE), C_mid in [min, max] of ``c_grid``
    (default compute.min() / 100 .. compute.max() * 100); a grid's length sets how
    finely the first stage looks.

    Not identified (with the reasons in ``reason``) when fewer than 3 points remain, A,
    B or C_mid ends on a bound, or C_mid lies beyond the largest compute fitted: the
    data then have not reached the curve's midpoint, so A is an extrapolation that other
    (A, C_mid) pairs fit as well.
    """
    c = np.asarray(compute, dtype=float).ravel()
    r = np.asarray(reward, dtype=float).ravel()
    keep = (c > 0) & (c > exclude_below) & np.isfinite(r)
    c, r = c[keep], r[keep]
    n = len(c)
    if n < 3:
        why = "fewer than 3 points"
        return SigmoidFit(math.nan, math.nan, math.nan, r0, math.nan, False, why, False, why, n)
    a_lo, a_hi = (r0, max(1.0, float(r.max()))) if a_grid is None else _span(a_grid)
    b_lo, b_hi = B_RANGE if b_grid is None else _span(b_grid)
    if c_grid is None:
        c_lo, c_hi = float(c.min()) / C_MID_SPAN, float(c.max()) * C_MID_SPAN
    else:
        c_lo, c_hi = _span(c_grid)
    nb = 40 if b_grid is None else len(b_grid)
    nc = 60 if c_grid is None else len(c_grid)
    # Search in logs: u = log B, v = log C_mid; the curve is s = expit(B (log C - v)).
    log_c, y = np.log(c), r - r0
    bounds = np.log([b_lo, b_hi, c_lo, c_hi])
    u_grid = np.linspace(bounds[0], bounds[1], max(nb, 2))
    v_grid = np.linspace(bounds[2], bounds[3], max(nc, 2))
    g_lo, g_hi = a_lo - r0, a_hi - r0

    def evaluate(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sum of squared errors and the best A - R0 on the grid u x v."""
        s = expit(np.exp(u)[:, None, None] * (log_c - v[None, :, None]))
        ss = (s * s).sum(axis=2)
        gain = np.divide((s * y).sum(axis=2), ss, out=np.zeros_like(ss), where=ss > 0)
        gain = np.clip(gain, g_lo, g_hi)
        sse = ((y - gain[..., None] * s) ** 2).sum(axis=2)
        return sse, gain

    sse, gain = evaluate(u_grid, v_grid)
    i, j = np.unravel_index(np.argmin(sse), sse.shape)
    u, v, best, g = u_grid[i], v_grid[j], sse[i, j], gain[i, j]
    du, dv = u_grid[1] - u_grid[0], v_grid[1] - v_grid[0]
    steps = np.arange(-2, 3)
    for _ in range(400):
        if du < 1e-9 and dv < 1e-9:
            break
        box_u = np.clip(u + du * steps, bounds[0], bounds[1])
        box_v = np.clip(v + dv * steps, bounds[2], bounds[3])
        sse, gain = evaluate(box_u, box_v)
        i, j = np.unravel_index(np.argmin(sse), sse.shape)
        if sse[i, j] < best * (1 - 1e-12):
            u, v, best, g = box_u[i], box_v[j], sse[i, j], gain[i, j]
        else:
            du, dv = du / 2, dv / 2
    a, b, c_mid = float(r0 + g), float(np.exp(u)), float(np.exp(v))
    why = []
    if a <= a_lo or a >= a_hi:
        flat = " (no gain over R0)" if a <= r0 else ""
        why.append(f"A on its bound [{a_lo:.3g}, {a_hi:.3g}]{flat}")
    if u <= bounds[0] or u >= bounds[1]:
        why.append(f"B on its bound [{b_lo:.3g}, {b_hi:.3g}]")
    if v <= bounds[2] or v >= bounds[3]:
        why.append(f"C_mid on its bound [{c_lo:.3g}, {c_hi:.3g}]")
    converged = not why
    if c_mid > c.max():
        why.insert(0, f"C_mid {c_mid:.3g} beyond the observed compute (max {c.max():.3g})")
    reason = "; ".join(why)
    rmse = float(np.sqrt(best / n))
    return SigmoidFit(a, b, c_mid, r0, rmse, converged, reason, not why, reason, n)


def _span(grid: np.ndarray) -> tuple[float, float]:
    g = np.asarray(grid, dtype=float)
    return float(g.min()), float(g.max())


def grid_search(
    c: np.ndarray, r: np.ndarray, r0: float, a_grid: np.ndarray, c_grid: np.ndarray
) -> tuple[float, float, float, float]:
    """(mean squared error, A, B, C_mid) of the best grid pair in the paper's
    parametrisation: grid over A and C_mid, B the least-squares slope of
    log((A - R0) / (R - R0) - 1) on log(C_mid / C) (linear in B there), error measured
    in reward space. Kept for callers of the earlier fit; ``fit_sigmoid`` profiles A out
    instead, which minimises the reward-space error exactly."""
    c, r = np.asarray(c, dtype=float), np.asarray(r, dtype=float)
    a_s = np.asarray(a_grid, dtype=float)[:, None, None]
    cm = np.asarray(c_grid, dtype=float)[None, :, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (a_s - r0) / np.clip(r - r0, 1e-9, None) - 1  # (C_mid / C)^B where usable
        usable = (r > r0) & (ratio > 0)  # shape (A, 1, n)
        ylog = np.where(usable, np.log(np.where(usable, ratio, 1.0)), 0.0)
        x = np.where(usable, np.log(cm / c), 0.0)  # (A, C_mid, n)
        denom = (x * x).sum(axis=2)
        b = np.where(denom > 0, (x * ylog).sum(axis=2) / np.where(denom > 0, denom, 1), 0.0)
        ok = (usable.sum(axis=2) >= 2) & (denom > 0) & (b > 0)
        curve = r0 + (a_s - r0) / (1.0 + (cm / c) ** b[..., None])
        err = np.where(ok, ((curve - r) ** 2).mean(axis=2), np.inf)
    if not np.isfinite(err).any():
        return (np.inf, np.nan, np.nan, np.nan)
    i, j = np.unravel_index(np.argmin(err), err.shape)
    return float(err[i, j]), float(a_grid[i]), float(b[i, j]), float(c_grid[j])


@dataclass(frozen=True)
class FitSummary:
    """A pooled sigmoid fit over seeds with seed-bootstrap intervals
    (see ``bootstrap_fit``)."""

    fit: SigmoidFit
    """The fit of all seeds' points pooled."""
    a_low: float
    """Percentile bounds of A; nan, like ``a``, when A is withheld."""
    a_high: float
    b_low: float
    b_high: float
    c_mid_low: float
    c_mid_high: float
    identified_share: float
    """Share of bootstrap resamples whose fit was identified."""
    fits_ok: int
    """Resamples whose fit gave finite parameters (the intervals are over these)."""
    reps: int
    reason: str
    """Why A is withheld; '' when it is reported."""

    @property
    def a(self) -> float:
        """A when reported (the point fit is identified), else nan."""
        return self.fit.a if not self.reason else math.nan


def _pool(curves: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    c = np.concatenate([np.asarray(cc, dtype=float).ravel() for cc, _ in curves])
    r = np.concatenate([np.asarray(rr, dtype=float).ravel() for _, rr in curves])
    return c, r


def bootstrap_fit(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    r0: float,
    exclude_below: float = 0.0,
    reps: int = 200,
    seed: int = 0,
    confidence: float = 0.95,
) -> FitSummary:
    """Fit the sigmoid to all seeds' points pooled and bootstrap it over seeds.

    ``curves`` holds one (compute, reward) pair of arrays per seed. Each of ``reps``
    resamples draws the seeds with replacement, pools their points and refits; the
    intervals of A, B and C_mid are the percentile bounds over the resamples whose fit
    gave finite parameters (identified or not, so a parameter that wanders to its bound
    widens the interval rather than disappearing from it). Seeds, not points, are
    resampled because points of one seed share its noise.

    A (and its interval) is reported only when the pooled point fit is identified (see
    ``fit_sigmoid``); otherwise ``reason`` says why and ``a`` / ``a_low`` / ``a_high``
    are nan. With few seeds the percentile interval is narrow-biased, so read
    ``identified_share`` beside it: a share well below 1 means resamples of the same
    seeds often fail to pin A down.
    """
    if not curves:
        raise ValueError("need at least one seed's curve")
    point = fit_sigmoid(*_pool(curves), r0, exclude_below)
    rng = np.random.default_rng(seed)
    params, identified = [], 0
    for _ in range(reps):
        pick = rng.integers(0, len(curves), len(curves))
        f = fit_sigmoid(*_pool([curves[k] for k in pick]), r0, exclude_below)
        if np.isfinite([f.a, f.b, f.c_mid]).all():
            params.append((f.a, f.b, f.c_mid))
        identified += f.identified
    tail = (1 - confidence) / 2 * 100
    if params:
        (a_lo, b_lo, c_lo), (a_hi, b_hi, c_hi) = np.percentile(
            np.asarray(params), [tail, 100 - tail], axis=0
        )
    else:
        a_lo = b_lo = c_lo = a_hi = b_hi = c_hi = math.nan
    reason = "" if point.identified else f"A withheld: {point.reason}"
    if reason:
        a_lo = a_hi = math.nan
    return FitSummary(
        fit=point,
        a_low=float(a_lo),
        a_high=float(a_hi),
        b_low=float(b_lo),
        b_high=float(b_hi),
        c_mid_low=float(c_lo),
        c_mid_high=float(c_hi),
        identified_share=identified / reps if reps else math.nan,
        fits_ok=len(params),
        reps=reps,
        reason=reason,
    )


def extrapolation_check(
    curves: Sequence[tuple[np.ndarray, np.ndarray]],
    r0: float,
    split_fraction: float = 0.5,
    exclude_below: float = 0.0,
) -> dict:
    """ScaleRL's extrapolation check (Khatri et al. 2025): fit on the early part of the
    budget and see whether the fit predicts the end.

    The fit uses the pooled points with compute <= split_fraction * (largest compute of
    any seed) (and > ``exclude_below``). ``predicted`` is the mean over seeds of the
    fit's reward at each seed's last compute, ``observed`` the mean over seeds of the
    reward at that last point, ``error`` = predicted - observed. Also returned:
    ``identified`` and ``reason`` of the early fit, ``fit`` itself, ``compute`` (the mean
    last compute) and ``points_used``. A large error from an identified early fit means
    the curve is not predictable; an unidentified early fit predicts little either way.
    """
    if not curves:
        raise ValueError("need at least one seed's curve")
    c, r = _pool(curves)
    cut = split_fraction * float(c.max())
    early = c <= cut
    fit = fit_sigmoid(c[early], r[early], r0, exclude_below)
    last_c, last_r = [], []
    for cc, rr in curves:
        cc, rr = np.asarray(cc, dtype=float).ravel(), np.asarray(rr, dtype=float).ravel()
        k = int(np.argmax(cc))
        last_c.append(cc[k])
        last_r.append(rr[k])
    if np.isfinite(fit.a):
        predicted = float(np.mean(sigmoid_curve(np.asarray(last_c), r0, fit.a, fit.b, fit.c_mid)))
    else:
        predicted = math.nan
    observed = float(np.mean(last_r))
    return {
        "predicted": predicted,
        "observed": observed,
        "error": predicted - observed,
        "identified": fit.identified,
        "reason": fit.reason,
        "fit": fit,
        "compute": float(np.mean(last_c)),
        "points_used": fit.points_used,
    }

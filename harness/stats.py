"""Statistics people can trust (rliable's method, Agarwal et al., NeurIPS 2021,
arXiv 2108.13264) and the compute-performance fit of Khatri et al., "The Art of Scaling
Reinforcement Learning Compute for LLMs", arXiv 2510.13786.

rliable itself is not used: its only release here is an sdist that pulls in `arch` and
seaborn; the two estimators it would provide are a few lines of numpy/scipy below.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import trim_mean


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
    note: str = ""


def fit_sigmoid(
    compute: np.ndarray,
    reward: np.ndarray,
    r0: float,
    exclude_below: float = 0.0,
    a_grid: np.ndarray | None = None,
    c_grid: np.ndarray | None = None,
) -> SigmoidFit:
    """The paper's procedure: grid over A and C_mid; for each pair B is the least-squares
    slope of log((A - R0) / (R - R0) - 1) on log(C_mid / C) (the curve is linear in B
    there); keep the pair with the smallest squared error in reward space. Points with
    compute below ``exclude_below`` are excluded (early, noisy ones). The fit is flagged
    not converged when it sits on the edge of the grid, B <= 0, or fewer than 3 points
    remain."""
    c = np.asarray(compute, dtype=float)
    r = np.asarray(reward, dtype=float)
    keep = (c > 0) & (c >= exclude_below)
    c, r = c[keep], r[keep]
    if len(c) < 3:
        return SigmoidFit(np.nan, np.nan, np.nan, r0, np.nan, False, "fewer than 3 points")
    top = max(1.0, float(r.max()))
    a_grid = np.linspace(max(r.max(), r0) + 1e-3, top + 1e-3, 60) if a_grid is None else a_grid
    if c_grid is None:
        c_grid = np.geomspace(c.min() / 10, c.max() * 100, 80)
    best = grid_search(c, r, r0, a_grid, c_grid)
    # Then a pattern search from the best grid pair: A and C_mid trade off along a valley,
    # so move the box while it improves and shrink it when it does not.
    da, dc = a_grid[1] - a_grid[0], c_grid[1] / c_grid[0]
    for _ in range(60):
        if not np.isfinite(best[0]) or da < 1e-6:
            break
        box_a = np.clip(best[1] + da * np.arange(-2, 3), a_grid[0], a_grid[-1])
        box_c = np.clip(best[3] * dc ** np.arange(-2, 3), c_grid[0], c_grid[-1])
        moved = grid_search(c, r, r0, box_a, box_c)
        if moved[0] < best[0]:
            best = moved
        else:
            da, dc = da / 4, dc**0.25
    err, a, b, c_mid = best
    if not np.isfinite(err):
        return SigmoidFit(np.nan, np.nan, np.nan, r0, np.nan, False, "no improving points")
    edge = []
    if a == a_grid[0] or a == a_grid[-1]:
        edge.append("A at grid edge")
    if c_mid == c_grid[0] or c_mid == c_grid[-1]:
        edge.append("C_mid at grid edge")
    return SigmoidFit(a, b, c_mid, r0, float(np.sqrt(err)), not edge, "; ".join(edge))


def grid_search(
    c: np.ndarray, r: np.ndarray, r0: float, a_grid: np.ndarray, c_grid: np.ndarray
) -> tuple[float, float, float, float]:
    """(mean squared error, A, B, C_mid) of the best grid pair, B by least squares."""
    best = (np.inf, np.nan, np.nan, np.nan)
    for a in a_grid:
        gain = (a - r0) / np.clip(r - r0, 1e-9, None) - 1  # = (C_mid / C)^B where r > r0
        usable = (r > r0) & (gain > 0)
        if usable.sum() < 2:
            continue
        y = np.log(gain[usable])
        for c_mid in c_grid:
            x = np.log(c_mid / c[usable])
            denom = float(x @ x)
            if denom == 0:
                continue
            b = float(x @ y) / denom
            if b <= 0:
                continue
            err = float(np.mean((sigmoid_curve(c, r0, a, b, c_mid) - r) ** 2))
            if err < best[0]:
                best = (err, float(a), b, float(c_mid))
    return best

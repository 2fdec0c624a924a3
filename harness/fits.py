"""The compute-performance fit of Khatri et al., "The Art of Scaling Reinforcement Learning
Compute for LLMs", arXiv 2510.13786: R(C) = R0 + (A - R0) / (1 + (C_mid / C)^B), fitted
by least squares in reward, with bootstrap intervals over seeds; the asymptote A is only
reported when the data identify it: the pooled fit has C_mid inside the observed compute
and no parameter on its bound, at least ``MIN_IDENTIFIED_SHARE`` of the bootstrap refits
are identified too, and A's interval stays off the bounds of A's search range
(``bootstrap_fit``). ScaleRL's half-budget extrapolation check is ``extrapolation_check``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import expit


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
    a_range: tuple[float, float] = (math.nan, math.nan)
    """The bounds A was searched in, (R0, max(1, max reward)) by default."""


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
    return SigmoidFit(a, b, c_mid, r0, rmse, converged, reason, not why, reason, n, (a_lo, a_hi))


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
    """Share of bootstrap resamples whose fit was identified (nan without resamples)."""
    fits_ok: int
    """Resamples whose fit gave finite parameters (the intervals are over these)."""
    reps: int
    reason: str
    """Why A is withheld; '' when it is reported."""

    @property
    def a(self) -> float:
        """A when reported (``reason`` empty, see ``bootstrap_fit``), else nan."""
        return self.fit.a if not self.reason else math.nan


MIN_IDENTIFIED_SHARE = 0.95
"""Least share of bootstrap refits that must be identified for A to be reported. Below it,
refits on resampled seeds often put A on its bound or C_mid past the data, so the
percentile interval of A mixes a few pinned-down fits with arbitrary ones (the committed
arithmetic board once showed A 0.472 [0.396, 1.000] at 76%): the same seeds do not
reliably pin A down, whatever the pooled fit says. 95% matches the interval's level."""


def share_shortfall(
    share: float, reps: int | None = None, min_share: float = MIN_IDENTIFIED_SHARE
) -> str:
    """Why A is withheld on account of the bootstrap's identified share ('' when
    ``share >= min_share``); ``reps`` (the number of refits) is named when known. No
    refits (nan share) count as a shortfall: nothing checked A."""
    if share >= min_share:
        return ""
    if share != share:
        return "no bootstrap fits"
    # Rounded down, so that a share just short of the threshold never reads as reaching it.
    percent = f"{math.floor(share * 100 + 1e-9)}%"
    need = f"at least {min_share:.0%} needed"
    if reps is None:
        return f"only {percent} of bootstrap fits identified ({need})"
    return f"only {round(share * reps)} of {reps} bootstrap fits identified ({percent}, {need})"


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
    min_share: float = MIN_IDENTIFIED_SHARE,
) -> FitSummary:
    """Fit the sigmoid to all seeds' points pooled and bootstrap it over seeds.

    ``curves`` holds one (compute, reward) pair of arrays per seed. Each of ``reps``
    resamples draws the seeds with replacement, pools their points and refits; the
    intervals of A, B and C_mid are the percentile bounds over the resamples whose fit
    gave finite parameters (identified or not, so a parameter that wanders to its bound
    widens the interval rather than disappearing from it). Seeds, not points, are
    resampled because points of one seed share its noise.

    A (and its interval) is reported only when all of these hold, else ``reason`` lists
    each that fails and ``a`` / ``a_low`` / ``a_high`` are nan:

    - the pooled point fit is identified (see ``fit_sigmoid``);
    - at least ``min_share`` (default MIN_IDENTIFIED_SHARE) of the ``reps`` refits are
      identified;
    - A's interval lies strictly inside A's search range (the pooled fit's
      ``a_range``, within 1e-6 of its width): an end on a bound means more than the
      interval's tail of refits had A pinned there, so the bound, not the data, sets it.

    B and C_mid keep their intervals either way. With few seeds a percentile interval is
    narrow-biased, so ``identified_share`` is reported beside it.
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
    share = identified / reps if reps else math.nan
    why = [] if point.identified else [point.reason]
    if shortfall := share_shortfall(share, reps, min_share):
        why.append(shortfall)
    lo, hi = point.a_range
    tol = 1e-6 * (hi - lo)  # the fit clips A exactly to a bound; allow for rounding
    touched = []  # stays empty when A's range or interval is nan (comparisons are False)
    if a_lo <= lo + tol:
        touched.append(f"lower bound {lo:.3g}")
    if a_hi >= hi - tol:
        touched.append(f"upper bound {hi:.3g}")
    if touched:
        why.append(f"A's interval reaches the {' and '.join(touched)} of A's range")
    reason = f"A withheld: {'; '.join(why)}" if why else ""
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
        identified_share=share,
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

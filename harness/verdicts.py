"""A board's verdicts: every algorithm against one baseline, decided at the level its
family of comparisons uses, with equivalence as a result.

The design (docs/statistics.md, "Verdicts"):

- **Many-to-one.** The board names a baseline (``compare --baseline``, default the first
  algorithm); each of the other k - 1 algorithms is compared with it, paired by seed (runs
  with the same seed share the prompt stream and the evaluation samples), by the paired
  differences d_s = headline(algorithm, s) - headline(baseline, s).
- **Four verdicts.** For each comparison two null hypotheses are tested: "no difference"
  (two-sided paired t-test) and "a difference of at least delta" (two one-sided tests,
  TOST; Schuirmann 1987). Rejecting the first gives **better** or **worse**; rejecting the
  second gives **equivalent within +/-delta**; neither gives **unresolved**. When both are
  rejected (a real difference smaller than delta) the verdict is "equivalent", and the
  table says the difference was also detected.
- **One level for the family.** The 2(k - 1) hypotheses are adjusted together by Holm's
  step-down with Shaffer's logical restriction (Shaffer 1986, method S1): the two nulls of
  one comparison cannot both be true (mu = 0 and |mu| >= delta exclude each other), so at
  most k - 1 of them are true at once, and the divisor at each step is the number of
  comparisons that still have a hypothesis left, not the number of hypotheses. The family-
  wise error rate over every verdict of the board is at most ``alpha``, under any
  dependence between the comparisons. The first step's level, alpha / (k - 1), is the
  strictest a comparison meets; resolution and power are stated there.
- **Power, stated where the decision is made.** Per comparison: the minimum detectable
  difference at 80% power (``family_mdd``), the power to detect a difference of delta, and
  the power to show equivalence when the true difference is 0 (``equivalence_power``),
  all at alpha / (k - 1) with the comparison's own paired spread.
- **Seeds from a power plan** (``power_plan``): from a pilot of a few seeds per row, the
  number the family needs to detect or exclude delta at 80% power.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import stats as sps

from harness.stats import min_detectable_difference

DEFAULT_DELTA = 0.02
"""The equivalence margin and the resolution a board aims for, in the headline's units
(held-out reward, 0-1): two points of accuracy."""
ALPHA = 0.05
"""The family-wise error rate of a board's verdicts."""
POWER = 0.8
VERDICTS = ("better", "worse", "equivalent", "unresolved")
QUANTILES = 2048
"""Equal-probability bins of the chi-square variable ``equivalence_power`` averages over."""


def paired_t(d: np.ndarray) -> tuple[float, float, int]:
    """(mean, standard error, degrees of freedom) of paired differences: se = s / sqrt(n),
    s with ddof 1, dof n - 1. Fewer than 2 pairs: se nan."""
    d = np.asarray(d, dtype=float).ravel()
    n = len(d)
    if n < 2:
        return (float(d.mean()) if n else math.nan), math.nan, n - 1
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(n)), n - 1


def difference_p(d: np.ndarray) -> float:
    """Two-sided p of the paired t-test of "no difference" (mean of d = 0). No spread: 1 if
    every difference is 0, else 0; fewer than 2 pairs: nan."""
    mean, se, dof = paired_t(d)
    if math.isnan(se):
        return math.nan
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return float(2 * sps.t.sf(abs(mean) / se, dof))


def equivalence_p(d: np.ndarray, delta: float) -> float:
    """p of the two one-sided tests of "|mean of d| >= delta" (TOST): the larger of the
    p of H0: mu <= -delta against mu > -delta, t = (mean + delta) / se, and of H0: mu >=
    delta against mu < delta, t = (mean - delta) / se. Rejecting at level a is the same as
    the (1 - 2a) t-interval of the mean lying inside (-delta, +delta)."""
    if not delta > 0:
        raise ValueError(f"the equivalence margin must be > 0, got {delta}")
    mean, se, dof = paired_t(d)
    if math.isnan(se):
        return math.nan
    if se == 0:
        return 0.0 if abs(mean) < delta else 1.0
    p_low = sps.t.sf((mean + delta) / se, dof)
    p_high = sps.t.cdf((mean - delta) / se, dof)
    return float(max(p_low, p_high))


def shaffer_holm(
    p_difference: Sequence[float], p_equivalence: Sequence[float]
) -> tuple[list[float], list[float]]:
    """Adjusted p-values of the 2m hypotheses of m comparisons, each with a "no difference"
    and an "at least delta apart" null (Holm's step-down with Shaffer's restriction, see the
    module docstring). With the hypotheses sorted by p ascending, step j's multiplier t_j
    is the number of comparisons that still have one of their hypotheses among steps
    j..2m; adj_(j) = max over i <= j of min(1, t_i p_(i)). Reject where adj < alpha. nan
    p-values (untestable) stay nan and take no part."""
    if len(p_difference) != len(p_equivalence):
        raise ValueError("one p of each kind per comparison")
    hypotheses = [
        (float(p), i, kind)
        for kind, ps in ((0, p_difference), (1, p_equivalence))
        for i, p in enumerate(ps)
        if p == p
    ]
    hypotheses.sort(key=lambda h: (h[0], h[2], h[1]))
    left = {i: 0 for _, i, _ in hypotheses}
    for _, i, _ in hypotheses:
        left[i] += 1
    adjusted = [[math.nan] * len(p_difference), [math.nan] * len(p_equivalence)]
    running = 0.0
    for p, i, kind in hypotheses:
        standing = sum(1 for c in left.values() if c > 0)
        running = max(running, min(1.0, standing * p))
        adjusted[kind][i] = running
        left[i] -= 1
    return adjusted[0], adjusted[1]


def power_to_detect(effect: float, sd: float, n: int, alpha: float) -> float:
    """Probability that a two-sided paired t-test at level ``alpha`` on ``n`` pairs
    rejects "no difference" when the true difference is ``effect`` and the differences'
    standard deviation ``sd``: P(|T| > t_crit) under a noncentral t with noncentrality
    effect * sqrt(n) / sd and n - 1 degrees of freedom (exact, no normal approximation)."""
    if n < 2 or math.isnan(sd):
        return math.nan
    if sd == 0:
        return 1.0 if effect != 0 else alpha
    dof, ncp = n - 1, abs(effect) * math.sqrt(n) / sd
    crit = sps.t.ppf(1 - alpha / 2, dof)
    # the far tail written as an upper tail (scipy's nct.cdf gives nan out there)
    far = np.nan_to_num(sps.nct.sf(crit, dof, -ncp), nan=0.0)
    return float(sps.nct.sf(crit, dof, ncp) + far)


def equivalence_power(
    sd: float, n: int, delta: float, alpha: float, true_difference: float = 0.0
) -> float:
    """Probability that the TOST at level ``alpha`` on ``n`` pairs shows equivalence within
    +/-``delta`` when the true difference is ``true_difference``.

    TOST rejects iff -delta + c s / sqrt(n) < mean < delta - c s / sqrt(n), c =
    t_{1-alpha, n-1}, s the sample standard deviation. Given s the mean is normal, so the
    probability is an expectation over s^2 = sd^2 W / (n - 1), W ~ chi-square(n - 1):
    E_W[Phi((h - mu) / se0) - Phi((-h - mu) / se0)], h = delta - c s / sqrt(n) (0 where
    negative), se0 = sd / sqrt(n); taken at the midpoints of QUANTILES equal-probability
    bins of W (error below 1e-3)."""
    if n < 2 or math.isnan(sd):
        return math.nan
    if sd == 0:
        return 1.0 if abs(true_difference) < delta else 0.0
    dof = n - 1
    c = sps.t.ppf(1 - alpha, dof)
    se0 = sd / math.sqrt(n)
    w = sps.chi2.ppf((np.arange(QUANTILES) + 0.5) / QUANTILES, dof)
    h = np.maximum(0.0, delta - c * sd * np.sqrt(w / dof) / math.sqrt(n))
    inside = sps.norm.cdf((h - true_difference) / se0) - sps.norm.cdf((-h - true_difference) / se0)
    return float(np.clip(inside.mean(), 0.0, 1.0))


def comparisons(family: int) -> int:
    """The Shaffer-Holm divisor at the first step: the number of comparisons (k - 1)."""
    return max(1, family)


def family_mdd(sd: float, n: int, family: int, alpha: float = ALPHA, power: float = POWER) -> float:
    """The smallest true difference the paired test detects with ``power`` at the family's
    strictest level alpha / (k - 1) (``family`` = k - 1 comparisons)."""
    return min_detectable_difference(
        sd, n, alpha=alpha / comparisons(family), power=power, paired=True
    )


@dataclass(frozen=True)
class Verdict:
    """One algorithm against the baseline."""

    algorithm: str
    baseline: str
    seeds: int
    """Pairs (seeds both rows finished)."""
    difference: float
    """Mean of algorithm - baseline over the paired seeds."""
    ci_low: float
    """95% paired t-interval of the difference (descriptive; the decision uses the tests)."""
    ci_high: float
    sd_difference: float
    p_difference: float
    """Two-sided paired t-test of "no difference", unadjusted."""
    p_equivalence: float
    """TOST of "at least delta apart", unadjusted."""
    p_difference_adjusted: float
    p_equivalence_adjusted: float
    verdict: str
    """better, worse, equivalent (within +/-delta) or unresolved."""
    also_detected: bool
    """Equivalent, and a (smaller than delta) difference is detected too."""
    delta: float
    level: float
    """alpha / (k - 1): the strictest level of the family, where power is stated."""
    mdd: float
    """Minimum detectable difference at 80% power at ``level``."""
    power_at_delta: float
    """Power to detect a true difference of delta at ``level``."""
    equivalence_power: float
    """Power to show equivalence within +/-delta at ``level`` when the true difference is 0."""


def decide(diff_adj: float, equiv_adj: float, difference: float, alpha: float) -> tuple[str, bool]:
    """The verdict of one comparison from its adjusted p-values."""
    separated = diff_adj < alpha
    if equiv_adj < alpha:
        return "equivalent", bool(separated)
    if separated:
        return ("better" if difference > 0 else "worse"), False
    return "unresolved", False


def paired_differences(
    scores: pd.DataFrame, algorithm: str, baseline: str, column: str = "headline"
) -> pd.Series:
    """algorithm - baseline per seed over the seeds both have (``scores``: one row per run
    with algorithm, seed and ``column``)."""
    a = scores[scores.algorithm == algorithm].set_index("seed")[column]
    b = scores[scores.algorithm == baseline].set_index("seed")[column]
    common = a.index.intersection(b.index).sort_values()
    return (a.loc[common] - b.loc[common]).astype(float)


def many_to_one(
    scores: pd.DataFrame,
    baseline: str,
    delta: float = DEFAULT_DELTA,
    alpha: float = ALPHA,
    family: Sequence[str] | None = None,
    outside: Sequence[str] = (),
) -> list[Verdict]:
    """The verdicts of one env's board. ``scores``: one row per run (algorithm, seed,
    headline). ``family``: the algorithms whose verdicts form the family (default: every
    row but the baseline and ``outside``). ``outside``: rows judged by the same rule at the
    family's level but not counted in it (the controls: they test the test, they are not
    findings). Raises ValueError when the baseline has no runs."""
    if baseline not in set(scores.algorithm):
        rows = sorted(set(scores.algorithm))
        raise ValueError(f"the baseline {baseline!r} has no finished runs (rows: {rows})")
    names = (
        sorted(set(scores.algorithm) - {baseline} - set(outside))
        if family is None
        else list(family)
    )
    m = comparisons(len(names))
    level = alpha / m

    def measured(name: str) -> dict:
        d = paired_differences(scores, name, baseline).to_numpy()
        mean, se, dof = paired_t(d)
        half = float(sps.t.ppf(0.975, dof) * se) if dof >= 1 and se == se else math.nan
        sd = float(np.std(d, ddof=1)) if len(d) > 1 else math.nan
        return {
            "n": len(d),
            "mean": mean,
            "low": mean - half,
            "high": mean + half,
            "sd": sd,
            "p_diff": difference_p(d),
            "p_equiv": equivalence_p(d, delta),
        }

    inside = {name: measured(name) for name in names}
    adj_diff, adj_equiv = shaffer_holm(
        [inside[n]["p_diff"] for n in names], [inside[n]["p_equiv"] for n in names]
    )
    adjusted = {n: (adj_diff[i], adj_equiv[i]) for i, n in enumerate(names)}
    # rows outside the family meet its strictest step, alpha / (k - 1), unadjusted further
    for name in outside:
        if name in set(scores.algorithm):
            row = inside.setdefault(name, measured(name))
            adjusted[name] = (min(1.0, row["p_diff"] * m), min(1.0, row["p_equiv"] * m))
    out = []
    for name, row in inside.items():
        diff_adj, equiv_adj = adjusted[name]
        verdict, also = decide(diff_adj, equiv_adj, row["mean"], alpha)
        if not (diff_adj == diff_adj or equiv_adj == equiv_adj):
            verdict = "unresolved"
        out.append(
            Verdict(
                algorithm=name,
                baseline=baseline,
                seeds=row["n"],
                difference=row["mean"],
                ci_low=row["low"],
                ci_high=row["high"],
                sd_difference=row["sd"],
                p_difference=row["p_diff"],
                p_equivalence=row["p_equiv"],
                p_difference_adjusted=diff_adj,
                p_equivalence_adjusted=equiv_adj,
                verdict=verdict,
                also_detected=also,
                delta=delta,
                level=level,
                mdd=family_mdd(row["sd"], row["n"], m, alpha),
                power_at_delta=power_to_detect(delta, row["sd"], row["n"], level),
                equivalence_power=equivalence_power(row["sd"], row["n"], delta, level),
            )
        )
    return out


def verdict_frame(verdicts: Sequence[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([asdict(v) for v in verdicts])


def verdict_text(v: Verdict | pd.Series) -> str:
    """The verdict as the report writes it: "equivalent within +/-0.02", "better", ..."""
    if v.verdict == "equivalent":
        return f"equivalent within ±{v.delta:g}" + (
            " (a smaller difference detected)" if v.also_detected else ""
        )
    return str(v.verdict)


def headline_sentence(verdicts: Sequence[Verdict], baseline: str) -> str:
    """The board's first line: how many rows got each verdict against the baseline."""
    if not verdicts:
        return f"No algorithm was compared with {baseline}."
    delta = verdicts[0].delta
    counts = {k: [v.algorithm for v in verdicts if v.verdict == k] for k in VERDICTS}
    words = {
        "equivalent": f"equivalent to {baseline} within ±{delta:g}",
        "better": f"better than {baseline}",
        "worse": f"worse than {baseline}",
        "unresolved": "unresolved (neither separated nor shown equivalent)",
    }
    parts = [
        f"{len(names)} {words[k]} ({', '.join(names)})" for k, names in counts.items() if names
    ]
    most = max(counts, key=lambda k: len(counts[k]))
    lead = ""
    if most == "equivalent" and len(counts["equivalent"]) > len(verdicts) / 2:
        lead = f"Most rows are equivalent to {baseline} within ±{delta:g}: "
    rows = f"{len(verdicts)} algorithm{'s' if len(verdicts) != 1 else ''}"
    return lead + f"of {rows} against {baseline}, " + "; ".join(parts) + "."


# -- the power plan ------------------------------------------------------------------


def seeds_to_resolve(
    sd: float, delta: float, family: int, alpha: float = ALPHA, power: float = POWER, cap: int = 200
) -> int | None:
    """The fewest paired seeds with which a comparison whose differences spread by ``sd``
    would both detect a true difference of ``delta`` and show equivalence within
    +/-``delta`` when there is none, each with probability ``power``, at the family's
    strictest level alpha / (k - 1). None when ``cap`` seeds do not suffice."""
    if math.isnan(sd):
        return None
    level = alpha / comparisons(family)
    for n in range(3, cap + 1):
        if (
            power_to_detect(delta, sd, n, level) >= power
            and equivalence_power(sd, n, delta, level) >= power
        ):
            return n
    return None


def planning_sd(
    sds: Sequence[float], pairs: int, confidence: float = 0.8
) -> tuple[float, float, int]:
    """(pooled sd, its upper confidence bound, degrees of freedom) of the pilot's paired
    spreads: sd_pooled = sqrt(mean of the variances), with (pairs - 1) dof per comparison;
    the bound sd_pooled * sqrt(dof / chi2_{1-confidence}(dof)) guards the plan against a
    pilot that happened to be quiet (Browne 1995's conservative sample-size rule)."""
    variances = [s * s for s in sds if s == s]
    if not variances or pairs < 2:
        return math.nan, math.nan, 0
    dof = len(variances) * (pairs - 1)
    pooled = math.sqrt(sum(variances) / len(variances))
    upper = pooled * math.sqrt(dof / sps.chi2.ppf(1 - confidence, dof))
    return pooled, upper, dof


def power_plan(
    scores: pd.DataFrame,
    baseline: str,
    delta: float,
    alpha: float = ALPHA,
    power: float = POWER,
    minimum: int = 0,
    cap: int = 60,
    outside: Sequence[str] = (),
) -> dict:
    """How many seeds per row the board needs, from a pilot's runs (``scores``, one row per
    run): every comparison's paired spread, their pooled value and its 80% upper bound,
    the seeds that bound needs to detect or exclude ``delta`` at ``power`` at the family's
    level (``seeds_to_resolve``), raised to ``minimum`` and cut at ``cap``. The rows in
    ``outside`` (controls) are not in the family but are planned with it."""
    names = sorted(set(scores.algorithm) - {baseline} - set(outside))
    family = comparisons(len(names))
    per_row = {}
    for name in sorted(set(scores.algorithm) - {baseline}):
        d = paired_differences(scores, name, baseline)
        per_row[name] = {
            "pairs": len(d),
            "sd": float(d.std(ddof=1)) if len(d) > 1 else math.nan,
            "seeds_needed": seeds_to_resolve(
                float(d.std(ddof=1)) if len(d) > 1 else math.nan, delta, family, alpha, power, cap
            ),
        }
    pilot = min((r["pairs"] for r in per_row.values()), default=0)
    pooled, upper, dof = planning_sd([per_row[n]["sd"] for n in names], pilot)
    needed = seeds_to_resolve(upper, delta, family, alpha, power, cap)
    seeds = cap if needed is None else max(minimum, needed, pilot)
    return {
        "delta": delta,
        "alpha": alpha,
        "power": power,
        "family": family,
        "level": alpha / family,
        "pilot_seeds": pilot,
        "sd_pooled": pooled,
        "sd_planned": upper,
        "sd_dof": dof,
        "seeds_needed": needed,
        "minimum": minimum,
        "cap": cap,
        "seeds": min(seeds, cap),
        "capped": needed is None or needed > cap,
        "per_row": per_row,
    }


def plan_text(plan: dict) -> str:
    """The report's sentence on how the seeds were chosen."""
    needed = plan["seeds_needed"]
    why = (
        f"{needed} seeds resolve delta = {plan['delta']:g} (detect it, or show equivalence "
        f"within ±{plan['delta']:g} when the difference is 0) with {plan['power']:.0%} power at "
        f"{plan['alpha']:g}/{plan['family']} = {plan['level']:.4f}"
        if needed is not None
        else f"not even {plan['cap']} seeds resolve delta = {plan['delta']:g} at that spread"
    )
    return (
        f"Seeds from a power plan: a pilot of {plan['pilot_seeds']} seeds per row gave a paired "
        f"spread (sd of the differences to the baseline) of {plan['sd_pooled']:.4f} pooled over "
        f"the {plan['family']} comparisons, {plan['sd_planned']:.4f} at its 80% upper bound; "
        f"{why}; the board ran {plan['seeds']} (minimum {plan['minimum']}, cap {plan['cap']})."
    )

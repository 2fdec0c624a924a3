"""harness/robustness.py on small synthetic boards whose answer is known by construction
or worked by hand (never numbers produced by the code under test)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from harness.robustness import (
    decision_rule_false_positives,
    half_budget_stability,
    rank_intervals,
    step_matched_scores,
    still_rising,
)
from harness.stats import probability_of_improvement


def scores_frame(headlines: dict[str, dict[int, float]], env: str = "e") -> pd.DataFrame:
    """run_scores-like rows from algorithm -> {seed: headline}."""
    rows = [
        {"env": env, "algorithm": a, "seed": s, "headline": h}
        for a, by_seed in headlines.items()
        for s, h in by_seed.items()
    ]
    return pd.DataFrame(rows)


def points_frame(curves: dict[tuple[str, int], list[float]], env: str = "e") -> pd.DataFrame:
    """points-like rows from (algorithm, seed) -> rewards at k = 0, 1, ...; K is the
    longest curve's last k, a shorter curve is a run that stopped early."""
    last = max(len(r) for r in curves.values()) - 1
    rows = [
        {
            "env": env,
            "algorithm": algo,
            "seed": seed,
            "point": k,
            "budget_fraction": k / last,
            "flops": 1e9 * k,
            "seconds": float(k),
            "reward": r,
        }
        for (algo, seed), rewards in curves.items()
        for k, r in enumerate(rewards)
    ]
    return pd.DataFrame(rows)


def by_algo(frame: pd.DataFrame) -> dict[str, dict]:
    return {r["algorithm"]: r for r in frame.to_dict("records")}


def interval_of(row: dict) -> tuple[float, float]:
    return row["rank_low"], row["rank_high"]


# rank_intervals


def test_rank_intervals_separated_rows_are_pinned_and_close_ones_overlap():
    rng = np.random.default_rng(0)
    seeds = range(10)
    means = [("a", 0.8), ("b", 0.5), ("c", 0.2)]
    clear = scores_frame(
        {a: {s: m + rng.normal(0, 0.01) for s in seeds} for a, m in means}, env="clear"
    )
    # y is x plus +0.011 or -0.009 by seed: 0.001 ahead on average, behind on half the
    # seeds, so resampled seeds put either first
    x = {s: 0.5 + rng.normal(0, 0.05) for s in seeds}
    y = {s: v + (0.011 if s % 2 else -0.009) for s, v in x.items()}
    close = scores_frame({"x": x, "y": y}, env="close")
    out = rank_intervals(pd.concat([clear, close]))
    names = ["env", "algorithm", "mean", "rank", "rank_low", "rank_high", "paired_bootstrap"]
    assert list(out.columns[:7]) == names
    got = {(r["env"], r["algorithm"]): r for r in out.to_dict("records")}
    assert [got["clear", a]["rank"] for a in "abc"] == [1, 2, 3]
    assert [interval_of(got["clear", a]) for a in "abc"] == [(1, 1), (2, 2), (3, 3)]
    assert (got["close", "y"]["rank"], got["close", "x"]["rank"]) == (1, 2)
    assert interval_of(got["close", "x"]) == (1, 2) and interval_of(got["close", "y"]) == (1, 2)
    assert out["paired_bootstrap"].all() and (out["seeds"] == 10).all()


def test_rank_intervals_resample_seeds_jointly():
    # A large seed effect shared by both algorithms (the shared prompt stream) and a
    # small constant edge for "a": paired, "a" wins on every seed, so in every replicate.
    rng = np.random.default_rng(1)
    luck = rng.normal(0, 0.2, 12)
    a = {s: 0.5 + luck[s] + 0.02 for s in range(12)}
    b = {s: 0.5 + luck[s] + rng.normal(0, 0.002) for s in range(12)}
    paired = by_algo(rank_intervals(scores_frame({"a": a, "b": b})))
    assert interval_of(paired["a"]) == (1, 1) and interval_of(paired["b"]) == (2, 2)
    assert paired["a"]["paired_bootstrap"] and paired["b"]["paired_bootstrap"]
    # The same numbers with b's seeds renamed (no common seed): resampled independently,
    # the seed effect swamps the edge and the order is no longer resolved.
    b_apart = {s + 1000: v for s, v in b.items()}
    apart = by_algo(rank_intervals(scores_frame({"a": a, "b": b_apart})))
    assert interval_of(apart["a"]) == (1, 2) and interval_of(apart["b"]) == (1, 2)
    assert not apart["a"]["paired_bootstrap"] and not apart["b"]["paired_bootstrap"]


def test_rank_intervals_extra_seeds_ties_and_too_few_seeds():
    seeds = range(10)
    same = {s: 0.1 * s for s in seeds}
    extra = {**{s: 0.9 for s in seeds}, 99: 0.9}  # one seed the others lack
    twin = {s + 1000: 0.0 for s in seeds}  # disjoint seeds: no seed is common to all
    crashed = {s: 0.1 * s - 0.5 for s in range(9)}  # seed 9 did not finish
    runs = {"p": same, "q": dict(same), "twin": twin, "w": crashed, "z": extra}
    out = by_algo(rank_intervals(scores_frame(runs), min_seeds=9))
    assert out["p"]["paired_bootstrap"] and out["q"]["paired_bootstrap"]
    for a in ("twin", "w", "z"):
        assert not out[a]["paired_bootstrap"]
    assert out["z"]["seeds"] == 11 and out["w"]["seeds"] == 9
    assert interval_of(out["z"]) == (1, 1)
    # identical runs: ranked by name, but either could be 2nd or 3rd in every replicate
    assert (out["p"]["rank"], out["q"]["rank"]) == (2, 3)
    assert interval_of(out["p"]) == (2, 3) and interval_of(out["q"]) == (2, 3)
    # below MIN_BOOTSTRAP_SEEDS (10) no interval, unless asked for
    few = scores_frame({"a": {0: 0.9, 1: 0.8, 2: 0.85}, "b": {0: 0.1, 1: 0.2, 2: 0.15}})
    withheld = by_algo(rank_intervals(few))
    assert withheld["a"]["rank"] == 1 and math.isnan(withheld["a"]["rank_low"])
    forced = by_algo(rank_intervals(few, min_seeds=1))
    assert interval_of(forced["a"]) == (1, 1) and interval_of(forced["b"]) == (2, 2)
    with pytest.raises(ValueError, match="several rows"):
        rank_intervals(pd.concat([few, few]))


# half_budget_stability


def test_half_budget_ranking_that_flips_names_the_largest_move():
    # K = 6, half H = 3: half headline = mean of k = 1..3, full = mean of k = 4..6.
    # Point 0 is 5.0 so that averaging the start would show.
    up = [5.0, 0.1, 0.1, 0.1, 0.9, 0.9, 0.9]
    flat = [5.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    down = [5.0, 0.9, 0.9, 0.9, 0.1, 0.1, 0.1]
    curves = {("up", s): up for s in (0, 1)}
    curves |= {("flat", s): flat for s in (0, 1)}
    curves |= {("down", s): down for s in (0, 1)}
    curves[("up", 2)] = [5.0, 9.0, 9.0]  # stopped at k = 2: not counted anywhere
    rows, envs = half_budget_stability(points_frame(curves))
    got = by_algo(rows)
    assert got["up"]["headline_half"] == pytest.approx(0.1)
    assert got["up"]["headline_full"] == pytest.approx(0.9)
    assert [(got[a]["rank_half"], got[a]["rank_full"]) for a in ("down", "flat", "up")] == [
        (1, 3),
        (2, 2),
        (3, 1),
    ]
    env = envs.iloc[0]
    assert env["kendall_tau"] == pytest.approx(-1.0) and env["n"] == 3
    assert env["p_value"] == pytest.approx(1 / 3)  # exact: 1 of 6 orders is as extreme, two-sided
    # "down" and "up" both move by 2; the one that ends better is named
    assert (env["moved"], env["moved_from"], env["moved_to"]) == ("up", 3, 1)


def test_half_budget_odd_budget_and_a_stable_ranking():
    # K = 5, H = 2: the half headline averages k = 1, 2 (headline_checkpoints(2)), not 0.
    curves = {
        ("a", 0): [0.0, 0.4, 0.6, 0.7, 0.8, 0.9],
        ("b", 0): [0.0, 0.2, 0.4, 0.5, 0.6, 0.7],
    }
    rows, envs = half_budget_stability(points_frame(curves))
    got = by_algo(rows)
    assert got["a"]["headline_half"] == pytest.approx(0.5)
    assert got["a"]["headline_full"] == pytest.approx(0.8)  # k = 3, 4, 5
    assert envs.iloc[0]["kendall_tau"] == pytest.approx(1.0)
    assert envs.iloc[0]["moved"] is None and (rows["rank_move"] == 0).all()


# still_rising


def test_linear_curve_is_still_rising_and_one_that_flattens_at_half_is_not():
    rng = np.random.default_rng(2)
    f = np.arange(9) / 8  # K = 8, second half k >= 4
    curves = {}
    for s in range(5):
        curves[("linear", s)] = list(0.1 + 0.5 * f + rng.normal(0, 0.01, 9))
        curves[("flat", s)] = list(0.1 + 0.5 * np.minimum(f, 0.5) + rng.normal(0, 0.01, 9))
    got = by_algo(still_rising(points_frame(curves)))
    assert got["linear"]["still_rising"] and got["linear"]["p_value"] < 1e-3
    assert got["linear"]["slope"] == pytest.approx(0.5, abs=0.03)
    assert got["linear"]["last_gain"] == pytest.approx(0.25, abs=0.02)  # 0.5 * (1 - 1/2)
    assert not got["flat"]["still_rising"] and got["flat"]["p_value"] > 0.05
    assert abs(got["flat"]["slope"]) < 0.05 and abs(got["flat"]["last_gain"]) < 0.03
    assert got["flat"]["slope_low"] < 0 < got["flat"]["slope_high"]


def test_still_rising_window_by_hand_and_one_seed():
    # K = 5: slope over k >= ceil(5/2) = 3, x = 0.6, 0.8, 1.0, y = 0.4, 0.5, 0.9:
    # dx = -0.2, 0, 0.2, dy = -0.2, -0.1, 0.3 -> (0.04 + 0.06) / 0.08 = 1.25.
    # last_gain: reward(5) - reward(floor(5/2) = 2) = 0.9 - 0.2 = 0.7.
    curve = [0.0, 0.1, 0.2, 0.4, 0.5, 0.9]
    two = by_algo(still_rising(points_frame({("a", 0): curve, ("a", 1): curve})))["a"]
    assert two["slope"] == pytest.approx(1.25) and two["last_gain"] == pytest.approx(0.7)
    assert two["p_value"] == 0.0 and two["still_rising"]  # no spread, positive slope
    one = by_algo(still_rising(points_frame({("a", 0): curve})))["a"]
    assert one["slope"] == pytest.approx(1.25) and math.isnan(one["p_value"])
    assert not one["still_rising"]


# step_matched_scores


def with_steps(curves: dict[tuple[str, int], tuple[list[int], list[float]]], env: str = "e"):
    frame = points_frame({run: rewards for run, (_, rewards) in curves.items()}, env=env)
    frame["optimizer_steps"] = [n for _, (steps, _) in curves.items() for n in steps]
    return frame


def test_step_matched_scores_interpolate_at_the_smallest_final_steps():
    # K = 4, headline checkpoints 2, 3, 4 -> steps S * 2/4, 3/4, 4/4 with S = 20: 10, 15, 20.
    slow = [0, 4, 10, 12, 20]  # uneven steps, reward linear in steps: exact under interpolation
    fast = [0, 10, 20, 30, 40]
    curves = {
        ("slow", 0): (slow, [0.3 + 0.02 * n for n in slow]),  # 0.5, 0.6, 0.7 -> 0.6
        ("fast", 0): (fast, [0.2 + 0.01 * n for n in fast]),  # 0.3, 0.35, 0.4 -> 0.35
        ("bent", 0): (fast, [0.0, 0.4, 0.5, 0.6, 1.0]),  # 0.4, 0.45, 0.5 -> 0.45
        ("fast", 1): ([0, 1, 2], [0.0, 0.0, 0.0]),  # stopped at k = 2: not a run, not S
    }
    frame, matched = step_matched_scores(with_steps(curves))
    assert matched == {"e": 20}
    got = {r["algorithm"]: r for r in frame.to_dict("records")}
    assert set(got) == {"slow", "fast", "bent"} and len(frame) == 3
    assert got["slow"]["headline_at_steps"] == pytest.approx(0.6)
    assert got["fast"]["headline_at_steps"] == pytest.approx(0.35)
    assert got["bent"]["headline_at_steps"] == pytest.approx(0.45)
    assert (got["slow"]["final_steps"], got["fast"]["final_steps"]) == (20, 40)


def test_step_matched_scores_per_env_and_bad_step_counts():
    run = ([0, 5, 10], [0.0, 0.5, 1.0])
    two = pd.concat(
        [
            with_steps({("a", 0): run}, env="e1"),
            with_steps({("a", 0): ([0, 3, 6], [0.0, 0.3, 0.6])}, env="e2"),
        ]
    )
    _, matched = step_matched_scores(two)
    assert matched == {"e1": 10, "e2": 6}
    decreasing = with_steps({("a", 0): ([0, 5, 4], [0.0, 0.5, 1.0])})
    with pytest.raises(ValueError, match="never decrease"):
        step_matched_scores(decreasing)
    no_start = with_steps({("a", 0): run}).query("point > 0")
    with pytest.raises(ValueError, match="no start"):
        step_matched_scores(no_start)


# decision_rule_false_positives


def exact_rate(d: list[float], alpha: float) -> float:
    """The rate the function estimates, by enumerating its n^n draws x 2^n signs (all
    equally likely) and deciding each with the board's own paired test."""
    n, hits, total = len(d), 0, 0
    for idx in itertools.product(range(n), repeat=n):
        for signs in itertools.product((-1.0, 1.0), repeat=n):
            x = np.array([d[i] * s for i, s in zip(idx, signs, strict=True)])
            hits += probability_of_improvement(x, np.zeros(n), paired=True).p_value < alpha
            total += 1
    return hits / total


@pytest.mark.parametrize(
    ("d", "alpha"),
    [
        # 3 seeds at Holm's strictest level over 6 pairs: t_{2} never gets past 10.9 here;
        # the rejections are the 1/36 of draws that repeat one seed with one sign (no
        # spread, nonzero mean: p = 0 by the board's rule), 3.3 x the nominal level.
        ([0.1, -0.3, 0.5], 0.05 / 6),
        ([0.0, 0.02, 0.02, -0.04], 0.05),  # lumpy, discrete-reward-like differences
    ],
)
def test_false_positive_rate_matches_enumeration(d: list[float], alpha: float):
    truth = exact_rate(d, alpha)
    out = decision_rule_false_positives(np.array(d), alpha)
    assert out["n"] == len(d) and out["reps"] == 4000 and out["alpha"] == alpha
    low, high = out["interval"]
    assert low <= out["rate"] <= high and low <= truth <= high
    assert high - low < 0.02


def test_false_positive_rate_of_normal_noise_is_near_alpha_whatever_its_mean():
    d = np.random.default_rng(7).normal(0, 1, 50)
    out = decision_rule_false_positives(d, 0.05)
    low, high = out["interval"]
    assert low <= 0.05 <= high
    # A "control" that is really biased: the paired test on it rejects outright, but the
    # sign flip imposes the null, so the estimated rate stays near alpha. The function
    # measures the rule under the noise's shape; it cannot detect the bias.
    biased = np.random.default_rng(8).normal(1.0, 0.1, 10)
    assert probability_of_improvement(biased, np.zeros(10), paired=True).p_value < 1e-6
    assert decision_rule_false_positives(biased, 0.05)["rate"] < 0.1
    with pytest.raises(ValueError):
        decision_rule_false_positives(np.array([0.1]), 0.05)

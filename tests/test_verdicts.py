"""The board's verdicts (harness/verdicts.py) on synthetic experiments with known effects:
two rows truly equal to the baseline, one better by 2 delta, one worse by delta / 4, one
worse by 2 delta. The four verdicts come out where they must, no board claims a false one
more often than its level allows, the power stated at the family's level is the power
seen, and the power plan's seeds deliver it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.verdicts import (
    ALPHA,
    DEFAULT_DELTA,
    difference_p,
    equivalence_p,
    equivalence_power,
    family_mdd,
    headline_sentence,
    many_to_one,
    power_plan,
    power_to_detect,
    seeds_to_resolve,
    shaffer_holm,
)

DELTA = DEFAULT_DELTA
EFFECTS = {
    "twin_a": 0.0,
    "twin_b": 0.0,
    "better": 2 * DELTA,
    "slightly_worse": -DELTA / 4,
    "worse": -2 * DELTA,
}
ALLOWED = {
    "twin_a": {"equivalent", "unresolved"},
    "twin_b": {"equivalent", "unresolved"},
    "better": {"better", "unresolved"},
    # it is worse, and within delta: both are true statements
    "slightly_worse": {"equivalent", "worse", "unresolved"},
    "worse": {"worse", "unresolved"},
}
SD = 0.015
"""Seed noise of the paired differences, the running_sum board's order (0.012-0.02)."""


def board(rng: np.random.Generator, seeds: int, sd: float = SD) -> pd.DataFrame:
    """One synthetic board: a baseline whose seeds vary a lot (cancels in pairs) and each
    row at baseline + effect + independent noise of ``sd``."""
    base = rng.normal(0.40, 0.03, seeds)
    rows = [{"algorithm": "grpo", "seed": s, "headline": base[s]} for s in range(seeds)]
    for name, effect in EFFECTS.items():
        noise = rng.normal(0.0, sd, seeds)
        rows += [
            {"algorithm": name, "seed": s, "headline": base[s] + effect + noise[s]}
            for s in range(seeds)
        ]
    return pd.DataFrame(rows)


def test_the_four_verdicts_on_a_board_with_known_effects():
    verdicts = {v.algorithm: v for v in many_to_one(board(np.random.default_rng(1), 30), "grpo")}
    assert verdicts["twin_a"].verdict == verdicts["twin_b"].verdict == "equivalent"
    assert verdicts["better"].verdict == "better"
    assert verdicts["worse"].verdict == "worse"
    assert verdicts["slightly_worse"].verdict in ALLOWED["slightly_worse"] - {"unresolved"}
    # too few seeds to say anything about a noisy row: unresolved, not a guess
    noisy = many_to_one(board(np.random.default_rng(2), 4, sd=0.06), "grpo")
    assert {v.algorithm: v.verdict for v in noisy}["twin_a"] == "unresolved"
    assert all(v.level == pytest.approx(ALPHA / 5) for v in verdicts.values())
    sentence = headline_sentence(list(verdicts.values()), "grpo")
    assert sentence.startswith("Most rows are equivalent to grpo within ±0.02: of 5 algorithms")
    assert "1 better than grpo (better)" in sentence and "1 worse than grpo (worse)" in sentence


def test_no_board_claims_a_false_verdict_more_often_than_its_level():
    """Monte Carlo over 400 boards: the family-wise rate of any false verdict (a difference
    claimed for an equal row, a wrong direction, equivalence claimed for a row 2 delta
    away) stays at or below alpha, and the verdicts come with the power stated."""
    rng = np.random.default_rng(7)
    false, detected, shown_equal = 0, 0, 0
    boards = 400
    for _ in range(boards):
        verdicts = many_to_one(board(rng, 20), "grpo")
        wrong = [v for v in verdicts if v.verdict not in ALLOWED[v.algorithm]]
        false += bool(wrong)
        detected += {v.algorithm: v.verdict for v in verdicts}["better"] == "better"
        shown_equal += {v.algorithm: v.verdict for v in verdicts}["twin_a"] == "equivalent"
    se = math.sqrt(ALPHA * (1 - ALPHA) / boards)
    assert false / boards <= ALPHA + 2 * se, false
    level = ALPHA / len(EFFECTS)
    # the stated power at the family's level is the power seen (to Monte Carlo error)
    assert detected / boards == pytest.approx(power_to_detect(2 * DELTA, SD, 20, level), abs=0.05)
    expected_equal = equivalence_power(SD, 20, DELTA, level)
    assert shown_equal / boards >= expected_equal - 0.08  # (Shaffer's later steps are kinder)


def test_the_family_mdd_is_stated_at_the_level_the_family_decides():
    sd, n, family = 0.015, 20, 6
    one_pair = family_mdd(sd, n, 1)
    whole = family_mdd(sd, n, family)
    assert whole > one_pair * 1.2  # the level alpha / 6 needs a larger difference
    assert power_to_detect(whole, sd, n, ALPHA / family) == pytest.approx(0.8, abs=1e-6)
    # simulated: a paired t-test at alpha / 6 detects a difference of `whole` 80% of the time
    rng = np.random.default_rng(3)
    hits = sum(difference_p(rng.normal(whole, sd, n)) < ALPHA / family for _ in range(4000))
    assert hits / 4000 == pytest.approx(0.8, abs=0.025)


def test_equivalence_power_matches_simulation():
    rng = np.random.default_rng(4)
    sd, n, level = 0.015, 12, ALPHA / 6
    shown = sum(equivalence_p(rng.normal(0.0, sd, n), DELTA) < level for _ in range(4000))
    assert shown / 4000 == pytest.approx(equivalence_power(sd, n, DELTA, level), abs=0.025)
    # a difference of delta itself is shown equivalent at most `level` of the time
    edge = sum(equivalence_p(rng.normal(DELTA, sd, n), DELTA) < level for _ in range(4000))
    assert edge / 4000 <= level + 0.01


def test_the_power_plan_gives_the_seeds_that_resolve_delta():
    rng = np.random.default_rng(5)
    pilot = board(rng, 5)
    plan = power_plan(pilot, "grpo", DELTA, minimum=0, cap=80)
    assert plan["pilot_seeds"] == 5 and plan["family"] == 5
    assert plan["sd_planned"] > plan["sd_pooled"]  # planned on the upper bound
    n = plan["seeds"]
    level = ALPHA / 5
    assert power_to_detect(DELTA, plan["sd_planned"], n, level) >= 0.8
    assert equivalence_power(plan["sd_planned"], n, DELTA, level) >= 0.8
    assert power_to_detect(DELTA, plan["sd_planned"], n - 1, level) < 0.8 or (
        equivalence_power(plan["sd_planned"], n - 1, DELTA, level) < 0.8
    )
    # at the true spread the planned seeds detect a true delta 80% of the time or more
    hits = 0
    for _ in range(1000):
        d = rng.normal(DELTA, SD, n)
        hits += difference_p(d) < level
    assert hits / 1000 >= 0.78
    raised = power_plan(pilot, "grpo", DELTA, minimum=40, cap=80)
    assert raised["seeds"] == 40
    assert power_plan(pilot, "grpo", 0.001, cap=30)["capped"]
    assert seeds_to_resolve(float("nan"), DELTA, 5) is None


def test_shaffer_holm_counts_comparisons_not_hypotheses():
    # one comparison clearly separated, one clearly equivalent: each is judged at alpha/2
    # at first (two comparisons), not alpha/4 (four hypotheses)
    diff, equiv = shaffer_holm([0.02, 0.9], [0.9, 0.02])
    assert diff[0] == pytest.approx(0.04) and equiv[1] == pytest.approx(0.04)
    # after a comparison's both hypotheses are rejected it stops counting
    diff, equiv = shaffer_holm([0.001, 0.5], [0.002, 0.03])
    assert diff[0] == pytest.approx(0.002) and equiv[0] == pytest.approx(0.004)
    assert equiv[1] == pytest.approx(0.03)  # one comparison left standing
    untestable, shown = shaffer_holm([float("nan")], [0.01])
    assert math.isnan(untestable[0]) and shown == [0.01]

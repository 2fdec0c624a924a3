"""Pass@k advantages (``advantage = "pass_at_k"``, zoo/core/losses.py
``pass_at_k_advantages``; Chen et al., arXiv 2508.10751): values typed from the paper's
closed form, the same numbers from enumerating every size-k subset of a group, k = 1 as
GRPO's advantage with the population std, zero advantages without NaN for groups all right
or all wrong, and ``pass_k`` as a shared option with its range checked."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
import torch
from harness_cli import run_harness

from zoo.algorithms import get_algorithm
from zoo.algorithms.conformance import run_conformance
from zoo.algorithms.grpo import GRPO
from zoo.core.config import ConfigError
from zoo.core.losses import ADVANTAGE_ESTIMATORS, estimate_advantages, pass_at_k_advantages
from zoo.services.evaluation import FULL_REWARD

EPS = 1e-6


def passk(rewards: list[float], k: int) -> list[float]:
    r = torch.tensor([rewards], dtype=torch.float64)
    return pass_at_k_advantages(r, k=k)[0].tolist()


def enumerated(rewards: list[float], k: int) -> list[float]:
    """The definition, by brute force: every size-k subset of the group scores 1 if it
    holds a correct response; each subset's advantage is (score - mean) / (std + 1e-6)
    over all subsets (population std); a response's is the mean over the subsets that
    hold it."""
    n = len(rewards)
    subsets = list(itertools.combinations(range(n), k))
    scores = [max(rewards[i] for i in s) for s in subsets]
    mean, std = statistics.fmean(scores), statistics.pstdev(scores)
    pairs = list(zip(subsets, scores, strict=True))
    return [
        statistics.fmean((sc - mean) / (std + EPS) for s, sc in pairs if i in s) for i in range(n)
    ]


# (N, c, k) -> (1 - R, C(N-c-1, k-1) / C(N-1, k-1)), worked by hand from the paper's
# closed form R = 1 - C(N-c, k) / C(N, k):
HAND = {
    (4, 1, 2): (3 / 6, 2 / 3),  # C(3,2)/C(4,2) = 3/6;   C(2,1)/C(3,1) = 2/3
    (4, 3, 2): (0 / 6, 0 / 3),  # C(1,2) = 0: every pair holds a correct one
    (8, 2, 4): (15 / 70, 10 / 35),  # C(6,4)/C(8,4);        C(5,3)/C(7,3)
    (8, 5, 3): (1 / 56, 1 / 21),  # C(3,3)/C(8,3);        C(2,2)/C(7,2)
    (8, 1, 8): (0 / 1, 0 / 1),  # one subset, the group itself, which passes
}


@pytest.mark.parametrize(("n", "c", "k"), sorted(HAND))
def test_values_match_the_papers_closed_form_typed_by_hand(n, c, k):
    fail, only_wrong = HAND[(n, c, k)]  # 1 - R, and a wrong response's subsets all wrong
    sigma = math.sqrt((1 - fail) * fail)  # R (1 - R)
    right = fail / (sigma + EPS)
    wrong = (fail - only_wrong) / (sigma + EPS)
    rewards = [1.0] * c + [0.0] * (n - c)
    assert passk(rewards, k) == pytest.approx([right] * c + [wrong] * (n - c), abs=1e-12)


def test_two_worked_cases_in_closed_numbers():
    # N = 4, c = 1, k = 2: R = 1/2, sigma = 1/2: A = +1 for the correct one, -1/3 for
    # the others (up to the 1e-6 on sigma)
    assert passk([0.0, 1.0, 0.0, 0.0], 2) == pytest.approx([-1 / 3, 1, -1 / 3, -1 / 3], rel=1e-5)
    # N = 8, c = 2, k = 4: R = 11/14, sigma = sqrt(33)/14: +3/sqrt(33) and -1/sqrt(33)
    got = passk([1.0, 1.0] + [0.0] * 6, 4)
    assert got == pytest.approx([3 / math.sqrt(33)] * 2 + [-1 / math.sqrt(33)] * 6, rel=1e-5)


@pytest.mark.parametrize("n", [2, 3, 4, 6, 8])
def test_equal_to_enumerating_every_k_subset(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            # correct responses spread over the group, not first
            rewards = [1.0 if (i * 5) % n < c else 0.0 for i in range(n)]
            assert sum(rewards) == c
            assert passk(rewards, k) == pytest.approx(enumerated(rewards, k), abs=1e-9), (n, c, k)


def test_k_1_is_group_norm_with_the_population_std():
    """k = 1: each subset is one response, R = c / N, sigma = sqrt(p (1 - p)) is the
    population std of binary rewards, so A_i = (R_i - mean) / (std_pop + 1e-6): GRPO's
    advantage with G (not G - 1) in the std's denominator."""
    for rewards in ([1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]):
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        assert passk(rewards, 1) == pytest.approx(
            [(r - mean) / (std + EPS) for r in rewards], abs=1e-12
        )


def test_all_correct_or_all_wrong_groups_get_exact_zeros():
    rewards = torch.tensor([[1.0] * 8, [0.0] * 8, [1, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    for k in range(1, 9):
        got = pass_at_k_advantages(rewards, k=k)
        assert not torch.isnan(got).any()
        assert got[:2].tolist() == [[0.0] * 8, [0.0] * 8]


def test_large_k_favours_the_rare_correct_answer_more_than_pass_at_1():
    """The point of pass@k training: a wrong answer in a group that already has a correct
    one is punished less as k grows (the subsets holding it mostly pass anyway)."""
    rewards = [1.0, 1.0, 1.0] + [0.0] * 5
    wrong = [passk(rewards, k)[-1] for k in (1, 2, 4)]
    assert wrong[0] < wrong[1] < wrong[2] < 0


def test_partial_credit_counts_as_a_failure():
    """Rewards are read as pass/fail at the env's full reward, as the evaluation's pass@k
    counts a completion correct (zoo.services.evaluation.FULL_REWARD)."""
    assert FULL_REWARD == 1.0
    assert passk([0.5, 1.0, 0.99, 0.0], 2) == passk([0.0, 1.0, 0.0, 0.0], 2)
    assert passk([0.7, 0.2, 0.9, 0.0], 3) == [0.0] * 4  # none passes: no signal


def test_selectable_by_name_in_any_algorithm_with_pass_k_from_the_command_line():
    assert ADVANTAGE_ESTIMATORS["pass_at_k"] is pass_at_k_advantages
    rewards = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    lengths = torch.tensor([[3, 4, 5, 6], [1, 2, 3, 4]])
    for name in ("grpo", "dapo", "dr_grpo", "rloo", "opo", "custom"):
        algo = get_algorithm(name, advantage="pass_at_k", pass_k="3")  # as --set passes it
        assert algo.options.pass_k == 3
        want = pass_at_k_advantages(rewards, k=3)
        assert torch.equal(algo.group_advantages(rewards, lengths), want), name
    # the default k
    assert torch.equal(
        get_algorithm("grpo", advantage="pass_at_k").group_advantages(rewards, lengths),
        estimate_advantages("pass_at_k", rewards, k=4),
    )


def test_pass_k_out_of_range_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match="pass_k = 9"):
        get_algorithm("grpo", advantage="pass_at_k", pass_k=9).check_run(8, 64)
    get_algorithm("grpo", advantage="pass_at_k", pass_k=8).check_run(8, 64)
    get_algorithm("grpo", pass_k=9).check_run(8, 64)  # not the estimator in use: no matter
    with pytest.raises(ConfigError, match="pass_k must be >= 1, got 0"):
        get_algorithm("grpo", advantage="pass_at_k", pass_k=0)
    with pytest.raises(ConfigError, match="pass_k = 5"):
        pass_at_k_advantages(torch.zeros(2, 4), k=5)
    with pytest.raises(ConfigError, match="no advantage field"):
        get_algorithm("gpg", pass_k=2)  # GPG's paper fixes its advantage


def test_cli_refuses_pass_k_above_the_group_size_before_anything_runs(tmp_path):
    bad = run_harness(
        "run",
        "grpo",
        "--set",
        "advantage=pass_at_k",
        "--set",
        "pass_k=9",
        "--group-size",
        "4",
        "--out",
        "r",
        cwd=tmp_path,
    )
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "pass_k = 9" in bad.stderr and "group size (4)" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "r").exists()


def test_passes_the_conformance_suite():
    results = run_conformance(GRPO, {"advantage": "pass_at_k", "pass_k": 2})
    assert not [r for r in results if r.passed is False]

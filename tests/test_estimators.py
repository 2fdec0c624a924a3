"""The shared estimators of zoo/core/losses.py (advantages: rloo, reinforce_pp,
reinforce_pp_baseline, opo; KL: k1, k2, k3, in the loss or in the reward), their
selection by name from any algorithm's config, and the built-ins rloo, reinforce_pp, opo
and custom's dual clip: values and gradients against plain-Python derivations (loops,
math.exp, statistics), with the clips binding."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from harness_cli import run_harness

from zoo.algorithms import Algorithm, get_algorithm
from zoo.algorithms.conformance import run_conformance
from zoo.algorithms.custom import Custom
from zoo.algorithms.grpo import GRPO
from zoo.algorithms.reinforce_pp import ReinforcePP
from zoo.core.config import ConfigError
from zoo.core.losses import ADVANTAGE_ESTIMATORS, KL_ESTIMATORS, estimate_advantages
from zoo.core.types import LossOutput, TrainBatch

REWARDS = [[1.0, 0.0, 0.0, 1.0], [0.5, 2.0, -1.0, 3.0], [0.3, 0.3, 0.3, 0.3]]
LENGTHS = [[4, 10, 6, 2], [3, 3, 8, 1], [5, 7, 1, 2]]


def rows(t: torch.Tensor) -> list[list[float]]:
    return [[float(x) for x in row] for row in t]


def approx_rows(expected: list[list[float]]):
    return [pytest.approx(row, rel=1e-12, abs=1e-12) for row in expected]


def adv(name: str, rewards=REWARDS, lengths=LENGTHS) -> list[list[float]]:
    r = torch.tensor(rewards, dtype=torch.float64)
    n = None if lengths is None else torch.tensor(lengths)
    return rows(estimate_advantages(name, r, n))


# --- advantage estimators --------------------------------------------------------------------


def test_the_registries_name_every_estimator():
    assert set(ADVANTAGE_ESTIMATORS) == {
        "group_norm",
        "group_center",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
        "opo",
        "pass_at_k",
    }
    assert set(KL_ESTIMATORS) == {"k1", "k2", "k3"}


def test_rloo_subtracts_the_mean_of_the_other_responses():
    expected = []
    for group in REWARDS:
        g = len(group)
        expected.append([r - (sum(group) - r) / (g - 1) for r in group])
    assert adv("rloo") == approx_rows(expected)
    assert adv("rloo")[2] == [0.0, 0.0, 0.0, 0.0]  # all equal: exact zeros
    assert adv("rloo")[0] == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3], rel=1e-12)


def test_reinforce_pp_normalises_over_the_whole_batch_not_per_group():
    flat = [r for group in REWARDS for r in group]
    mean, std = statistics.fmean(flat), statistics.stdev(flat)  # stdev: G - 1 denominator
    expected = [[(r - mean) / (std + 1e-6) for r in group] for group in REWARDS]
    got = adv("reinforce_pp")
    assert got == approx_rows(expected)
    assert got[2][0] != 0.0  # no baseline: an all-equal group still gets a signal


def test_reinforce_pp_baseline_centres_per_group_then_divides_by_the_batch_std():
    centred = [[r - statistics.fmean(group) for r in group] for group in REWARDS]
    std = statistics.stdev([a for group in centred for a in group])
    expected = [[a / (std + 1e-6) for a in group] for group in centred]
    got = adv("reinforce_pp_baseline")
    assert got == approx_rows(expected)
    assert got[2] == [0.0, 0.0, 0.0, 0.0]  # all equal: exact zeros
    # differs from GRPO's per-group std: groups with larger spread keep larger advantages
    assert abs(got[1][3]) > abs(got[0][0]) and adv("group_norm")[0][0] != got[0][0]


def test_batch_norm_of_an_all_equal_batch_is_exactly_zero():
    assert adv("reinforce_pp", rewards=[[0.7, 0.7], [0.7, 0.7]]) == [[0.0, 0.0], [0.0, 0.0]]


def test_opo_subtracts_the_length_weighted_mean_reward_of_the_group():
    expected = []
    for group, lengths in zip(REWARDS, LENGTHS, strict=True):
        b = sum(n * r for n, r in zip(lengths, group, strict=True)) / sum(lengths)
        expected.append([r - b for r in group])
    got = adv("opo")
    assert got == approx_rows(expected)
    assert got[2] == [0.0, 0.0, 0.0, 0.0]
    # group 0: b = (4 + 2) / 22, not the plain mean 0.5
    assert got[0][0] == pytest.approx(1 - 6 / 22, rel=1e-12)
    # equal lengths: the plain mean (group_center); all-empty group: the plain mean too
    assert adv("opo", lengths=[[5] * 4] * 3) == approx_rows(adv("group_center"))
    assert adv("opo", lengths=[[0] * 4] * 3) == approx_rows(adv("group_center"))


def test_opo_without_lengths_is_a_config_error():
    with pytest.raises(ConfigError, match="lengths"):
        adv("opo", lengths=None)


# --- selection by name: any algorithm, fail fast ---------------------------------------------


@pytest.mark.parametrize("field", ["advantage", "kl"])
def test_an_unknown_estimator_name_fails_when_the_algorithm_is_built(field):
    valid = ADVANTAGE_ESTIMATORS if field == "advantage" else KL_ESTIMATORS
    for name in ("grpo", "dapo", "rloo", "reinforce_pp", "opo", "custom"):
        with pytest.raises(ConfigError) as err:
            get_algorithm(name, **{field: "nope"})
        assert "'nope'" in str(err.value) and name in str(err.value)
        assert all(choice in str(err.value) for choice in valid)


def test_any_builtin_takes_another_estimator_without_a_new_file():
    rewards = torch.tensor(REWARDS, dtype=torch.float64)
    lengths = torch.tensor(LENGTHS)
    for name in ("grpo", "gspo", "dapo", "dr_grpo"):
        for estimator in ADVANTAGE_ESTIMATORS:
            algo = get_algorithm(name, advantage=estimator)
            got = rows(algo.group_advantages(rewards, lengths))
            assert got == approx_rows(adv(estimator)), (name, estimator)


def test_cli_set_advantage_and_kl_are_validated_before_anything_runs(tmp_path):
    bad = run_harness("run", "grpo", "--set", "advantage=loo", "--out", "r", cwd=tmp_path)
    assert bad.returncode == 2, bad.stderr[-2000:]
    assert "'loo'" in bad.stderr and "rloo" in bad.stderr and "opo" in bad.stderr
    assert "Traceback" not in bad.stderr and not (tmp_path / "r").exists()


with pytest.warns(DeprecationWarning, match="declare inputs = frozenset"):

    class OldStylePlugin(GRPO):
        """A third-party override written before lengths were passed (and before plugins
        declared their inputs: still accepted, with a warning naming the fix)."""

        def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
            return rewards * 10


class LengthAware(GRPO):
    def advantages(self, rewards: torch.Tensor, lengths: torch.Tensor | None = None):
        return lengths.to(rewards.dtype)


def test_group_advantages_passes_lengths_only_to_overrides_that_take_them():
    rewards, lengths = torch.tensor([[1.0, 2.0]]), torch.tensor([[3, 4]])
    assert OldStylePlugin().group_advantages(rewards, lengths).tolist() == [[10.0, 20.0]]
    assert LengthAware().group_advantages(rewards, lengths).tolist() == [[3.0, 4.0]]
    opo = get_algorithm("opo").group_advantages(rewards, lengths)[0].tolist()
    assert opo == pytest.approx([1 - (3 + 8) / 7, 2 - (3 + 8) / 7])  # b = (3*1 + 4*2) / 7


# --- the hand batch and plain-Python token rules ---------------------------------------------
# B = 3, T = 4; row 2 is shorter, padding holds junk. D = lp - old (r = exp(D)).
LP = [[-0.5, -1.2, -0.3, -2.0], [-0.7, -2.0, -0.9, -9.0], [-0.2, -1.5, 5.0, 5.0]]
D = [
    [0.0, 0.4, -0.5, 1.5],  # A > 0: r = 1, 1.49 (> 1.2), 0.61, 4.48 (> 1.2)
    [-0.4, 0.9, 1.25, 9.0],  # A < 0: r = 0.67 (< 0.8), 2.46, 3.49 (> c = 3)
    [0.1, -0.3, 9.0, 9.0],  # A > 0 or < 0 by test
]
OLD = [[lp - d for lp, d in zip(a, b, strict=True)] for a, b in zip(LP, D, strict=True)]
REF = [[-0.4, -1.0, -0.6, -2.5], [-0.5, -2.5, -0.7, 3.0], [-0.1, -1.7, 3.0, 3.0]]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]]
RESPONSE = [(i, t) for i, row in enumerate(MASK) for t, m in enumerate(row) if m]


def run(algo: Algorithm, advantages: list[float]) -> tuple[float, list[list[float]], dict]:
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    f64 = lambda x: torch.tensor(x, dtype=torch.float64)  # noqa: E731
    ref = f64(REF) if algo.needs_reference else None
    out: LossOutput = algo.loss(TrainBatch(lp, f64(OLD), ref, f64(advantages), f64(MASK)))
    out.loss.backward()
    return float(out.loss.detach()), lp.grad.tolist(), out.metrics


def ppo_token(r: float, a: float, eps: float) -> tuple[float, float]:
    """-min(r A, clip(r) A) and its derivative in lp (dr/dlp = r; the clipped branch is
    constant)."""
    unclipped, clipped = r * a, min(max(r, 1 - eps), 1 + eps) * a
    return -min(unclipped, clipped), (-a * r if unclipped <= clipped else 0.0)


def weight(i: int, mode: str) -> float:
    if mode == "token_mean":
        return 1 / len(RESPONSE)
    return 1 / (sum(MASK[i]) * len(MASK))  # seq_mean, every row has tokens


def reference(token_rule, mode: str) -> tuple[float, list[list[float]]]:
    loss, grad = 0.0, [[0.0] * 4 for _ in LP]
    for i, t in RESPONSE:
        value, g = token_rule(i, t, math.exp(D[i][t]))
        loss += weight(i, mode) * value
        grad[i][t] = weight(i, mode) * g
    return loss, grad


def assert_matches(got, want) -> None:
    (loss, grad), (want_loss, want_grad) = got, want
    assert loss == pytest.approx(want_loss, rel=1e-12, abs=1e-14)
    assert grad == [pytest.approx(row, rel=1e-12, abs=1e-14) for row in want_grad]


ADV = [1.5, -0.8, 0.6]


def test_rloo_loss_is_ppo_clip_with_seq_mean():
    loss, grad, metrics = run(get_algorithm("rloo"), ADV)
    want = reference(lambda i, t, r: ppo_token(r, ADV[i], 0.2), "seq_mean")
    assert_matches((loss, grad), want)
    # the clip binds: (0,1) (0,3) r > 1.2 with A > 0; (1,0) r < 0.8 with A < 0
    assert [grad[0][1], grad[0][3], grad[1][0]] == [0.0, 0.0, 0.0] and grad[0][0] != 0.0
    assert "kl" not in metrics


def test_opo_loss_is_ppo_clip_with_token_mean():
    loss, grad, _ = run(get_algorithm("opo"), ADV)
    assert_matches((loss, grad), reference(lambda i, t, r: ppo_token(r, ADV[i], 0.2), "token_mean"))
    assert grad[0][1] == 0.0 and grad[1][1] != 0.0


def kl_to_go(i: int, t: int) -> float:
    """sum over s >= t of k1(old, ref) on the response tokens of row i."""
    return sum(OLD[i][s] - REF[i][s] for s in range(t, 4) if MASK[i][s])


def test_reinforce_pp_puts_the_k1_kl_return_into_each_tokens_advantage():
    beta = 0.01
    loss, grad, metrics = run(get_algorithm("reinforce_pp"), ADV)

    def rule(i, t, r):
        return ppo_token(r, ADV[i] - beta * kl_to_go(i, t), 0.2)

    assert_matches((loss, grad), reference(rule, "token_mean"))
    k1 = [OLD[i][t] - REF[i][t] for i, t in RESPONSE]
    assert metrics["kl"] == pytest.approx(sum(k1) / len(k1), rel=1e-12)
    assert grad[0][1] == 0.0 and grad[1][0] == 0.0  # the clip binds


def test_reinforce_pp_kl_return_can_flip_a_small_advantage():
    """A large beta: the KL return outweighs A = 0.4 on the last token of row 2 only."""
    beta, small = 1.0, [0.05, -0.8, 0.4]
    loss, grad, _ = run(get_algorithm("reinforce_pp", beta=beta), small)

    def rule(i, t, r):
        return ppo_token(r, small[i] - beta * kl_to_go(i, t), 0.2)

    assert_matches((loss, grad), reference(rule, "token_mean"))
    assert small[2] - beta * kl_to_go(2, 1) < 0 < small[2] - beta * kl_to_go(2, 0)


@pytest.mark.parametrize("kl", ["k1", "k2", "k3"])
def test_kl_in_the_loss_adds_beta_times_the_estimator_with_its_gradient(kl):
    beta = 0.3
    algo = get_algorithm("reinforce_pp", beta=beta, kl=kl, kl_in_reward=False)
    loss, grad, metrics = run(algo, ADV)

    def estimator(lp: float, ref: float) -> tuple[float, float]:
        if kl == "k1":
            return lp - ref, 1.0
        if kl == "k2":
            return 0.5 * (lp - ref) ** 2, lp - ref
        return math.exp(ref - lp) - (ref - lp) - 1, 1 - math.exp(ref - lp)

    def rule(i, t, r):
        (v, g), (kv, kg) = ppo_token(r, ADV[i], 0.2), estimator(LP[i][t], REF[i][t])
        return v + beta * kv, g + beta * kg

    assert_matches((loss, grad), reference(rule, "token_mean"))
    values = [estimator(LP[i][t], REF[i][t])[0] for i, t in RESPONSE]
    assert metrics["kl"] == pytest.approx(sum(values) / len(values), rel=1e-12)


def test_grpo_takes_the_k2_estimator_by_name():
    loss_k2, _, _ = run(get_algorithm("grpo", kl="k2"), ADV)
    loss_none, _, _ = run(get_algorithm("grpo", beta=0.0), ADV)
    k2_seq_mean = sum(
        0.5 * (LP[i][t] - REF[i][t]) ** 2 * weight(i, "seq_mean") for i, t in RESPONSE
    )
    assert loss_k2 - loss_none == pytest.approx(0.04 * k2_seq_mean, rel=1e-10)


# --- custom's dual clip ----------------------------------------------------------------------


def dual_token(r: float, a: float, eps: float, c: float) -> tuple[float, float]:
    """-max(min(r A, clip(r) A), c A) for A < 0: zero gradient where c A is the max."""
    value, g = ppo_token(r, a, eps)
    if a < 0 and c * a > -value:
        return -c * a, 0.0
    return value, g


def test_dual_clip_bounds_negative_advantages_at_c_a():
    advantages = [1.5, -0.8, -0.6]
    loss, grad, metrics = run(get_algorithm("custom", beta=0.0, dual_clip=3.0), advantages)
    want = reference(lambda i, t, r: dual_token(r, advantages[i], 0.2, 3.0), "seq_mean")
    assert_matches((loss, grad), want)
    # (1,2): A < 0, r = 3.49 > 3: no gradient with the dual clip, one without it;
    # (1,1): A < 0, r = 2.46 < 3: the plain -r A gradient either way
    _, plain_grad, plain_metrics = run(get_algorithm("custom", beta=0.0), advantages)
    assert grad[1][2] == 0.0 and plain_grad[1][2] != 0.0
    assert grad[1][1] == plain_grad[1][1] != 0.0
    assert grad[0] == plain_grad[0]  # A > 0 unchanged
    assert metrics["dual_clip_frac"] == pytest.approx(1 / len(RESPONSE))
    assert "dual_clip_frac" not in plain_metrics


@pytest.mark.parametrize("c", [0.5, 1.0, -3.0])
def test_dual_clip_at_or_below_1_is_a_config_error(c):
    with pytest.raises(ConfigError, match="dual_clip"):
        get_algorithm("custom", dual_clip=c)


# --- conformance under the options -----------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "overrides"),
    [
        (Custom, {"dual_clip": 3.0}),
        (ReinforcePP, {"kl_in_reward": False, "kl": "k2"}),
        (ReinforcePP, {"advantage": "reinforce_pp_baseline", "beta": 0.5}),
    ],
)
def test_options_pass_the_conformance_suite(cls, overrides):
    failed = [f"{r.name}: {r.detail}" for r in run_conformance(cls, overrides) if r.passed is False]
    assert not failed, failed

"""gpg, gmpo, clip_cov and kl_cov (issue 19 part B) against plain-Python references
(math.exp, loops over a hand batch, gradients derived by hand), with their clips and
covariance selections binding; the families of `list algorithms`; and the conformance
suite's token_selection relaxations catching plugins that abuse them."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from zoo.algorithms import ALGORITHMS, Algorithm, get_algorithm, list_algorithms
from zoo.algorithms.conformance import run_conformance
from zoo.core.losses import aggregate, log_ratio
from zoo.core.types import LossOutput, TrainBatch

NEW = ["gpg", "gmpo", "clip_cov", "kl_cov"]
DEFAULTS = {  # docs/algorithms.md
    "gpg": {"std_norm": False, "valid_correction": True, "beta": 0.0},
    "gmpo": {"clip_low": math.exp(-0.4), "clip_high": math.exp(0.4), "beta": 0.0},
    "clip_cov": {
        "cov_clip_ratio": 2e-4,
        "cov_low": 1.0,
        "cov_high": 5.0,
        "eps_low": 1.0,
        "eps_high": 1.0,
        "seed": 0,
        "beta": 0.0,
    },
    "kl_cov": {"kl_cov_ratio": 2e-3, "kl_coef": 1.0, "beta": 0.0},
}
AGGREGATION = {
    "gpg": "token_mean",
    "gmpo": "seq_mean",
    "clip_cov": "token_mean",
    "kl_cov": "token_mean",
}

# --- the hand batch: B = 3, T = 4; row 1's last position is padding with a junk ratio ------
LP = [[-0.1, -1.2, -0.3, -2.6], [-0.7, -2.9, -0.2, -9.0], [-0.2, -1.5, -0.05, -0.8]]
D = [  # log-ratios lp - old
    [0.9, 0.5, -0.6, 0.2],  # A = 3.0: 0.9 and 0.5 above GMPO's 0.4; r = e^0.9 > 2 (Clip-Cov PPO)
    [-0.5, 0.1, 0.45, 9.0],  # A = -2.5: -0.5 below GMPO's -0.4
    [0.3, -0.45, 0.0, 0.1],  # A = 0.5
]
MASK = [[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]]
ADV = [3.0, -2.5, 0.5]
TOKENS = [(i, t) for i in range(3) for t in range(4) if MASK[i][t]]
N = len(TOKENS)  # 11


def hand_batch(adv=ADV) -> tuple[TrainBatch, torch.Tensor]:
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    old = torch.tensor(LP, dtype=torch.float64) - torch.tensor(D, dtype=torch.float64)
    mask = torch.tensor(MASK, dtype=torch.float64)
    return TrainBatch(lp, old, None, torch.tensor(adv, dtype=torch.float64), mask), lp


def run(name: str, **overrides) -> tuple[float, list[list[float]], dict[str, float]]:
    batch, lp = hand_batch()
    out = get_algorithm(name, **overrides).loss(batch)
    out.loss.backward()
    return float(out.loss.detach()), lp.grad.tolist(), out.metrics


def covariances() -> dict[tuple[int, int], float]:
    """(A_t - mean A)(lp_t - mean lp) over the response tokens, in plain Python."""
    mean_a = sum(ADV[i] for i, _ in TOKENS) / N
    mean_lp = sum(LP[i][t] for i, t in TOKENS) / N
    return {(i, t): (ADV[i] - mean_a) * (LP[i][t] - mean_lp) for i, t in TOKENS}


def assert_grad(got: list[list[float]], want: dict[tuple[int, int], float]) -> None:
    for i in range(3):
        for t in range(4):
            assert got[i][t] == pytest.approx(want.get((i, t), 0.0), abs=1e-12), (i, t)


# --- registry, defaults, families -------------------------------------------------------


@pytest.mark.parametrize("name", NEW)
def test_registered_with_the_documented_defaults(name):
    assert name in list_algorithms()
    algo = get_algorithm(name)
    assert dataclasses.asdict(algo.config) == DEFAULTS[name]
    assert algo.aggregation == AGGREGATION[name]
    assert not algo.needs_reference


@pytest.mark.parametrize("name", NEW)
def test_passes_the_whole_conformance_suite(name):
    results = run_conformance(ALGORITHMS.load(name))
    failed = [f"{r.name}: {r.detail}" for r in results if r.passed is False]
    assert not failed, failed


def test_every_builtin_declares_a_family_and_list_groups_by_it(capsys):
    from harness.listing import FAMILY_ORDER, print_algorithms

    families = {n: ALGORITHMS.load(n).family for n in list_algorithms()}
    builtins = {n for n, s in ALGORITHMS.specs().items() if s.source == "built-in"}
    assert all(families[n] in FAMILY_ORDER for n in builtins), families
    assert families["gpg"] == "REINFORCE-style" and families["gmpo"] == "geometric mean"
    assert families["clip_cov"] == families["kl_cov"] == "entropy control"
    assert Algorithm.family == "other"

    print_algorithms()
    header, seen = None, {}
    for line in capsys.readouterr().out.splitlines():
        if line.startswith("== "):
            header = line.strip("= ")
        elif line and not line.startswith(" "):
            seen[line.split()[0]] = header
    assert seen == families
    order = [f for f in FAMILY_ORDER if f in families.values()]
    headers = list(dict.fromkeys(seen.values()))
    assert headers[: len(order)] == order


# --- gpg -----------------------------------------------------------------------------------


def test_gpg_advantages_center_and_correct_for_the_all_equal_groups():
    rows = [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]
    rewards = torch.tensor(rows, dtype=torch.float64)
    # 8 of 12 responses are in groups with a reward spread: alpha = 12 / 8
    alpha = 12 / 8
    want = [[alpha * (r - sum(g) / 4) for r in g] for g in rewards.tolist()]
    want[1] = [0.0] * 4
    got = get_algorithm("gpg").advantages(rewards)
    assert got.tolist() == [pytest.approx(row, abs=1e-12) for row in want]
    plain = get_algorithm("gpg", valid_correction=False).advantages(rewards)
    assert plain[0].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    std = math.sqrt(sum((r - 0.5) ** 2 for r in [1, 0, 0, 1]) / 3)  # unbiased
    scaled = get_algorithm("gpg", std_norm=True).advantages(rewards)
    assert scaled[0, 0].item() == pytest.approx(alpha * 0.5 / (std + 1e-6), abs=1e-12)
    every_group_equal = torch.ones(2, 4)
    assert get_algorithm("gpg").advantages(every_group_equal).abs().max() == 0


def test_gpg_loss_is_minus_a_lp_token_mean_whatever_the_ratio():
    loss, grad, metrics = run("gpg")
    want = -sum(ADV[i] * LP[i][t] for i, t in TOKENS) / N
    assert loss == pytest.approx(want, abs=1e-12)
    assert_grad(grad, {(i, t): -ADV[i] / N for i, t in TOKENS})
    assert metrics["ratio_max"] == pytest.approx(math.exp(0.9))


# --- gmpo ----------------------------------------------------------------------------------


def gmpo_reference(lo: float, hi: float) -> tuple[float, dict[tuple[int, int], float]]:
    loss, grad = 0.0, {}
    for i in range(3):
        toks = [t for t in range(4) if MASK[i][t]]
        a = ADV[i]
        clipped, kept = [], []
        for t in toks:
            d = D[i][t]
            if a > 0:  # pessimistic: cap the log-ratio from above only
                c, free = (hi, False) if d > hi else (d, True)
            else:  # A < 0: floor it from below only
                c, free = (lo, False) if d < lo else (d, True)
            clipped.append(c)
            kept.append(free)
        geo = math.exp(sum(clipped) / len(toks))
        loss += -a * geo / 3
        for t, free in zip(toks, kept, strict=True):
            grad[(i, t)] = -a * geo / len(toks) / 3 if free else 0.0
    return loss, grad


def test_gmpo_matches_the_geometric_mean_with_its_log_space_clip_binding():
    loss, grad, metrics = run("gmpo")
    want_loss, want_grad = gmpo_reference(-0.4, 0.4)
    assert loss == pytest.approx(want_loss, abs=1e-12)
    assert_grad(grad, want_grad)
    # the clip bound: (0,0), (0,1) above 0.4 with A > 0; (1,0) below -0.4 with A < 0
    assert [k for k, g in want_grad.items() if g == 0] == [(0, 0), (0, 1), (1, 0)]
    assert metrics["clip_high_frac"] == pytest.approx(3 / N)  # 0.9, 0.5, 0.45 (not padding)
    assert metrics["clip_low_frac"] == pytest.approx(3 / N)  # -0.6, -0.5, -0.45
    # acting: the zeroed ones; 0.45 has A < 0, -0.6 and -0.45 have A > 0
    assert metrics["clip_high_acting_frac"] == pytest.approx(2 / N)
    assert metrics["clip_low_acting_frac"] == pytest.approx(1 / N)


def test_gmpo_with_a_wide_clip_is_the_plain_geometric_mean():
    loss, grad, _ = run("gmpo", clip_low=1e-9, clip_high=1e9)
    want_loss, want_grad = gmpo_reference(math.log(1e-9), math.log(1e9))
    assert loss == pytest.approx(want_loss, abs=1e-12)
    assert all(g != 0 for g in want_grad.values())
    assert_grad(grad, want_grad)


# --- clip_cov ------------------------------------------------------------------------------


def clip_cov_reference(zeroed: set[tuple[int, int]]) -> tuple[float, dict]:
    """PPO-clip at (0, 2) per token, token_mean; tokens in ``zeroed`` count 0."""
    loss, grad = 0.0, {}
    for i, t in TOKENS:
        a, r = ADV[i], math.exp(D[i][t])
        clipped_r = min(max(r, 0.0), 2.0)
        binds = clipped_r * a < r * a
        if (i, t) in zeroed:
            grad[(i, t)] = 0.0
            continue
        loss += -(clipped_r * a if binds else r * a) / N
        grad[(i, t)] = 0.0 if binds else -r * a / N
    return loss, grad


def test_clip_cov_band_excludes_ppo_clipped_and_out_of_band_tokens():
    cov = covariances()
    # (0,0) is in the band but PPO-clipped (A > 0, r = e^0.9 > 2); (1,1) is above 5
    assert 1 < cov[(0, 0)] < 5 and math.exp(D[0][0]) > 2 and cov[(1, 1)] > 5
    in_band = [k for k, c in cov.items() if 1 < c < 5 and k != (0, 0)]
    assert in_band == [(0, 2)]
    loss, grad, metrics = run("clip_cov")  # max(floor(2e-4 * 11), 1) = 1 token
    want_loss, want_grad = clip_cov_reference({(0, 2)})
    assert loss == pytest.approx(want_loss, abs=1e-12)
    assert_grad(grad, want_grad)
    assert metrics["cov_clip_frac"] == pytest.approx(1 / N)
    assert clip_cov_reference(set())[1][(0, 2)] != 0  # the selection is what zeroed it


def test_clip_cov_draws_at_random_among_candidates_reproducibly():
    wide = {"cov_high": 7.0}  # candidates (0,2) and (1,1); one token drawn
    picks = set()
    for seed in range(12):
        first = run("clip_cov", seed=seed, **wide)[1]
        assert run("clip_cov", seed=seed, **wide)[1] == first  # same seed, same draw
        zero = {k for k in [(0, 2), (1, 1)] if first[k[0]][k[1]] == 0}
        assert len(zero) == 1
        picks |= zero
    assert picks == {(0, 2), (1, 1)}  # both are drawn for some seed
    _, grad, metrics = run("clip_cov", cov_clip_ratio=0.2, **wide)  # floor(2.2) = 2 tokens
    assert_grad(grad, clip_cov_reference({(0, 2), (1, 1)})[1])
    assert metrics["cov_clip_frac"] == pytest.approx(2 / N)


# --- kl_cov --------------------------------------------------------------------------------


def test_kl_cov_penalises_the_top_k_covariance_tokens():
    cov = covariances()
    top = sorted((k for k in cov if cov[k] > 0), key=cov.get, reverse=True)[:2]
    assert top == [(1, 1), (0, 0)]
    loss, grad, metrics = run("kl_cov", kl_cov_ratio=0.2, kl_coef=0.7)  # floor(2.2) = 2
    want_loss, want_grad, penalty = 0.0, {}, 0.0
    for i, t in TOKENS:
        a, d = ADV[i], D[i][t]
        r = math.exp(d)
        pen = 0.7 * abs(d) if (i, t) in top else 0.0
        want_loss += (-r * a + pen) / N
        penalty += pen / N
        sign = (d > 0) - (d < 0)
        want_grad[(i, t)] = (-r * a + (0.7 * sign if (i, t) in top else 0.0)) / N
    assert loss == pytest.approx(want_loss, abs=1e-12)
    assert_grad(grad, want_grad)
    assert metrics["kl_cov_frac"] == pytest.approx(2 / N)
    assert metrics["kl_cov_penalty"] == pytest.approx(penalty)
    assert metrics["kl_cov_acting_frac"] == pytest.approx(2 / N)  # d = 0.1 and 0.9, not 0
    _, default_grad, default_metrics = run("kl_cov")  # max(floor(0.022), 1) = 1 token
    assert default_metrics["kl_cov_frac"] == pytest.approx(1 / N)
    assert default_grad[1][1] == pytest.approx((-math.exp(0.1) * -2.5 + 1.0) / N)


def test_kl_cov_penalises_no_token_when_no_covariance_is_positive():
    batch, _ = hand_batch(adv=[0.0, 0.0, 0.0])
    out = get_algorithm("kl_cov").loss(batch)
    assert out.metrics["kl_cov_frac"] == 0 and float(out.loss.detach()) == 0
    assert out.metrics["kl_cov_acting_frac"] == 0


# --- the token_selection relaxations still catch broken plugins ---------------------------


@dataclasses.dataclass
class NoConfig:
    pass


class SelectsAndDetaches(Algorithm):
    """Zeroes the first token of every response and reports how many it zeroed."""

    name = "test-selects"
    config_class = NoConfig
    aggregation = "token_mean"
    clip_style = "none"
    token_selection = "selected_frac"
    reported = 1.0

    def loss(self, batch: TrainBatch) -> LossOutput:
        keep = torch.ones_like(batch.mask)
        keep[:, 0] = 0.0
        per_token = -torch.exp(log_ratio(batch)) * batch.token_advantages * keep
        selected = float(((keep == 0) & (batch.mask > 0)).sum()) / max(float(batch.mask.sum()), 1)
        return LossOutput(
            aggregate(per_token, batch, self.aggregation),
            {"selected_frac": selected * self.reported},
        )


class UnderReportsItsSelection(SelectsAndDetaches):
    reported = 0.5


class SelectsWithLocalCounts(SelectsAndDetaches):
    def loss(self, batch: TrainBatch) -> LossOutput:
        out = super().loss(batch)
        local = dataclasses.replace(batch, num_tokens=int(batch.mask.sum()))
        share = local.num_tokens / max(batch.num_tokens, 1)
        return LossOutput(out.loss / share if share else out.loss, out.metrics)


def test_an_honest_selecting_plugin_passes():
    results = {r.name: r for r in run_conformance(SelectsAndDetaches)}
    assert results["reinforce_on_policy"].passed is True
    assert results["micro_batching"].passed is True


@pytest.mark.parametrize(
    ("plugin", "caught_by"),
    [(UnderReportsItsSelection, "reinforce_on_policy"), (SelectsWithLocalCounts, "micro_batching")],
)
def test_the_relaxed_checks_still_catch(plugin, caught_by):
    results = {r.name: r for r in run_conformance(plugin)}
    assert results[caught_by].passed is False, results[caught_by].detail

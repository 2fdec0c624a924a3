"""The built-in algorithms against docs/algorithms.md: defaults, configuration errors,
advantages, DAPO's reward shaping and dynamic sampling, and each loss's value and
gradient on hand-specified batches against plain-Python references (math.exp, min, a
hand-written sigmoid; gradients derived analytically), with clips, caps and gates binding.
grpo's own numbers are in tests/test_grpo.py; the generic invariants in
tests/test_conformance.py."""

from __future__ import annotations

import dataclasses
import math
import re
import sys

import pytest
import torch

from zoo.algorithms import ALGORITHMS, get_algorithm, list_algorithms
from zoo.core.config import ConfigError, field_docs
from zoo.core.types import TrainBatch

BUILTINS = [
    "grpo",
    "dr_grpo",
    "dapo",
    "cispo",
    "gspo",
    "sapo",
    "custom",
    "rloo",
    "reinforce_pp",
    "opo",
]
GROUP_NORM_K3 = {"advantage": "group_norm", "kl": "k3"}
ENTROPY_OFF = {"entropy_coef": 0.0, "entropy_top_share": 1.0}  # zoo/core/entropy.py
PPO_CLIP = {"loss": "ppo_clip"}  # zoo.core.losses.POLICY_LOSSES

DEFAULTS = {  # docs/algorithms.md, "The built-ins"
    "grpo": {"eps": 0.2, "beta": 0.04, **GROUP_NORM_K3, **PPO_CLIP, **ENTROPY_OFF},
    "dr_grpo": {
        "clip_low": 0.8,
        "clip_high": 1.2,
        "beta": 0.0,
        "advantage": "group_center",
        "kl": "k3",
        **PPO_CLIP,
        **ENTROPY_OFF,
    },
    "dapo": {
        "eps_low": 0.2,
        "eps_high": 0.28,
        "beta": 0.0,
        "overlong_punishment": True,
        "overlong_cache": None,
        "overlong_filtering": False,
        **GROUP_NORM_K3,
        **PPO_CLIP,
        **ENTROPY_OFF,
    },
    "cispo": {"eps_high": 4.0, "beta": 0.0, **GROUP_NORM_K3},
    "gspo": {"eps_low": 3e-4, "eps_high": 4e-4, "beta": 0.0, "token_level": False, **GROUP_NORM_K3},
    "sapo": {"tau_pos": 1.0, "tau_neg": 1.05, "beta": 0.0, **GROUP_NORM_K3},
    "custom": {"clip_range": 0.2, "beta": 0.1, **GROUP_NORM_K3, "dual_clip": 0.0},
    "rloo": {"eps": 0.2, "beta": 0.0, "advantage": "rloo", "kl": "k3", **PPO_CLIP, **ENTROPY_OFF},
    "reinforce_pp": {
        "eps": 0.2,
        "beta": 0.01,
        "advantage": "reinforce_pp",
        "kl": "k1",
        **PPO_CLIP,
        "kl_in_reward": True,
        "whiten": "response",
        **ENTROPY_OFF,
    },
    "opo": {"eps": 0.2, "beta": 0.0, "advantage": "opo", "kl": "k3", **PPO_CLIP, **ENTROPY_OFF},
}
AGGREGATION = {
    "grpo": "seq_mean",
    "dr_grpo": "fixed",
    "dapo": "token_mean",
    "cispo": "token_mean",
    "gspo": "seq_mean",
    "sapo": "seq_mean",
    "custom": "seq_mean",
    "rloo": "seq_mean",
    "reinforce_pp": "token_mean",
    "opo": "token_mean",
}

# --- the hand batch (token-level algorithms) -----------------------------------------------
# B = 4, T = 5; row 2 has no response tokens; padding holds junk (huge ratios) that must
# not count. D is the log-ratio lp - old; the comments give r = exp(D) and A.
L_MAX = 6
LP = [
    [-0.50, -1.20, -0.30, -2.10, -9.0],
    [-0.70, -2.00, -0.90, -9.00, -9.0],
    [-1.00, -1.00, -1.00, -1.00, -1.0],
    [-0.20, -1.50, -0.05, -0.80, -9.0],
]
D = [
    [0.0, 0.3, 0.2, 1.7, 11.0],  # A=+1.5: r = 1, 1.350, 1.221, 5.474 (above CISPO's cap 5)
    [-0.4, 0.1, 0.3, 11.0, 11.0],  # A=-0.8: r = 0.670 (below 0.8), 1.105, 1.350
    [11.0] * 5,  # A=+2.0, empty
    [-0.3, -0.05, 0.25, 0.0, 11.0],  # A=+0.6: r = 0.741, 0.951, 1.284 (just above 1.28), 1
]
OLD = [[lp - d for lp, d in zip(lps, ds, strict=True)] for lps, ds in zip(LP, D, strict=True)]
REF = [
    [-0.40, -1.00, -0.60, -2.00, 3.0],
    [-0.50, -2.50, -0.70, 3.00, 3.0],
    [-1.00, -1.00, -1.00, -1.00, 3.0],
    [-0.10, -1.70, -0.30, -1.00, 3.0],
]
ADV = [1.5, -0.8, 2.0, 0.6]
MASK = [[1, 1, 1, 1, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 0]]
RESPONSE = [(i, t) for i, row in enumerate(MASK) for t, m in enumerate(row) if m]


def batch_of(lp, old, ref, adv, mask, **extra) -> TrainBatch:
    def f64(x):
        return torch.tensor(x, dtype=torch.float64)

    return TrainBatch(lp, f64(old), None if ref is None else f64(ref), f64(adv), f64(mask), **extra)


def run(name: str, **overrides):
    """Loss, gradient and metrics of ``name`` on the hand batch."""
    algo = get_algorithm(name, **overrides)
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    ref = REF if algo.needs_reference else None
    out = algo.loss(batch_of(lp, OLD, ref, ADV, MASK, max_response_len=L_MAX))
    out.loss.backward()
    return float(out.loss.detach()), lp.grad.tolist(), out.metrics


# --- plain-Python references: (value, d value / d lp) of one token --------------------------


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def ppo_clip(r: float, a: float, low: float, high: float) -> tuple[float, float]:
    """-min(r A, clip(r) A); dr/dlp = r, and the clipped branch is constant in lp."""
    unclipped, clipped = r * a, min(max(r, low), high) * a
    return -min(unclipped, clipped), (-a * r if unclipped <= clipped else 0.0)


def k3(lp: float, ref: float) -> tuple[float, float]:
    """exp(ref - lp) - (ref - lp) - 1 and its derivative 1 - exp(ref - lp)."""
    return math.exp(ref - lp) - (ref - lp) - 1, 1 - math.exp(ref - lp)


def with_kl(beta: float, low: float, high: float):
    def token(lp, r, ref, a):
        (v, g), (kv, kg) = ppo_clip(r, a, low, high), k3(lp, ref)
        return v + beta * kv, g + beta * kg

    return token


def cispo_token(lp, r, ref, a):
    """-sg(min(r, 5)) A lp: the weight is a constant for the gradient."""
    w = min(r, 5.0)
    return -w * a * lp, -w * a


def sapo_token(lp, r, ref, a):
    """-f(r) A, f = sigmoid(tau (r - 1)) 4 / tau; df/dlp = 4 p (1 - p) r."""
    tau = 1.0 if a > 0 else 1.05
    p = sigmoid(tau * (r - 1))
    return -p * 4 / tau * a, -a * 4 * p * (1 - p) * r


TOKEN_RULES = {
    "grpo": (with_kl(0.04, 0.8, 1.2), "seq_mean"),
    "dr_grpo": (lambda lp, r, ref, a: ppo_clip(r, a, 0.8, 1.2), "fixed"),
    "dapo": (lambda lp, r, ref, a: ppo_clip(r, a, 0.8, 1.28), "token_mean"),
    "cispo": (cispo_token, "token_mean"),
    "sapo": (sapo_token, "seq_mean"),
    "custom": (with_kl(0.1, 0.8, 1.2), "seq_mean"),
}


def token_weight(i: int, mode: str) -> float:
    """d loss / d l_it of the aggregation mode, on the hand batch."""
    counted = [row for row in MASK if sum(row)]
    if mode == "seq_mean":
        return 1 / (sum(MASK[i]) * len(counted))
    if mode == "token_mean":
        return 1 / sum(map(sum, counted))
    return 1 / (len(counted) * L_MAX)  # fixed


def reference(name: str):
    rule, mode = TOKEN_RULES[name]
    loss, grad = 0.0, [[0.0] * len(LP[0]) for _ in LP]
    for i, t in RESPONSE:
        r = math.exp(LP[i][t] - OLD[i][t])
        value, g = rule(LP[i][t], r, REF[i][t], ADV[i])
        loss += token_weight(i, mode) * value
        grad[i][t] = token_weight(i, mode) * g
    return loss, grad


# --- registry, defaults, configuration -----------------------------------------------------


def test_every_builtin_is_registered():
    assert set(BUILTINS) <= set(list_algorithms())


@pytest.mark.parametrize("name", BUILTINS)
def test_defaults_and_aggregation_are_those_of_algorithms_md(name):
    algo = get_algorithm(name)
    assert dataclasses.asdict(algo.config) == DEFAULTS[name]
    assert algo.aggregation == AGGREGATION[name]
    assert algo.needs_reference is (DEFAULTS[name]["beta"] > 0)


@pytest.mark.parametrize("name", BUILTINS)
def test_every_config_field_has_a_docstring_and_the_module_cites_the_paper(name):
    cls = ALGORITHMS.load(name)
    docs = field_docs(cls.config_class)
    assert set(docs) == set(DEFAULTS[name]), (
        f"undocumented fields: {set(DEFAULTS[name]) - set(docs)}"
    )
    arxiv = re.search(r"\d{4}\.\d{5}", cls.paper).group()
    assert arxiv in sys.modules[cls.__module__].__doc__


@pytest.mark.parametrize("name", BUILTINS)
def test_unknown_override_raises_config_error_naming_valid_fields(name):
    with pytest.raises(ConfigError) as err:
        get_algorithm(name, not_a_field=1)
    message = str(err.value)
    assert "not_a_field" in message
    for field in DEFAULTS[name]:
        assert field in message


# group_center 1/2; group_norm and batch norm 0.5 / std([1, 0, 0, 1]) = 0.866; leave-one-out
# 1 - 1/3 = 2/3; opo with equal lengths = group_center
SIZE_1001 = {"dr_grpo": 0.5, "rloo": 2 / 3, "opo": 0.5}


@pytest.mark.parametrize("name", BUILTINS)
def test_advantages_of_1001(name):
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    adv = get_algorithm(name).group_advantages(rewards, torch.full((1, 4), 3))
    size = SIZE_1001.get(name, 0.866024)
    assert adv[0].tolist() == pytest.approx([size, -size, -size, size], abs=1e-6)


# --- loss value and gradient against the plain-Python references ---------------------------


@pytest.mark.parametrize("name", list(TOKEN_RULES))
def test_loss_and_gradient_match_plain_python(name):
    loss, grad, _ = run(name)
    want_loss, want_grad = reference(name)
    assert loss == pytest.approx(want_loss, rel=1e-12, abs=1e-14)
    assert grad == [pytest.approx(row, rel=1e-12, abs=1e-14) for row in want_grad]


@pytest.mark.parametrize(
    ("name", "binding"),
    [
        # r > 1.2 with A > 0 at (0,1) (0,2) (0,3) (3,2); r = 0.67 < 0.8 with A < 0 at (1,0)
        ("dr_grpo", {(0, 1), (0, 2), (0, 3), (3, 2), (1, 0)}),
        ("custom", {(0, 1), (0, 2), (0, 3), (3, 2), (1, 0)}),
        # Clip-Higher: r = 1.221 at (0,2) is inside DAPO's 1.28, r = 1.284 at (3,2) is not
        ("dapo", {(0, 1), (0, 3), (3, 2), (1, 0)}),
    ],
)
def test_clip_zeroes_the_gradient_exactly_where_it_binds(name, binding):
    _, grad, _ = run(name, beta=0.0)
    for i, t in RESPONSE:
        assert (grad[i][t] == 0.0) == ((i, t) in binding), (i, t, grad[i][t])


def test_cispo_caps_the_weight_at_5_and_keeps_the_gradient():
    _, grad, metrics = run("cispo")
    n_tokens = len(RESPONSE)
    assert grad[0][3] == pytest.approx(-5.0 * 1.5 / n_tokens, rel=1e-12)  # r = 5.47, capped
    assert grad[0][1] == pytest.approx(-math.exp(0.3) * 1.5 / n_tokens, rel=1e-12)
    assert metrics["capped_frac"] == pytest.approx(1 / n_tokens)


def test_sapo_gradient_weight_is_4p_1_minus_p_and_1_at_r_equal_1():
    _, grad, _ = run("sapo")
    n_seq = 3
    for i, t in RESPONSE:
        r, a = math.exp(D[i][t]), ADV[i]
        p = sigmoid((1.0 if a > 0 else 1.05) * (r - 1))
        plain_gradient = -a * r / (sum(MASK[i]) * n_seq)  # d(-r A)/dlp under seq_mean
        assert grad[i][t] / plain_gradient == pytest.approx(4 * p * (1 - p), rel=1e-10)
    assert grad[0][0] / (-1.5 / (4 * n_seq)) == pytest.approx(1.0, rel=1e-12)  # r = 1
    assert grad[0][3] / (-1.5 * math.exp(1.7) / (4 * n_seq)) < 0.05  # r = 5.47: gated off


RATIO = {"loss", "ratio_mean", "ratio_max"}
CLIP = {"clip_low_frac", "clip_high_frac", "clip_low_acting_frac", "clip_high_acting_frac"}
SEQ_CLIP = {f"seq_{k}" for k in CLIP}


@pytest.mark.parametrize(
    ("name", "keys"),
    [
        ("grpo", RATIO | CLIP | {"kl"}),
        ("dr_grpo", RATIO | CLIP),
        ("dapo", RATIO | CLIP),
        ("cispo", RATIO | {"capped_frac", "capped_acting_frac"}),
        ("gspo", RATIO | CLIP | SEQ_CLIP),
        ("sapo", RATIO | {"gate_weight_mean", "gate_weight_q05", "gate_acting_frac"}),
        ("custom", RATIO | CLIP | {"kl"}),
    ],
)
def test_metrics_each_loss_reports(name, keys):
    loss, _, metrics = run(name)
    assert set(metrics) == keys
    assert metrics["loss"] == loss
    ratios = [math.exp(D[i][t]) for i, t in RESPONSE]
    if name != "gspo":  # gspo reports its sequence ratio
        assert metrics["ratio_mean"] == pytest.approx(sum(ratios) / len(ratios), rel=1e-12)
        assert metrics["ratio_max"] == pytest.approx(max(ratios), rel=1e-12)
    if name == "dapo":  # r > 1.28 at (0,1) (0,3) (1,2) (3,2); r < 0.8 at (1,0) (3,0)
        assert metrics["clip_high_frac"] == pytest.approx(4 / 11)
        assert metrics["clip_low_frac"] == pytest.approx(2 / 11)
        # acting, where the gradient is zeroed: (1,2) has A < 0 and (3,0) A > 0
        assert metrics["clip_high_acting_frac"] == pytest.approx(3 / 11)
        assert metrics["clip_low_acting_frac"] == pytest.approx(1 / 11)
    if name == "cispo":  # (0,3) at r = 5.47 with A = 1.5: capped and acting
        assert metrics["capped_frac"] == metrics["capped_acting_frac"] == pytest.approx(1 / 11)


def test_kl_is_added_as_beta_times_k3():
    loss_kl, _, metrics = run("custom")
    loss_no_kl, _, _ = run("custom", beta=0.0)
    k3_mean = sum(k3(LP[i][t], REF[i][t])[0] / sum(MASK[i]) for i, t in RESPONSE) / 3
    assert loss_kl - loss_no_kl == pytest.approx(0.1 * k3_mean, rel=1e-10)
    assert metrics["kl"] == pytest.approx(
        sum(k3(LP[i][t], REF[i][t])[0] for i, t in RESPONSE) / 11, rel=1e-12
    )


# --- GSPO: sequence ratio, its own batch (its clip is 3e-4 / 4e-4 wide) --------------------

G_LP = [
    [-0.5, -1.0, -0.2, -7.0],
    [-0.3, -2.0, -0.9, -7.0],
    [-1.0, -1.0, -1.0, -1.0],
    [-0.6, -0.4, -7.0, -7.0],
    [-1.2, -0.1, -0.7, -7.0],
    [-0.8, -1.1, -7.0, -7.0],
]
G_D = [
    [3e-4, -1e-4, 1e-4, 9.0],  # A=+1.5: mean 1e-4, s = 1.0001, inside the clip
    [1e-3, 2e-4, 0.0, 9.0],  # A=+0.6: mean 4e-4, s = 1.00040008 > 1.0004: clip binds
    [9.0] * 4,  # empty
    [-5e-4, -5e-4, 9.0, 9.0],  # A=-0.8: s = 0.9995 < 0.9997: clip binds
    [0.01, -0.01, 3e-4, 9.0],  # A=-1.1: mean 1e-4, inside (tokens far apart, mean small)
    [0.01, 0.01, 9.0, 9.0],  # A=-0.5: s = 1.01 above the clip, but A < 0: unclipped
]
G_OLD = [[lp - d for lp, d in zip(a, b, strict=True)] for a, b in zip(G_LP, G_D, strict=True)]
G_ADV = [1.5, 0.6, 2.0, -0.8, -1.1, -0.5]
G_MASK = [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0]]


def gspo_reference():
    """l_i = -min(s A, clip(s, 1 - 3e-4, 1 + 4e-4) A), loss = mean over the 5 responses;
    d l_i / d lp_it = -A s / |o_i| when unclipped (ds/dlp_it = s / |o_i|), else 0."""
    loss, grad = 0.0, [[0.0] * 4 for _ in G_LP]
    for i, row in enumerate(G_MASK):
        n = sum(row)
        if not n:
            continue
        s = math.exp(sum(G_LP[i][t] - G_OLD[i][t] for t in range(n)) / n)
        value, g = ppo_clip(s, G_ADV[i], 1 - 3e-4, 1 + 4e-4)
        loss += value / 5
        for t in range(n):
            grad[i][t] = g / n / 5  # ppo_clip's g = -A s is d l_i / d log s_i
    return loss, grad


def run_gspo(**overrides):
    lp = torch.tensor(G_LP, dtype=torch.float64, requires_grad=True)
    out = get_algorithm("gspo", **overrides).loss(batch_of(lp, G_OLD, None, G_ADV, G_MASK))
    out.loss.backward()
    return float(out.loss.detach()), lp.grad.tolist()


@pytest.mark.parametrize("token_level", [False, True])
def test_gspo_loss_and_gradient_match_plain_python(token_level):
    loss, grad = run_gspo(token_level=token_level)
    want_loss, want_grad = gspo_reference()
    assert loss == pytest.approx(want_loss, rel=1e-12)
    assert grad == [pytest.approx(row, rel=1e-9, abs=1e-15) for row in want_grad]
    assert grad[1][:3] == [0.0] * 3 and grad[3][:2] == [0.0] * 2  # the clip binds
    assert all(g != 0.0 for g in grad[0][:3] + grad[4][:3] + grad[5][:2])


def test_gspo_token_equals_gspo_in_value_and_gradient_for_per_sequence_advantages():
    g = torch.Generator().manual_seed(0)
    lp0 = -3 * torch.rand(8, 6, generator=g, dtype=torch.float64)
    old = lp0 - 4e-4 * torch.randn(8, 6, generator=g, dtype=torch.float64)
    adv = torch.randn(8, generator=g, dtype=torch.float64)
    mask = (torch.rand(8, 6, generator=g) < 0.7).double()
    results = []
    for token_level in (False, True):
        lp = lp0.clone().requires_grad_(True)
        out = get_algorithm("gspo", token_level=token_level).loss(
            TrainBatch(lp, old, None, adv, mask)
        )
        out.loss.backward()
        results.append((out.loss.detach(), lp.grad))
    (seq_loss, seq_grad), (tok_loss, tok_grad) = results
    assert torch.allclose(tok_loss, seq_loss, rtol=1e-13, atol=0)
    assert torch.allclose(tok_grad, seq_grad, rtol=1e-12, atol=1e-16)
    assert (seq_grad == 0).any() and (seq_grad != 0).any()  # some clipped, some not


# --- DAPO: dynamic sampling and the soft overlong punishment --------------------------------


def test_dapo_keep_drops_groups_whose_rewards_are_all_equal():
    rewards = torch.tensor(
        [
            [1.0, 1.0, 1.0, 1.0],
            [0.0, 0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0, 1.0],
            [0.5, 0.5, 0.5, 0.5],
            [0.0, 0.0, 0.0, 1.0],
            [-0.25, -0.25, -0.5, -0.25],
        ]
    )
    keep = get_algorithm("dapo").keep(rewards)
    assert keep.tolist() == [False, False, True, False, True, True]


def soft_overlong(length: int, l_max: int, l_cache: float) -> float:
    """DAPO eq. 13, the three pieces as written."""
    if length <= l_max - l_cache:
        return 0.0
    if length <= l_max:
        return ((l_max - l_cache) - length) / l_cache
    return -1.0


@pytest.mark.parametrize(
    ("l_max", "lengths", "expected"),
    [
        # default L_cache = 8 / 4 = 2: boundary 6 -> 0, between 7 -> -0.5, 8 -> -1, 9 -> -1
        (8, [0, 3, 6, 7, 8, 9], [0.0, 0.0, 0.0, -0.5, -1.0, -1.0]),
        # L_cache = 1.5: boundary 4.5 falls between tokens; 5 -> -1/3, 6 -> -1
        (6, [4, 5, 6, 7], [0.0, -1 / 3, -1.0, -1.0]),
    ],
)
def test_dapo_soft_overlong_punishment_is_added_to_the_task_reward(l_max, lengths, expected):
    rewards = torch.tensor([[1.0, 0.0, 0.5, -1.0, 1.0, 0.25][: len(lengths)]] * 2)
    shaped = get_algorithm("dapo").shape_rewards(rewards, torch.tensor([lengths] * 2), l_max)
    plain = [soft_overlong(n, l_max, l_max / 4) for n in lengths]
    assert plain == pytest.approx(expected)
    assert (shaped - rewards).tolist() == [pytest.approx(plain, abs=1e-7)] * 2


def test_dapo_overlong_cache_override_and_switch_off():
    rewards, lengths = torch.zeros(1, 4), torch.tensor([[4, 5, 7, 8]])
    shaped = get_algorithm("dapo", overlong_cache=4).shape_rewards(rewards, lengths, 8)
    assert shaped[0].tolist() == pytest.approx([soft_overlong(n, 8, 4) for n in (4, 5, 7, 8)])
    assert shaped[0].tolist() == pytest.approx([0.0, -0.25, -0.75, -1.0])
    off = get_algorithm("dapo", overlong_punishment=False).shape_rewards(rewards, lengths, 8)
    assert torch.equal(off, rewards)


def reference_lengths(env_name: str) -> torch.Tensor:
    """Token counts (the tiny models' byte tokens, plus the end-of-text token) of the
    reference answers of every held-out prompt and 4000 train prompts of an env."""
    from zoo.envs import get_env

    env = get_env(env_name)
    prompts = env.eval_prompts() + env.train_prompts(0, 4000, seed=0)
    return torch.tensor([[len(env.reference_answer(p).encode()) + 1 for p in prompts]])


# (env, the generation budget its tiny-model commands use: docs/running.md, leaderboards)
DOCUMENTED_BUDGETS = [("arithmetic", 6), ("pyfunc", 12)]


@pytest.mark.parametrize(("env_name", "l_max"), DOCUMENTED_BUDGETS)
def test_dapo_overlong_punishment_spares_every_reference_answer(env_name, l_max):
    lengths = reference_lengths(env_name)
    rewards = torch.ones(lengths.shape)
    shaped = get_algorithm("dapo").shape_rewards(rewards, lengths, l_max)
    assert torch.equal(shaped, rewards), f"{env_name}: longest answer {int(lengths.max())} tokens"


def test_dapo_overlong_punishment_spares_every_reference_tool_episode():
    """tool_arithmetic at its documented 16 tokens a turn: a correct episode (the calculator
    call, its result, the answer) against the episode's token limit, which DAPO's length
    shaping sees in a multi-turn env."""
    from zoo.envs import get_env
    from zoo.run.episodes import episode_budget
    from zoo.run.run_config import RunConfig

    env = get_env("tool_arithmetic")
    prompts = env.eval_prompts() + env.train_prompts(0, 4000, seed=0)

    # byte tokens; each assistant turn ends with its end-of-text token
    def tokens(p) -> int:
        return sum(len(turn.encode()) + 1 + len(obs.encode()) for turn, obs in env.tool_trace(p))

    lengths = torch.tensor([[tokens(p) for p in prompts]])
    budget = episode_budget(RunConfig.from_flat(env="tool_arithmetic", max_response_len=16), env)
    rewards = torch.ones(lengths.shape)
    shaped = get_algorithm("dapo").shape_rewards(rewards, lengths, budget)
    assert torch.equal(shaped, rewards), f"longest episode {int(lengths.max())} of {budget} tokens"


def test_dapo_overlong_punishment_at_pyfunc_old_budget_punished_correct_answers():
    """The budget of 9 tokens that pyfunc's leaderboard used to run with put its longest
    correct answers inside the window: the reason the budget is now 12."""
    lengths = reference_lengths("pyfunc")
    shaped = get_algorithm("dapo").shape_rewards(torch.ones(lengths.shape), lengths, 9)
    assert (shaped < 1).float().mean() > 0.3


@pytest.mark.parametrize("cache", [0, -1.0, 9])
def test_dapo_overlong_cache_outside_0_to_l_max_is_a_config_error(cache):
    algo = get_algorithm("dapo", overlong_cache=cache)
    with pytest.raises(ConfigError, match="overlong_cache"):
        algo.shape_rewards(torch.zeros(1, 2), torch.tensor([[1, 2]]), 8)


@pytest.mark.parametrize("name", [n for n in BUILTINS if n != "dapo"])
def test_other_builtins_neither_shape_rewards_nor_drop_groups(name):
    algo = get_algorithm(name)
    rewards = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    assert torch.equal(algo.shape_rewards(rewards, torch.tensor([[9, 9], [9, 9]]), 4), rewards)
    assert algo.keep(rewards).tolist() == [True, True]


def test_dapo_overlong_filtering_masks_only_truncated_responses_when_on():
    truncated = torch.tensor([[True, False], [False, False]])
    assert get_algorithm("dapo").train_mask(truncated).all()
    kept = get_algorithm("dapo", overlong_filtering=True).train_mask(truncated)
    assert kept.tolist() == [[False, True], [True, True]]

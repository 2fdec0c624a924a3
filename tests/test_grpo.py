"""The grpo plugin against docs/algorithms.md ("grpo" and "Invariants every loss must
satisfy"), with an independent plain-Python reference for value and gradient."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.algorithms import get_algorithm, list_algorithms
from zoo.core.config import ConfigError
from zoo.core.types import TrainBatch

EPS, BETA = 0.2, 0.04

# Hand-specified batch, B=4, T=4. d = lp - old is the log-ratio; the comments say which
# branch of min(r*A, clip(r)*A) is taken. Row 2 has no response tokens; padding carries
# junk values (huge ratios) that must not count.
LP = [
    [-0.50, -1.20, -0.30, -9.00],  # A=+1.5
    [-0.70, -2.00, -0.90, -0.10],  # A=-0.8
    [-1.00, -1.00, -1.00, -1.00],  # empty sequence, A=+2.0
    [-0.20, -1.50, -0.05, -3.00],  # A=+0.6
]
OLD = [
    [-0.50, -1.50, -0.25, -20.0],  # d=0 (r=1), d=0.3 (r=1.35 > 1.2: clip binds, grad 0), d=-0.05
    [-0.30, -2.10, -1.20, -0.10],  # d=-0.4 (r=0.67 < 0.8: clip binds, grad 0), d=0.1, d=0.3
    [-5.00, -5.00, -5.00, -5.00],  # all padding
    [0.10, -1.45, -0.25, -3.00],  # d=-0.3 (r=0.74, A>0: unclipped), d=-0.05, d=0.2 (1.22: 0 grad)
]
REF = [
    [-0.40, -1.00, -0.60, -1.00],
    [-0.50, -2.50, -0.70, -1.00],
    [-1.00, -1.00, -1.00, -1.00],
    [-0.10, -1.70, -0.30, -1.00],
]
ADV = [1.5, -0.8, 2.0, 0.6]
MASK = [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 0]]
BINDING = [(0, 1), (1, 0), (3, 2)]  # (row, token) where the clip binds -> policy grad 0


def reference_token(lp: float, old: float, ref: float, a: float, eps: float, beta: float):
    """Per-token loss and d(loss)/d(lp) in plain Python.

    l = -min(r A, clip(r, 1-eps, 1+eps) A) + beta (exp(ref - lp) - (ref - lp) - 1).
    d/dlp of r is r; the clipped branch is constant in lp outside [1-eps, 1+eps], so the
    policy term's derivative is -A r when the unclipped branch is the min and 0 otherwise.
    d/dlp of the k3 term is 1 - exp(ref - lp).
    """
    r = math.exp(lp - old)
    clipped = min(max(r, 1 - eps), 1 + eps)
    unclipped_term, clipped_term = r * a, clipped * a
    value = -min(unclipped_term, clipped_term)
    grad = -a * r if unclipped_term <= clipped_term else 0.0
    kl = math.exp(ref - lp) - (ref - lp) - 1
    return value + beta * kl, grad + beta * (1 - math.exp(ref - lp))


def reference_seq_mean(eps: float, beta: float):
    """seq_mean: (1/B) sum_i (1/|o_i|) sum_t l_it over sequences with response tokens."""
    counted = [i for i, m in enumerate(MASK) if sum(m)]
    loss = 0.0
    grad = [[0.0] * len(MASK[0]) for _ in MASK]
    for i in counted:
        n = sum(MASK[i])
        for t, m in enumerate(MASK[i]):
            if not m:
                continue
            v, g = reference_token(LP[i][t], OLD[i][t], REF[i][t], ADV[i], eps, beta)
            loss += v / n / len(counted)
            grad[i][t] = g / n / len(counted)
    return loss, grad


def hand_batch(lp: torch.Tensor, with_ref: bool = True) -> TrainBatch:
    return TrainBatch(
        logprobs=lp,
        old_logprobs=torch.tensor(OLD, dtype=lp.dtype),
        ref_logprobs=torch.tensor(REF, dtype=lp.dtype) if with_ref else None,
        advantages=torch.tensor(ADV, dtype=lp.dtype),
        mask=torch.tensor(MASK, dtype=lp.dtype),
    )


def random_batch(seed: int, B: int = 5, T: int = 6, on_policy: bool = False):
    g = torch.Generator().manual_seed(seed)
    lp = (-torch.rand(B, T, generator=g) * 3).double().requires_grad_(True)
    old = lp.detach() if on_policy else lp.detach() + 0.3 * torch.randn(B, T, generator=g).double()
    lengths = [T, 1, 0, 3, T - 1][:B]
    mask = torch.tensor([[1.0] * n + [0.0] * (T - n) for n in lengths], dtype=torch.float64)
    adv = torch.randn(B, generator=g).double()
    return lp, old, mask, adv


def test_grpo_is_registered():
    assert "grpo" in list_algorithms()


def test_defaults_are_eps_0_2_beta_0_04():
    algo = get_algorithm("grpo")
    assert algo.config.eps == 0.2
    assert algo.config.beta == 0.04


def test_string_overrides_are_parsed_to_floats():
    algo = get_algorithm("grpo", eps="0.3", beta="0")
    assert algo.config.eps == 0.3 and isinstance(algo.config.eps, float)
    assert algo.config.beta == 0.0 and isinstance(algo.config.beta, float)


def test_unknown_override_raises_config_error_naming_valid_fields():
    with pytest.raises(ConfigError) as err:
        get_algorithm("grpo", epsilon=0.3)
    message = str(err.value)
    assert "epsilon" in message
    assert "eps" in message.replace("epsilon", "") and "beta" in message


def test_unknown_algorithm_raises_config_error_listing_grpo():
    with pytest.raises(ConfigError, match="grpo"):
        get_algorithm("no-such-algorithm")


def test_loss_and_gradient_match_plain_python_reference_including_binding_clips():
    algo = get_algorithm("grpo")
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    out = algo.loss(hand_batch(lp))
    out.loss.backward()

    want_loss, want_grad = reference_seq_mean(EPS, BETA)
    assert float(out.loss.detach()) == pytest.approx(want_loss, rel=1e-10, abs=1e-12)
    assert lp.grad.tolist() == [pytest.approx(row, abs=1e-12) for row in want_grad]


def test_binding_clip_gives_zero_gradient_for_positive_and_negative_advantages():
    algo = get_algorithm("grpo", beta=0.0)
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    algo.loss(hand_batch(lp, with_ref=False)).loss.backward()
    for i, t in BINDING:
        assert lp.grad[i, t] == 0.0, (i, t)
    # and the non-binding response tokens do get a gradient
    for i, row in enumerate(MASK):
        for t, m in enumerate(row):
            if m and (i, t) not in BINDING and ADV[i] != 0:
                assert lp.grad[i, t] != 0.0, (i, t)


def test_loss_without_kl_matches_plain_python_reference():
    algo = get_algorithm("grpo", beta=0.0, eps=0.25)
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    out = algo.loss(hand_batch(lp, with_ref=False))
    out.loss.backward()
    want_loss, want_grad = reference_seq_mean(0.25, 0.0)
    assert float(out.loss.detach()) == pytest.approx(want_loss, rel=1e-10, abs=1e-12)
    assert lp.grad.tolist() == [pytest.approx(row, abs=1e-12) for row in want_grad]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_policy_beta0_gradient_equals_reinforce_surrogate_under_seq_mean(seed):
    lp, old, mask, adv = random_batch(seed, on_policy=True)
    algo = get_algorithm("grpo", beta=0.0)
    algo.loss(TrainBatch(lp, old, None, adv, mask)).loss.backward()
    grad = lp.grad.clone()

    # REINFORCE surrogate -A * lp under seq_mean, written out directly
    lp2 = lp.detach().clone().requires_grad_(True)
    lengths = mask.sum(-1)
    counted = lengths > 0
    per_seq = (-adv[:, None] * lp2 * mask).sum(-1)[counted] / lengths[counted]
    (per_seq.sum() / counted.sum()).backward()

    assert torch.allclose(grad, lp2.grad, atol=1e-12)
    assert lp2.grad.abs().sum() > 0


def test_zero_advantages_beta0_give_zero_loss_and_zero_gradient():
    lp, old, mask, _ = random_batch(3)  # off-policy: ratios are not 1
    algo = get_algorithm("grpo", beta=0.0)
    out = algo.loss(TrainBatch(lp, old, None, torch.zeros(lp.shape[0]).double(), mask))
    out.loss.backward()
    assert float(out.loss.detach()) == 0.0
    assert torch.equal(lp.grad, torch.zeros_like(lp))


def test_appending_padding_columns_changes_neither_loss_nor_gradient():
    algo = get_algorithm("grpo")
    lp = torch.tensor(LP, dtype=torch.float64, requires_grad=True)
    out = algo.loss(hand_batch(lp))
    out.loss.backward()

    def pad(rows, value):
        return torch.cat(
            [
                torch.tensor(rows, dtype=torch.float64),
                torch.full((4, 2), value, dtype=torch.float64),
            ],
            dim=1,
        )

    lp_p = pad(LP, -0.01).requires_grad_(True)
    batch = TrainBatch(
        lp_p, pad(OLD, -30.0), pad(REF, 5.0), torch.tensor(ADV, dtype=torch.float64), pad(MASK, 0.0)
    )
    out_p = algo.loss(batch)
    out_p.loss.backward()
    assert float(out_p.loss.detach()) == pytest.approx(float(out.loss.detach()), rel=1e-12)
    assert torch.allclose(lp_p.grad[:, :4], lp.grad, atol=1e-15)
    assert torch.equal(lp_p.grad[:, 4:], torch.zeros(4, 2, dtype=torch.float64))


def test_micro_batched_grpo_gradient_equals_full_batch():
    lp, old, mask, adv = random_batch(4)
    ref = old - 0.2
    algo = get_algorithm("grpo")
    algo.loss(TrainBatch(lp, old, ref, adv, mask)).loss.backward()
    full_grad = lp.grad.clone()

    lp2 = lp.detach().clone().requires_grad_(True)
    n_seq, n_tok = int((mask.sum(-1) > 0).sum()), int(mask.sum())
    for rows in (slice(0, 2), slice(2, None)):
        mb = TrainBatch(
            lp2[rows],
            old[rows],
            ref[rows],
            adv[rows],
            mask[rows],
            num_sequences=n_seq,
            num_tokens=n_tok,
        )
        algo.loss(mb).loss.backward()
    assert torch.allclose(lp2.grad, full_grad, atol=1e-6, rtol=0)


def test_needs_reference_true_at_beta_0_04_false_at_beta_0():
    assert get_algorithm("grpo").needs_reference is True
    assert get_algorithm("grpo", beta=0.04).needs_reference is True
    assert get_algorithm("grpo", beta=0.0).needs_reference is False
    assert get_algorithm("grpo", beta="0").needs_reference is False

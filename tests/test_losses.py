"""zoo.core.losses against docs/algorithms.md, checked with plain-Python arithmetic."""

from __future__ import annotations

import math
import statistics

import pytest
import torch

from zoo.core.config import ConfigError
from zoo.core.losses import aggregate, group_center, group_norm, k3_kl
from zoo.core.types import TrainBatch

MODES = ("seq_mean", "token_mean", "fixed")
L_MAX = 6

# A hand-made [B=4, T=4] batch: row 2 has no response tokens, padding holds junk values
# (which must never count).
PER_TOKEN = [
    [0.5, -1.0, 2.0, 99.0],
    [3.0, 77.0, -55.0, 11.0],
    [13.0, -17.0, 19.0, 23.0],
    [-0.25, 0.75, 1.5, -2.0],
]
MASK = [
    [1, 1, 1, 0],
    [1, 0, 0, 0],
    [0, 0, 0, 0],
    [1, 1, 1, 1],
]


def make_batch(per_token: torch.Tensor, mask: torch.Tensor, **counts) -> TrainBatch:
    return TrainBatch(
        logprobs=per_token,
        old_logprobs=per_token.detach(),
        ref_logprobs=None,
        advantages=torch.zeros(per_token.shape[0]),
        mask=mask,
        max_response_len=L_MAX,
        **counts,
    )


def expected_aggregate(per_token: list[list[float]], mask: list[list[int]], mode: str) -> float:
    """docs/algorithms.md "Aggregation modes", in plain Python. Sequences with no response
    tokens contribute 0 and are not counted."""
    rows = [
        [v for v, m in zip(vals, ms, strict=True) if m]
        for vals, ms in zip(per_token, mask, strict=True)
    ]
    rows = [r for r in rows if r]
    if mode == "seq_mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    if mode == "token_mean":
        return sum(sum(r) for r in rows) / sum(len(r) for r in rows)
    return sum(sum(r) for r in rows) / (len(rows) * L_MAX)


# --- advantages ----------------------------------------------------------------------------


def test_group_norm_of_1001_is_plus_minus_0_866024():
    adv = group_norm(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    expected = [0.866024, -0.866024, -0.866024, 0.866024]
    assert adv.shape == (1, 4)
    assert adv[0].tolist() == pytest.approx(expected, abs=1e-5)


def test_group_norm_matches_unbiased_std_plus_eps_in_plain_python():
    groups = [[0.3, 1.0, -0.5, 0.0, 2.0], [1.0, 0.0, 0.0, 0.0, 0.0]]
    adv = group_norm(torch.tensor(groups, dtype=torch.float64))
    for row, got in zip(groups, adv.tolist(), strict=True):
        mean, std = statistics.fmean(row), statistics.stdev(row)  # stdev is Bessel-corrected
        assert got == pytest.approx([(r - mean) / (std + 1e-6) for r in row], abs=1e-9)


def test_group_center_of_1001_is_plus_minus_half():
    adv = group_center(torch.tensor([[1.0, 0.0, 0.0, 1.0]]))
    assert adv[0].tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5], abs=1e-7)


@pytest.mark.parametrize("estimator", [group_norm, group_center])
def test_all_equal_group_gives_exact_zeros_without_nan(estimator):
    rewards = torch.tensor(
        [[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0], [0.7, 0.7, 0.7, 0.7], [1.0, 0.0, 1.0, 0.0]]
    )
    adv = estimator(rewards)
    assert not torch.isnan(adv).any()
    assert torch.equal(adv[:3], torch.zeros(3, 4))
    assert adv[3].abs().min() > 0  # the mixed group is not zeroed


@pytest.mark.parametrize("estimator", [group_norm, group_center])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_all_equal_fractional_group_gives_exact_zeros(estimator, dtype):
    """Rewards need not be 0/1 (DAPO's overlong punishment, partial credit): every
    all-equal group must still get exactly zero advantages."""
    values = [0.1, 0.2, 0.3, 1 / 3, 0.6, 0.7, 0.9, -0.35]
    for g in (2, 3, 5, 6, 7):
        rewards = torch.tensor([[v] * g for v in values], dtype=dtype)
        adv = estimator(rewards)
        assert torch.equal(adv, torch.zeros_like(adv)), (g, adv.abs().max())


@pytest.mark.parametrize("estimator", [group_norm, group_center])
@pytest.mark.parametrize("shape", [(5, 1), (1, 1), (4,)])
def test_group_of_size_one_raises_config_error(estimator, shape):
    with pytest.raises(ConfigError, match="G >= 2"):
        estimator(torch.ones(shape))


# --- k3 KL ---------------------------------------------------------------------------------


def test_k3_kl_is_zero_at_equal_logprobs():
    lp = torch.tensor([-0.1, -2.5, -7.0, 0.0])
    assert torch.equal(k3_kl(lp, lp.clone()), torch.zeros(4))


def test_k3_kl_matches_exp_d_minus_d_minus_1_in_plain_python():
    lp = [-0.1, -2.5, -7.0, -0.3, -1.0]
    ref = [-0.4, -1.0, -7.5, -0.3, -4.0]
    got = k3_kl(torch.tensor(lp, dtype=torch.float64), torch.tensor(ref, dtype=torch.float64))
    expected = [math.exp(r - p) - (r - p) - 1 for p, r in zip(lp, ref, strict=True)]
    assert got.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert min(got.tolist()) >= 0.0


# --- aggregation ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_matches_plain_python_with_padding_and_an_empty_sequence(mode):
    per_token = torch.tensor(PER_TOKEN, dtype=torch.float64)
    batch = make_batch(per_token, torch.tensor(MASK, dtype=torch.float64))
    assert batch.num_sequences == 3  # the empty sequence is not counted
    assert batch.num_tokens == 8
    got = float(aggregate(per_token, batch, mode))
    assert got == pytest.approx(expected_aggregate(PER_TOKEN, MASK, mode), rel=1e-12)


def test_aggregate_fixed_without_l_max_and_unknown_mode_raise_config_error():
    per_token = torch.tensor(PER_TOKEN)
    batch = make_batch(per_token, torch.tensor(MASK, dtype=torch.float32))
    with pytest.raises(ConfigError, match="seq_mean"):
        aggregate(per_token, batch, "sum")  # type: ignore[arg-type]
    batch.max_response_len = None
    with pytest.raises(ConfigError):
        aggregate(per_token, batch, "fixed")


@pytest.mark.parametrize("mode", MODES)
def test_appending_mask_zero_columns_leaves_aggregate_and_gradient_unchanged(mode):
    torch.manual_seed(0)
    base = torch.randn(4, 4, dtype=torch.float64)
    mask = torch.tensor(MASK, dtype=torch.float64)

    lp = base.clone().requires_grad_(True)
    loss = aggregate(lp.sin() * 3, make_batch(lp, mask), mode)
    loss.backward()

    junk = torch.full((4, 3), 1e3, dtype=torch.float64)
    padded = torch.cat([base, junk], dim=1).requires_grad_(True)
    padded_mask = torch.cat([mask, torch.zeros(4, 3, dtype=torch.float64)], dim=1)
    padded_loss = aggregate(padded.sin() * 3, make_batch(padded, padded_mask), mode)
    padded_loss.backward()

    assert float(padded_loss.detach()) == pytest.approx(float(loss.detach()), rel=1e-12, abs=1e-12)
    assert torch.allclose(padded.grad[:, :4], lp.grad, atol=1e-12)
    assert torch.equal(padded.grad[:, 4:], torch.zeros(4, 3, dtype=torch.float64))


@pytest.mark.parametrize("mode", MODES)
def test_micro_batches_with_whole_batch_counts_sum_to_full_batch_loss_and_gradient(mode):
    torch.manual_seed(1)
    B, T = 6, 5
    base = torch.randn(B, T)
    mask = torch.tensor(
        [
            [1, 1, 1, 0, 0],
            [1, 0, 0, 0, 0],
            [0, 0, 0, 0, 0],
            [1, 1, 1, 1, 1],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 1, 0],
        ],
        dtype=torch.float32,
    )
    weights = torch.randn(B, T)

    def per_token(lp: torch.Tensor, rows: slice) -> torch.Tensor:
        return weights[rows] * lp**2 - lp.exp()

    full = base.clone().requires_grad_(True)
    full_batch = make_batch(full, mask)
    full_loss = aggregate(per_token(full, slice(None)), full_batch, mode)
    full_loss.backward()

    parts = base.clone().requires_grad_(True)
    total = 0.0
    for rows in (slice(0, 2), slice(2, B)):  # the first half holds an unequal share
        lp = parts[rows]
        mb = make_batch(
            lp, mask[rows], num_sequences=full_batch.num_sequences, num_tokens=full_batch.num_tokens
        )
        loss = aggregate(per_token(lp, rows), mb, mode)
        loss.backward()
        total += float(loss.detach())

    assert total == pytest.approx(float(full_loss.detach()), abs=1e-6)
    assert torch.allclose(parts.grad, full.grad, atol=1e-6, rtol=0)
    assert full.grad.abs().sum() > 0


@pytest.mark.parametrize("mode", ["seq_mean", "token_mean", "fixed"])
def test_micro_batches_with_their_own_counts_differ_from_full_batch(mode):
    """The whole-batch counts matter: without them micro-batch losses do not add up (so
    the invariance test above is not vacuous)."""
    base = torch.tensor(PER_TOKEN)
    mask = torch.tensor(MASK, dtype=torch.float32)
    full = float(aggregate(base, make_batch(base, mask), mode))
    split = sum(
        float(aggregate(base[r], make_batch(base[r], mask[r]), mode))
        for r in (slice(0, 1), slice(1, 4))
    )
    assert abs(split - full) > 1e-3

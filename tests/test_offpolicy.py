"""The trainer-sampler gap (zoo/services/offpolicy.py): its metrics and the corrections, each
against a plain-Python computation of its definition, and the group-aligned mini-batch
split the trainer uses (zoo/services/trainer.py)."""

from __future__ import annotations

import math

import pytest
import torch

from zoo.services.offpolicy import CORRECTIONS, correction_weights, mismatch_metrics
from zoo.services.trainer import combine_updates, mini_batch_slices

# two responses of 3 and 2 tokens (one padding column), sampler vs trainer log-probs
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
SAMPLER = [[-1.0, -0.5, -2.0], [-0.1, -3.0, 0.0]]
OLD = [[-1.0 + math.log(3.0), -0.5 - math.log(4.0), -2.0 + 0.1], [-0.1 - 0.2, -3.0 + 0.3, 9.0]]


def tensors():
    return torch.tensor(OLD), torch.tensor(SAMPLER), torch.tensor(MASK)


def ratios() -> list[list[float]]:
    """pi_old / pi_sampler per token, in plain Python."""
    return [
        [math.exp(o - s) for o, s in zip(ro, rs, strict=True)]
        for ro, rs in zip(OLD, SAMPLER, strict=True)
    ]


def test_mismatch_metrics_are_the_mean_and_max_gap_and_the_k3_kl_on_response_tokens():
    metrics = mismatch_metrics(*tensors())
    gaps = [
        abs(o - s)
        for ro, rs, rm in zip(OLD, SAMPLER, MASK, strict=True)
        for o, s, m in zip(ro, rs, rm, strict=True)
        if m
    ]
    kls = [
        math.exp(o - s) - (o - s) - 1
        for ro, rs, rm in zip(OLD, SAMPLER, MASK, strict=True)
        for o, s, m in zip(ro, rs, rm, strict=True)
        if m
    ]
    assert metrics["mismatch_logprob_mean"] == pytest.approx(sum(gaps) / len(gaps), rel=1e-6)
    assert metrics["mismatch_logprob_max"] == pytest.approx(max(gaps), rel=1e-6)
    assert metrics["mismatch_kl"] == pytest.approx(sum(kls) / len(kls), rel=1e-6)


def test_equal_log_probs_have_no_mismatch():
    old, _, mask = tensors()
    assert set(mismatch_metrics(old, old.clone(), mask).values()) == {0.0}


def test_tis_weights_each_token_by_its_ratio_truncated_at_the_cap():
    weights, metrics = correction_weights("tis", *tensors(), cap=2.0)
    expected = [[min(r, 2.0) for r in row] for row in ratios()]
    for i, j in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]:
        assert float(weights[i, j]) == pytest.approx(expected[i][j], rel=1e-6)
    assert metrics["is_truncated_frac"] == pytest.approx(1 / 5)  # only ratio 3 > 2
    assert metrics["is_weight_mean"] == pytest.approx(
        sum(expected[i][j] for i, j in [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]) / 5, rel=1e-6
    )


def test_token_masking_drops_exactly_the_tokens_outside_the_range():
    weights, metrics = correction_weights("mis-token", *tensors(), low=0.5, high=2.0)
    # ratios: 3 (out), 1/4 (out), e^0.1, e^-0.2, e^0.3 (all in)
    assert weights[0].tolist() == [0.0, 0.0, 1.0]
    assert weights[1, :2].tolist() == [1.0, 1.0]
    assert metrics["is_masked_frac"] == pytest.approx(2 / 5)


def test_sequence_masking_uses_each_responses_length_normalised_ratio():
    # row 0: mean log-ratio (ln 3 - ln 4 + 0.1) / 3 = -0.063 (ratio 0.94): kept by both;
    # row 1: (-0.2 + 0.3) / 2 = 0.05 (ratio 1.051): kept by [0.9, 1.1], not [0.9, 1.04]
    weights, _ = correction_weights("mis-sequence", *tensors(), low=0.9, high=1.1)
    assert weights[0].tolist() == [1.0, 1.0, 1.0] and weights[1, :2].tolist() == [1.0, 1.0]
    weights, metrics = correction_weights("mis-sequence", *tensors(), low=0.9, high=1.04)
    assert weights[0].tolist() == [1.0, 1.0, 1.0] and weights[1, :2].tolist() == [0.0, 0.0]
    assert metrics["is_masked_frac"] == pytest.approx(2 / 5)


@pytest.mark.parametrize("kind", ["none", "bypass"])
def test_none_and_bypass_weigh_nothing(kind):
    assert correction_weights(kind, *tensors()) == (None, {})


def test_an_unknown_correction_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid: " + ", ".join(CORRECTIONS)):
        correction_weights("ppo", *tensors())


@pytest.mark.parametrize(
    ("rows", "group", "count", "expected"),
    [
        (32, 8, 4, [(0, 8), (8, 16), (16, 24), (24, 32)]),
        (40, 8, 2, [(0, 24), (24, 40)]),  # 5 groups: 3 + 2, never a split group
        (16, 8, 4, [(0, 8), (8, 16)]),  # fewer groups than mini-batches
        (6, 1, 4, [(0, 2), (2, 4), (4, 5), (5, 6)]),
    ],
)
def test_mini_batches_are_contiguous_whole_groups(rows, group, count, expected):
    got = [(s.start, s.stop) for s in mini_batch_slices(rows, group, count)]
    assert got == expected


def test_combined_update_metrics_average_and_take_the_max_of_max_keys():
    combined = combine_updates(
        [{"clip_high_frac": 0.0, "ratio_max": 1.0}, {"clip_high_frac": 0.2, "ratio_max": 1.7}]
    )
    assert combined == {"clip_high_frac": 0.1, "ratio_max": 1.7}

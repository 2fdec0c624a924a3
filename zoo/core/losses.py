"""Shared pieces of policy-gradient losses, named so plugins read like their papers'
formulas. Definitions follow docs/algorithms.md ("Aggregation modes", "Advantage
estimators", "KL to the reference")."""

from __future__ import annotations

from typing import Literal

import torch

from zoo.core.config import ConfigError
from zoo.core.types import TrainBatch

Aggregation = Literal["seq_mean", "token_mean", "fixed"]
AGGREGATIONS: tuple[str, ...] = ("seq_mean", "token_mean", "fixed")
STD_EPS = 1e-6


def group_norm(rewards: torch.Tensor) -> torch.Tensor:
    """GRPO's advantage: (R - mean_g R) / (std_g R + 1e-6), unbiased std, per group.
    ``rewards`` is [groups, G]; an all-equal group gets exact zeros."""
    return group_center(rewards) / (rewards.std(dim=1, unbiased=True, keepdim=True) + STD_EPS)


def group_center(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO's advantage: R - mean_g R (no division by the std). An all-equal group
    gets exact zeros (the float mean of equal values need not equal them)."""
    check_groups(rewards)
    all_equal = all_equal_groups(rewards)[:, None]
    return (rewards - rewards.mean(dim=1, keepdim=True)).masked_fill(all_equal, 0.0)


def all_equal_groups(rewards: torch.Tensor) -> torch.Tensor:
    """Bool [groups]: the groups whose G rewards are exactly equal (zero advantages)."""
    return (rewards == rewards[:, :1]).all(dim=1)


def check_groups(rewards: torch.Tensor) -> None:
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ConfigError(
            f"group advantages need rewards of shape [groups, G] with G >= 2 "
            f"(group size 1 has no baseline); got shape {tuple(rewards.shape)}"
        )


def k3_kl(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi_theta || pi_ref): exp(ref - lp) - (ref - lp) - 1
    (Schulman, "Approximating KL divergence", 2020). Non-negative, no clamping."""
    delta = ref_logprobs - logprobs
    return torch.exp(delta) - delta - 1


def aggregate(per_token: torch.Tensor, batch: TrainBatch, mode: Aggregation) -> torch.Tensor:
    """Reduce a [B, T] per-token loss to a scalar (docs/algorithms.md):

    - seq_mean:   (1/B) sum_i (1/|o_i|) sum_t l_it
    - token_mean: sum_it l_it / sum_i |o_i|
    - fixed:      sum_it l_it / (B * L_max)

    B and sum_i |o_i| come from ``batch.num_sequences`` / ``batch.num_tokens`` (the whole
    optimizer batch), so micro-batches sum to the full-batch loss. Padding never counts;
    a sequence without response tokens contributes 0.
    """
    masked = per_token * batch.mask
    if mode == "token_mean":
        return masked.sum() / max(batch.num_tokens, 1)
    if mode == "seq_mean":
        lengths = batch.mask.sum(-1).clamp(min=1)
        return (masked.sum(-1) / lengths).sum() / max(batch.num_sequences, 1)
    if mode == "fixed":
        if not batch.max_response_len:
            raise ConfigError("aggregation 'fixed' needs batch.max_response_len (L_max)")
        return masked.sum() / (max(batch.num_sequences, 1) * batch.max_response_len)
    raise ConfigError(f"unknown aggregation {mode!r}; valid: {', '.join(AGGREGATIONS)}")


def log_ratio(batch: TrainBatch) -> torch.Tensor:
    """Per-token log importance ratio lp - old on response tokens, 0 on padding, so that
    exp() of junk padding values can never overflow into the loss (inf * 0 = nan)."""
    return torch.where(batch.mask > 0, batch.logprobs - batch.old_logprobs, 0.0)


def clipped_objective(
    ratio: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> torch.Tensor:
    """PPO's clipped surrogate objective min(r A, clip(r, low, high) A) (Schulman et al.,
    arXiv 1707.06347, eq. 7), elementwise; ``low``/``high`` are ratio bounds, e.g. 1 -+ eps.
    Its gradient is zero where the clipped branch is the minimum."""
    return torch.minimum(ratio * advantages, torch.clamp(ratio, low, high) * advantages)


def kl_penalty(batch: TrainBatch, beta: float) -> tuple[torch.Tensor | float, dict[str, float]]:
    """beta * k3 KL per token, to add to the per-token loss, and its metric ``{"kl": mean
    k3 over response tokens}``. (0.0, {}) when beta == 0: the reference is then not run
    and ``batch.ref_logprobs`` may be None."""
    if beta == 0:
        return 0.0, {}
    if batch.ref_logprobs is None:
        raise ConfigError(f"beta = {beta} > 0 needs reference log-probs (batch.ref_logprobs)")
    kl = k3_kl(batch.logprobs, batch.ref_logprobs)
    return beta * kl, {"kl": masked_mean(kl.detach(), batch.mask)}


def masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    """Mean over response tokens, as a plain float (for metrics)."""
    total = mask.sum()
    return float((values * mask).sum() / total) if total > 0 else 0.0


def ratio_metrics(
    ratio: torch.Tensor, batch: TrainBatch, low: float | None, high: float | None
) -> dict[str, float]:
    """Mean and max of the ratio over response tokens, and the fractions of response
    tokens below ``low`` / above ``high``."""
    ratio = ratio.detach()
    on_tokens = torch.where(batch.mask > 0, ratio, 0.0)  # ratios are > 0: padding never wins
    out = {"ratio_mean": masked_mean(ratio, batch.mask), "ratio_max": float(on_tokens.max())}
    if low is not None:
        out["clip_low_frac"] = masked_mean((ratio < low).to(ratio.dtype), batch.mask)
    if high is not None:
        out["clip_high_frac"] = masked_mean((ratio > high).to(ratio.dtype), batch.mask)
    return out

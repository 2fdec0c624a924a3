"""GSPO: Group Sequence Policy Optimization.

Zheng et al., "Group Sequence Policy Optimization", arXiv 2507.18071, 2025 (Sec. 4). The
importance ratio, clipping and reward are all per sequence, so a response's tokens act on
the gradient only through their mean log-ratio. Exactly as docs/algorithms.md defines it:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                  group_norm
    s_i   = exp((1/|o_i|) sum_t (lp_it - old_it))               sequence ratio
    l_i   = -min(s_i A_i, clip(s_i, 1 - eps_low, 1 + eps_high) A_i)
    loss  = (1/B) sum_i l_i                                      (seq_mean of l_i per token)

GSPO-token (``token_level``, Sec. 4.3) uses s_it = sg(s_i) * exp(lp_it - sg(lp_it)) per
token, clipped per token, seq_mean: its value and gradient equal GSPO's when A is per
sequence, and it lets an environment give per-token advantages.

``ratio_mean`` and the clip shares are of s_i. Per response token (the paper reports
the fraction of clipped tokens): ``clip_*_frac`` out of range, ``clip_*_acting_frac``
gradient changed (``zoo.core.losses.clip_flags``). Per sequence, since the paper's clip
is one decision per response: ``seq_clip_low_frac`` / ``seq_clip_high_frac``, the share
of responses with a response token whose s_i is below / above the range, and
``seq_clip_low_acting_frac`` / ``seq_clip_high_acting_frac``, of those out of range on
the side their advantage pushes (A < 0 below, A > 0 above), whose gradient the clip
zeroed. Sequence shares count only responses with tokens; the trainer combines
micro-batches weighted by sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card, EstimatorFields
from zoo.core.losses import (
    aggregate,
    clip_flags,
    clipped_objective,
    kl_penalty,
    log_ratio,
    ratio_metrics,
    sequence_shares,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class GSPOConfig(EstimatorFields):
    eps_low: float = 3e-4
    """Lower clip range on the sequence ratio (GSPO, arXiv 2507.18071, Sec. 5.1)."""
    eps_high: float = 4e-4
    """Upper clip range on the sequence ratio (GSPO, arXiv 2507.18071, Sec. 5.1)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0, GSPO's objective has no KL term."""
    token_level: bool = False
    """GSPO-token: per-token ratio sg(s_i) * exp(lp - sg(lp)) (GSPO, Sec. 4.3)."""


def sequence_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B]: mean over each response's tokens (0 for an empty response)."""
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)


class GSPO(Algorithm):
    name = "gspo"
    config_class = GSPOConfig
    card = Card(
        paper="Zheng et al., Group Sequence Policy Optimization, arXiv 2507.18071 (2025)",
        family="sequence-level",
        sequence_level=True,
        mechanism={"seq_clip_low_acting_frac": 0.0, "seq_clip_high_acting_frac": 0.0},
    )
    aggregation = "seq_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        low, high = 1 - self.config.eps_low, 1 + self.config.eps_high
        log_s = sequence_mean(log_ratio(batch), batch.mask)[:, None]  # [B, 1]
        if self.config.token_level:
            ratio = torch.exp(log_s.detach() + batch.logprobs - batch.logprobs.detach())
        else:
            ratio = torch.exp(log_s).expand_as(batch.logprobs)

        surrogate = clipped_objective(ratio, batch.token_advantages, low, high)
        penalty, kl_metrics = kl_penalty(batch, self.config.beta, self.config.kl)
        # seq_mean of the same l_i on every token of o_i is (1/B) sum_i l_i
        loss = aggregate(-surrogate + penalty, batch, self.aggregation)

        metrics = ratio_metrics(ratio, batch, low, high, batch.token_advantages)
        flags = clip_flags(ratio, low, high, batch.token_advantages)
        metrics.update(sequence_shares(flags, batch.mask))
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

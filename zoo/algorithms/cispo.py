"""CISPO: Clipped Importance Sampling Policy Optimization.

MiniMax, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention",
arXiv 2506.13585, 2025 (Sec. 3.1). Instead of clipping the token update (which drops the
gradient of rare, high-ratio tokens), CISPO caps the importance weight and keeps every
token's gradient. Exactly as docs/algorithms.md defines it:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                  group_norm
    r_it  = exp(lp_it - old_it)
    l_it  = -sg(min(r_it, 1 + eps_high)) * A_i * lp_it          (sg = detach)
    loss  = sum_it l_it / sum_i |o_i|                            token_mean

No lower bound on the weight (the paper sets eps_low very large). The loss value contains
lp, so only its gradient is meaningful. ``capped_frac`` is the share of response tokens
whose ratio is above the cap; ``capped_acting_frac`` the share whose gradient the cap
changed: the weight was lowered (r > 1 + eps_high) and A_i != 0 (with A_i = 0 the token
has no policy gradient to scale).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card, EstimatorFields
from zoo.core.losses import aggregate, capped_weight_loss, kl_penalty, log_ratio
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class CISPOConfig(EstimatorFields):
    eps_high: float = 4.0
    """Cap on the importance weight, min(r, 1 + eps_high) (MiniMax-M1, arXiv 2506.13585,
    Sec. 3.1); 4.0 caps r at 5 (ScaleRL, arXiv 2510.13786, found caps of 4-8 equivalent)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0, CISPO's objective has no KL term."""


class CISPO(Algorithm):
    name = "cispo"
    config_class = CISPOConfig
    card = Card(
        paper="MiniMax, MiniMax-M1, arXiv 2506.13585 (2025)",
        family="soft/capped ratio",
        clip_style="cap",
        mechanism={"capped_acting_frac": 0.0},
    )
    aggregation = "token_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        cap = 1 + self.config.eps_high
        ratio = torch.exp(log_ratio(batch))

        # sg(min(r, cap)) A lp: no lower bound (low is unused)
        policy = capped_weight_loss(ratio, batch.token_advantages, batch, low=0.0, high=cap)
        penalty, kl_metrics = kl_penalty(batch, self.config.beta, self.config.kl)
        loss = aggregate(-policy.objective + penalty, batch, self.aggregation)

        shares = policy.metrics  # the cap's shares, under CISPO's own names
        metrics = {
            "ratio_mean": shares["ratio_mean"],
            "ratio_max": shares["ratio_max"],
            "capped_frac": shares["clip_high_frac"],
            "capped_acting_frac": shares["clip_high_acting_frac"],
        }
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

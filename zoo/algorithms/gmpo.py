"""GMPO: Geometric-Mean Policy Optimization.

Zhao et al., "Geometric-Mean Policy Optimization", arXiv 2507.20673, 2025. GRPO
maximises the arithmetic mean of the token rewards r_it * A_i, which one outlier ratio can
dominate; GMPO maximises their geometric mean, clipped per token in log space over a
wider range:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                      group_norm
    d_it  = lp_it - old_it                                        log ratio
    c_it  = sgn(A_i) * min(sgn(A_i) d_it, sgn(A_i) clip(d_it, log clip_low, log clip_high))
    l_i   = -A_i * exp((1/|o_i|) sum_t c_it)
    loss  = (1/B) sum_i l_i                                       (seq_mean of l_i per token)

so -l_i = sgn(A_i) * (prod_t |min(r_it A_i, clip(r_it) A_i)|)^(1/|o_i|), the paper's
objective. The sign makes the clip pessimistic as PPO's is: with A > 0 a token's log
ratio is capped at log clip_high (no gradient above it), with A < 0 floored at
log clip_low; the other side is left free. Read as the authors' code and verl's
``compute_policy_loss_geo_mean`` do it; with per-token advantages A_i is their mean
over o_i (verl's choice).

``clip_low_frac`` / ``clip_high_frac`` count response tokens whose ratio lies outside
(clip_low, clip_high), like GRPO's, whatever the advantage. ``clip_low_acting_frac`` /
``clip_high_acting_frac`` count those whose gradient the clip zeroed: c_it is then the
constant bound, which happens exactly for A_t < 0 with d_it < log clip_low and for
A_t > 0 with d_it > log clip_high (A_t the token's own advantage, whose sign the clip
reads), in a response whose A_i is not 0 (otherwise no token has a gradient to lose).
The clip also lowers exp(mean c) and so rescales the gradient of the response's other
tokens; those are not counted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card
from zoo.core.losses import aggregate, kl_penalty, log_ratio, masked_mean, ratio_metrics
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class GMPOConfig:
    clip_low: float = math.exp(-0.4)
    """Lower ratio bound e^-0.4, clipped in log space at -0.4 (GMPO, arXiv 2507.20673:
    the range (e^-0.4, e^0.4), wider than GRPO's (0.8, 1.2))."""
    clip_high: float = math.exp(0.4)
    """Upper ratio bound e^0.4, clipped in log space at 0.4 (GMPO, arXiv 2507.20673)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0: GMPO trains without a KL term."""


def response_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B]: mean over each response's tokens (0 for an empty response)."""
    return (values * mask).sum(-1) / mask.sum(-1).clamp(min=1)


class GMPO(Algorithm):
    name = "gmpo"
    config_class = GMPOConfig
    card = Card(
        paper="Zhao et al., Geometric-Mean Policy Optimization, arXiv 2507.20673 (2025)",
        family="geometric mean",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "seq_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        low, high = self.config.clip_low, self.config.clip_high
        d = log_ratio(batch)
        sign = torch.sign(batch.token_advantages)

        clipped = torch.clamp(d, math.log(low), math.log(high))
        c = sign * torch.minimum(sign * d, sign * clipped)
        adv = response_mean(batch.token_advantages, batch.mask)
        per_sequence = -adv * torch.exp(response_mean(c, batch.mask))  # l_i
        penalty, kl_metrics = kl_penalty(batch, self.config.beta)
        # seq_mean of the same l_i on every token of o_i is (1/B) sum_i l_i
        per_token = per_sequence[:, None].expand_as(d) + penalty
        loss = aggregate(per_token, batch, self.aggregation)

        metrics = ratio_metrics(torch.exp(d), batch, low=low, high=high)
        # zeroed where c_it is the bound: compared in log space, as the clamp above does
        live = (batch.mask > 0) & (adv != 0)[:, None]
        low_acts = (sign < 0) & (d < math.log(low)) & live
        high_acts = (sign > 0) & (d > math.log(high)) & live
        metrics["clip_low_acting_frac"] = masked_mean(low_acts.to(d.dtype), batch.mask)
        metrics["clip_high_acting_frac"] = masked_mean(high_acts.to(d.dtype), batch.mask)
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

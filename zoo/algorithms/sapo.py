"""SAPO: Soft Adaptive Policy Optimization.

Gao et al., "Soft Adaptive Policy Optimization", arXiv 2511.20347, 2025. A smooth,
temperature-controlled gate replaces the hard clip: off-policy tokens are attenuated
instead of cut off, and tokens with negative advantages decay faster (tau_neg > tau_pos).
Exactly as docs/algorithms.md defines it:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                  group_norm
    r_it  = exp(lp_it - old_it)
    tau   = tau_pos if A_i > 0 else tau_neg
    f(r)  = sigmoid(tau (r - 1)) * 4 / tau                      soft gate
    l_it  = -f(r_it) * A_i
    loss  = (1/B) sum_i (1/|o_i|) sum_t l_it                    seq_mean

d l_it / d lp_it = -A_i * r_it * 4 p (1 - p), p = sigmoid(tau (r - 1)): the usual policy
gradient weighted by 4p(1-p), which is 1 at r = 1 and decays smoothly away from it.
``gate_weight_mean`` reports that weight's mean over response tokens;
``gate_weight_q05`` its 5% quantile over the response tokens with A != 0 (1.0 when there
are none), the tail that a mean of mostly-1 weights hides; ``gate_acting_frac`` the share
of response tokens with A != 0 whose weight is below ``GATE_ACTING_WEIGHT``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card, EstimatorFields
from zoo.core.losses import aggregate, kl_penalty, log_ratio, masked_mean, ratio_metrics
from zoo.core.types import LossOutput, TrainBatch

GATE_ACTING_WEIGHT = 0.9
"""A token counts as gated (``gate_acting_frac``) when the gate kept less than this share
of its gradient. The gate is smooth, so every ratio away from 1 lowers the weight by
something, float noise in the ratio included (1 - w grows as (tau (r - 1))^2 / 4); the
gate has acted on a token once it removed at least a tenth of its gradient. At tau = 1
that takes |r - 1| > 0.65."""


@dataclass
class SAPOConfig(EstimatorFields):
    tau_pos: float = 1.0
    """Gate temperature for tokens with A > 0 (SAPO, arXiv 2511.20347)."""
    tau_neg: float = 1.05
    """Gate temperature for tokens with A <= 0, larger: faster decay (SAPO, arXiv 2511.20347)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0, SAPO's objective has no KL term."""


class SAPO(Algorithm):
    name = "sapo"
    config_class = SAPOConfig
    card = Card(
        paper="Gao et al., Soft Adaptive Policy Optimization, arXiv 2511.20347 (2025)",
        family="soft/capped ratio",
        clip_style="none",
        mechanism={"gate_acting_frac": 0.0},
    )
    aggregation = "seq_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        adv = batch.token_advantages
        ratio = torch.exp(log_ratio(batch))
        tau = torch.full_like(adv, self.config.tau_neg).masked_fill(adv > 0, self.config.tau_pos)

        gate = torch.sigmoid(tau * (ratio - 1))
        penalty, kl_metrics = kl_penalty(batch, self.config.beta, self.config.kl)
        loss = aggregate(-gate * 4 / tau * adv + penalty, batch, self.aggregation)

        metrics = ratio_metrics(ratio, batch, low=None, high=None)
        p = gate.detach()
        weight = 4 * p * (1 - p)
        metrics["gate_weight_mean"] = masked_mean(weight, batch.mask)
        live = (batch.mask > 0) & (adv != 0)  # tokens with a gradient for the gate to lower
        weights = weight[live]
        metrics["gate_weight_q05"] = float(torch.quantile(weights, 0.05)) if len(weights) else 1.0
        gated = live & (weight < GATE_ACTING_WEIGHT)
        metrics["gate_acting_frac"] = masked_mean(gated.to(weight.dtype), batch.mask)
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

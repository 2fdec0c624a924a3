"""GRPO: Group Relative Policy Optimization.

Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language
Models", arXiv 2402.03300, 2024 (eq. 3). Exactly as docs/algorithms.md defines it:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                  group_norm
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i) + beta * KL_k3(it)
    loss  = (1/B) sum_i (1/|o_i|) sum_t l_it                    seq_mean

Entropy options, off by default (zoo/core/entropy.py): ``entropy_coef`` c subtracts
c * H_it from l_it (an entropy bonus); ``entropy_top_share`` rho keeps the clipped term
only on the top rho share of response tokens by entropy (Wang et al., arXiv 2506.01939,
rho = 0.2), the KL term on all.
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.algorithms.base import Algorithm, Card, EntropyFields, PolicyLossFields
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class GRPOConfig(PolicyLossFields, EntropyFields):
    eps: float = 0.2
    """Symmetric clip range on the token ratio (DeepSeekMath, arXiv 2402.03300)."""
    beta: float = 0.04
    """Weight of the k3 KL penalty to the reference policy (DeepSeekMath, Sec. 4.2)."""


class GRPO(Algorithm):
    name = "grpo"
    config_class = GRPOConfig
    card = Card(
        paper="Shao et al., DeepSeekMath, arXiv 2402.03300 (2024)",
        family="group-relative PPO-clip",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "seq_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, 1 - eps, 1 + eps) A) - beta KL: Algorithm.ratio_surrogate
        eps, beta = self.config.eps, self.config.beta
        return self.ratio_surrogate(batch, 1 - eps, 1 + eps, beta)

"""Dr. GRPO: GRPO Done Right.

Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", arXiv
2503.20783, 2025 (Sec. 3.2). It removes GRPO's two normalisations that bias
training: the per-response 1/|o_i| (longer wrong answers are punished less) and the
std in the advantage (questions that are too easy or too hard weigh more). Exactly as
docs/algorithms.md defines it:

    A_i   = R_i - mean(R)                                         group_center
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 0.8, 1.2) A_i) + beta * KL_k3(it)
    loss  = sum_it l_it / (B * L_max)                             fixed

L_max is the run's generation budget (``batch.max_response_len``): a constant, so every
token weighs the same whatever the length of its response. beta = 0: the paper's
objective has no KL term.

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
class DrGRPOConfig(PolicyLossFields, EntropyFields):
    clip_low: float = 0.8
    """Lower bound of the token-ratio clip, 1 - 0.2 (Dr. GRPO, arXiv 2503.20783, Sec. 3.2)."""
    clip_high: float = 1.2
    """Upper bound of the token-ratio clip, 1 + 0.2 (Dr. GRPO, arXiv 2503.20783, Sec. 3.2)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0: no KL term (Dr. GRPO, Sec. 3.2)."""
    advantage: str = "group_center"  # the paper's: no division by the std (Sec. 3.2)


class DrGRPO(Algorithm):
    name = "dr_grpo"
    config_class = DrGRPOConfig
    card = Card(
        paper="Liu et al., Understanding R1-Zero-Like Training, arXiv 2503.20783 (2025)",
        family="group-relative PPO-clip",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "fixed"

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, clip_low, clip_high) A), summed and divided by a fixed constant
        low, high = self.config.clip_low, self.config.clip_high
        return self.ratio_surrogate(batch, low, high, self.config.beta)

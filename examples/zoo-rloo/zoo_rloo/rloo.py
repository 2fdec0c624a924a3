"""RLOO: REINFORCE Leave-One-Out.

Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
from Human Feedback in LLMs", arXiv 2402.14740 (2024), eq. 7. Each response's baseline is
the mean reward of the *other* responses to the same prompt:

    A_i  = R_i - 1/(G-1) * sum_{j != i} R_j  =  G/(G-1) * (R_i - mean(R))
    r_it = exp(lp_it - old_it)
    l_it = -min(r_it A_i, clip(r_it, 1 - clip, 1 + clip) A_i)       (PPO-style safeguard)
    loss = (1/B) sum_i (1/|o_i|) sum_t l_it                           seq_mean

On-policy (one optimizer step per batch, r = 1) this is exactly the REINFORCE gradient
with the leave-one-out baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms import Algorithm
from zoo.core import LossOutput, TrainBatch
from zoo.core.losses import aggregate, check_groups, clipped_objective, log_ratio, ratio_metrics


@dataclass
class RLOOConfig:
    clip: float = 0.2
    """Symmetric clip on the token ratio, a safeguard off-policy (RLOO, arXiv 2402.14740)."""


class RLOO(Algorithm):
    name = "rloo"
    config_class = RLOOConfig
    paper = "Ahmadian et al., Back to Basics (RLOO), arXiv 2402.14740 (2024)"
    aggregation = "seq_mean"
    mechanism = {"clip_low_frac": 0.0, "clip_high_frac": 0.0}  # noqa: RUF012 (read as ClassVar)

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        check_groups(rewards)
        group = rewards.shape[1]
        others_mean = (rewards.sum(dim=1, keepdim=True) - rewards) / (group - 1)
        return rewards - others_mean

    def loss(self, batch: TrainBatch) -> LossOutput:
        clip, adv = self.config.clip, batch.token_advantages
        ratio = torch.exp(log_ratio(batch))  # exactly 1 on padding
        surrogate = clipped_objective(ratio, adv, 1 - clip, 1 + clip)
        loss = aggregate(-surrogate, batch, self.aggregation)
        metrics = ratio_metrics(ratio, batch, low=1 - clip, high=1 + clip)
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics})

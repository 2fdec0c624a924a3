"""vanilla_pg: REINFORCE with a group-mean baseline, as a third-party plugin.

Williams, "Simple Statistical Gradient-Following Algorithms for Connectionist
Reinforcement Learning", Machine Learning 8 (1992): the policy gradient with a baseline,
here the mean reward of the responses to the same prompt:

    A_i  = R_i - mean(R)
    r_it = exp(lp_it - old_it)
    l_it = -min(r_it A_i, clip(r_it, 1 - clip, 1 + clip) A_i)       (PPO-style safeguard)
    loss = (1/B) sum_i (1/|o_i|) sum_t l_it                           seq_mean

On-policy (one optimizer step per batch, r = 1) this is exactly REINFORCE with the mean
baseline. The package is the template for an algorithm that lives outside forge-zoo:
``advantages(rewards)`` takes the rewards alone, so it declares ``inputs = frozenset()``
(the loop passes an advantage only what its class declares; docs/algorithms.md).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms import Algorithm, Card
from zoo.core import LossOutput, TrainBatch
from zoo.core.losses import aggregate, check_groups, clipped_objective, log_ratio, ratio_metrics


@dataclass
class VanillaPGConfig:
    clip: float = 0.2
    """Symmetric clip on the token ratio, a safeguard off-policy (PPO, arXiv 1707.06347)."""


class VanillaPG(Algorithm):
    name = "vanilla_pg"
    config_class = VanillaPGConfig
    card = Card(
        paper="Williams, Simple Statistical Gradient-Following Algorithms (REINFORCE), 1992",
        # shares of tokens whose gradient the clip changed, idle at 0 (zoo/algorithms/base.py)
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "seq_mean"

    inputs = frozenset()  # advantages(rewards) reads nothing else (not even lengths)

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        check_groups(rewards)
        return rewards - rewards.mean(dim=1, keepdim=True)

    def loss(self, batch: TrainBatch) -> LossOutput:
        clip, adv = self.config.clip, batch.token_advantages
        ratio = torch.exp(log_ratio(batch))  # exactly 1 on padding
        surrogate = clipped_objective(ratio, adv, 1 - clip, 1 + clip)
        loss = aggregate(-surrogate, batch, self.aggregation)
        metrics = ratio_metrics(ratio, batch, 1 - clip, 1 + clip, adv)  # with the acting shares
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics})

"""OPO: On-Policy RL with Optimal reward baseline.

Hao et al., "On-Policy RL with Optimal Reward Baseline", arXiv 2505.23585 (2025). The
baseline that minimises the variance of the policy gradient is the reward weighted by
||grad log pi(o)||^2; assuming that grows as the response length, it is the
length-weighted mean reward of the group, and there is no std normalisation:

    b     = sum_j |o_j| R_j / sum_j |o_j|      (the group's G responses, o_i included)
    A_i   = R_i - b                                                 opo
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i)
    loss  = sum_it l_it / sum_i |o_i|                               token_mean

The length weights come from the loop (``Algorithm.group_advantages`` passes the
response lengths to ``advantages``). token_mean sums each response's tokens, the
REINFORCE gradient sum_t grad lp_it whose squared norm the baseline assumes ~ |o|.

Multi-turn envs: |o_j| is the episode's length as the loop counts it, every token after
the prompt, the env's observation tokens included (zoo/run/rounds.py, ``lengths``), while
the gradient sums only the assistant tokens (observations are masked out of the loss). An
episode with long tool outputs therefore weighs more in the baseline than the tokens it is
trained on; the paper (single-turn) has no observation tokens, so it does not say.

Exact on-policy training, the paper's other half, is a run setting, not a loss: one
optimizer step per rollout batch, ``--mini-batches 1 --epochs 1`` (docs/training.md;
the zoo's default is 4 mini-batches). Then r = 1 and the clip never binds; with more
mini-batches it is PPO's safeguard. beta = 0: OPO has no KL term.
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.algorithms.base import Algorithm, Card, EntropyFields, PolicyLossFields
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class OPOConfig(PolicyLossFields, EntropyFields):
    eps: float = 0.2
    """Symmetric clip on the token ratio, idle in OPO's exact on-policy regime (one update
    per batch, arXiv 2505.23585); PPO's safeguard (arXiv 1707.06347) with more."""
    beta: float = 0.0
    """Weight of a KL penalty in the loss; 0: OPO uses no KL regularisation (arXiv
    2505.23585)."""
    advantage: str = "opo"  # the length-weighted optimal baseline (arXiv 2505.23585)


class OPO(Algorithm):
    name = "opo"
    config_class = OPOConfig
    card = Card(
        paper="Hao et al., On-Policy RL with Optimal Reward Baseline, arXiv 2505.23585 (2025)",
        family="REINFORCE-style",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "token_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, 1 - eps, 1 + eps) A) - beta KL: Algorithm.ratio_surrogate
        eps = self.config.eps
        return self.ratio_surrogate(batch, 1 - eps, 1 + eps, self.config.beta)

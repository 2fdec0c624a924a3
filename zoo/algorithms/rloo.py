"""RLOO: REINFORCE Leave-One-Out.

Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
from Human Feedback in LLMs", arXiv 2402.14740 (2024), eq. 7. Each response's baseline is
the mean reward of the *other* G - 1 responses to the same prompt, an unbiased baseline
(it does not depend on the response it is subtracted from):

    A_i   = R_i - 1/(G-1) sum_{j != i} R_j  =  G/(G-1) (R_i - mean(R))   leave_one_out
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i) + beta * KL(it)
    loss  = (1/B) sum_i (1/|o_i|) sum_t l_it                               seq_mean

The paper takes one optimizer step per batch, where r = 1 and this is exactly REINFORCE
with the leave-one-out baseline; the clip is PPO's safeguard for the later mini-batches
of the zoo's training regime (docs/training.md). The paper puts a sequence-level KL
penalty in its (RLHF) reward; on verifiable rewards the default is beta = 0, and
``--set beta=...`` adds a per-token KL to the loss (estimator ``kl``).
"""

from __future__ import annotations

from dataclasses import dataclass

from zoo.algorithms.base import Algorithm, Card, EntropyFields, PolicyLossFields
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class RLOOConfig(PolicyLossFields, EntropyFields):
    eps: float = 0.2
    """Symmetric clip on the token ratio, PPO's safeguard off-policy (PPO, arXiv 1707.06347);
    idle at RLOO's one update per batch (arXiv 2402.14740)."""
    beta: float = 0.0
    """Weight of a KL penalty in the loss; 0: RLOO on verifiable rewards has no KL term."""
    advantage: str = "rloo"  # the leave-one-out baseline (arXiv 2402.14740, eq. 7)


class RLOO(Algorithm):
    name = "rloo"
    config_class = RLOOConfig
    card = Card(
        paper="Ahmadian et al., Back to Basics (RLOO), arXiv 2402.14740 (2024)",
        family="REINFORCE-style",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "seq_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, 1 - eps, 1 + eps) A) - beta KL: Algorithm.ratio_surrogate
        eps = self.config.eps
        return self.ratio_surrogate(batch, 1 - eps, 1 + eps, self.config.beta)

"""ReMax: REINFORCE with the reward of the policy's greedy answer as the baseline.

Li et al., "ReMax: A Simple, Effective, and Efficient Reinforcement Learning Method for
Aligning Large Language Models", arXiv 2310.10505 (ICML 2024), Algorithm 1. Besides its
sampled responses, each prompt x gets one greedy response y_bar of the same policy (the
argmax token at every position), and its reward is the baseline of every sample of x:

    b(x)  = R(x, y_bar)                                    the loop generates y_bar
    A_i   = R(x, o_i) - b(x)                               every token of o_i
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 1 - eps, 1 + eps) A_i) + beta * KL(it)
    loss  = sum_it l_it / sum_i |o_i|                      token_mean

Units: R and b are the env's rewards (0 or 1 on a verifier), so A is in reward units, not
normalised: -1, 0 or +1 on a verifier. b does not depend on the sample it is subtracted
from, so the gradient stays unbiased (the paper's argument); a sample only as good as the
greedy answer gets A = 0 and no gradient. The paper draws one sample per prompt; here the
run's G samples of a prompt (G >= 2, ``--group-size``) all use the same b(x).

The greedy response is the loop's work, not this file's: ``advantages`` declares
``greedy_rewards``, so the loop (``Algorithm.needs_greedy_baseline``) generates one greedy
completion per prompt with the generator and weights that sampled the group, scores it
with the env, charges its generation to the ledger's ``baseline`` phase (the extra cost
the paper pays, from the run's budget) and passes its rewards here, shaped as the
samples' are. Sync mode only (async mode is refused before the run starts).

Surrogate: Algorithm 1 takes one gradient step per batch on -A * log pi (REINFORCE). The
shared ``ppo_clip`` policy loss (zoo.core.losses.POLICY_LOSSES) has exactly that gradient
at r = 1, i.e. on the first update of a batch, and on every update with
``--mini-batches 1 --epochs 1``; on the later mini-batches of the zoo's training regime
its clip bounds the importance-weighted update, as for rloo (``--set loss=unclipped``
drops the bound). Aggregation: the authors' code (liziniu/ReMax,
step3_rlhf_finetuning/remax_trainer.py, ``actor_loss_fn``) divides the summed -A * lp by
the number of response tokens of the batch, i.e. ``token_mean``; the paper's estimator,
summed over each response's tokens and averaged over responses, differs from it by a
factor that is constant over a batch. The paper's RLHF reward carries a per-token KL to
the reference; on verifiable rewards the default is beta = 0, and
``--set beta=0.05 --set kl_in_reward=true`` puts a KL in the reward as the paper does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card, EntropyFields, KLField, LossField
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class ReMaxConfig(LossField, KLField, EntropyFields):
    # No ``advantage`` field: the paper fixes the baseline (the greedy answer's reward).
    eps: float = 0.2
    """Symmetric clip on the token ratio, PPO's safeguard for the later mini-batches of a
    batch (PPO, arXiv 1707.06347); idle at ReMax's one update per batch (arXiv 2310.10505,
    Algorithm 1), where r = 1."""
    beta: float = 0.0
    """Weight of a KL penalty to the reference; 0: none on verifiable rewards (the paper's
    RLHF runs charge a KL in the reward: ``kl_in_reward``)."""


class ReMax(Algorithm):
    name = "remax"
    config_class = ReMaxConfig
    card = Card(
        paper="Li et al., ReMax, arXiv 2310.10505 (2023)",
        family="REINFORCE-style",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "token_mean"

    inputs = frozenset({"greedy_rewards"})  # the loop then samples the greedy baseline

    def advantages(self, rewards: torch.Tensor, greedy_rewards: torch.Tensor) -> torch.Tensor:
        """[groups, G] rewards of the samples and [groups] rewards of each prompt's greedy
        completion -> [groups, G] advantages R_ij - b_i, in reward units."""
        return rewards - greedy_rewards[:, None].to(rewards.dtype)

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, 1 - eps, 1 + eps) A) - beta KL: Algorithm.ratio_surrogate
        eps = self.config.eps
        return self.ratio_surrogate(batch, 1 - eps, 1 + eps, self.config.beta)

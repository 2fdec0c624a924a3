"""GPG: Group Policy Gradient.

Chu et al., "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
Reasoning", arXiv 2504.02546, 2025. It optimises the RL objective directly with
the plain policy gradient: no surrogate ratio, no clip, no KL term, no reference model.
Its corrections act on the advantage:

    A_i    = alpha * (R_i - mean_g(R)) / F_norm
    F_norm = 1                          (std_norm False, the paper's best setting)
           = std_g(R) + 1e-6            (std_norm True; as group_norm)
    alpha  = B / B_valid                (valid_correction; 1 when off)
    l_it   = -A_i * lp_it
    loss   = sum_it l_it / sum_i |o_i|                           token_mean

B counts the responses of the rollout batch and B_valid those in groups whose rewards are
not all equal: the other groups get A = 0 and no gradient, yet their tokens still divide
the token mean, which shrinks the gradient by about B_valid / B; alpha undoes that
(the paper's "accurate gradient estimation"). ``advantages`` computes it over every group
of the step. Reading chosen: B_valid as in the authors' code (responses of groups with
nonzero reward std); verl's ``compute_gpg_outcome_advantage`` counts responses with a
nonzero reward instead, which differs whenever a group is all correct.

Not here: the paper's threshold beta_th (resample until B_valid / B >= beta_th, the
authors' ``min_inverse_alpha``) is a sampling rule, not a loss; forge-zoo's loop
resamples only through ``keep`` (as DAPO's dynamic sampling does).

The loss ignores ``old``: it is -A * grad log pi at the current weights, with no ratio.
That is the policy gradient only while the weights are those that sampled the batch:
with one update per batch (``--mini-batches 1 --epochs 1``, the on-policy setting its
plain policy gradient assumes) it is exact. Under the zoo's default of 4 mini-batches,
every mini-batch after the first is an *off-policy* gradient with no importance
correction: the samples come from pi_old, the gradient is taken at pi_theta != pi_old,
and nothing (no ratio, no clip) corrects or bounds the difference, so it is biased by as
much as the policy moved. ``ratio_mean`` / ``ratio_max`` report how far it moved.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card
from zoo.core.losses import (
    aggregate,
    all_equal_groups,
    group_center,
    group_norm,
    kl_penalty,
    log_ratio,
    ratio_metrics,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class GPGConfig:
    std_norm: bool = False
    """Divide the centred reward by the group std (F_norm = std); False: F_norm = 1, the
    best setting of the authors' ablation (GPG, arXiv 2504.02546)."""
    valid_correction: bool = True
    """Scale advantages by alpha = B / B_valid (GPG, arXiv 2504.02546, "accurate
    gradient estimation")."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0: GPG has no KL term."""


def valid_correction(rewards: torch.Tensor) -> float:
    """alpha = B / B_valid for [groups, G] rewards: responses over responses in groups
    whose rewards are not all equal (1.0 when there are none: every advantage is 0)."""
    valid = int((~all_equal_groups(rewards)).sum()) * rewards.shape[1]
    return rewards.numel() / valid if valid else 1.0


class GPG(Algorithm):
    name = "gpg"
    config_class = GPGConfig
    card = Card(
        paper="Chu et al., GPG: A Simple and Strong RL Baseline, arXiv 2504.02546 (2025)",
        family="REINFORCE-style",
        clip_style="none",
        # no ratio, no clip: its corrections act on A
        mechanism={},
    )
    aggregation = "token_mean"

    inputs = frozenset()  # the group's rewards alone

    def advantages(self, rewards: torch.Tensor) -> torch.Tensor:
        centred = group_norm(rewards) if self.config.std_norm else group_center(rewards)
        alpha = valid_correction(rewards) if self.config.valid_correction else 1.0
        return alpha * centred

    def loss(self, batch: TrainBatch) -> LossOutput:
        penalty, kl_metrics = kl_penalty(batch, self.config.beta)
        per_token = -batch.token_advantages * batch.logprobs + penalty
        loss = aggregate(per_token, batch, self.aggregation)

        metrics = ratio_metrics(torch.exp(log_ratio(batch)), batch, low=None, high=None)
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

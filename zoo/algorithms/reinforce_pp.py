"""REINFORCE++: REINFORCE with global advantage normalisation.

Hu et al., "REINFORCE++: An Efficient RLHF Algorithm with Robustness to Both Prompt and
Reward Models" (later "... Stabilizing Critic-Free Policy Optimization with Global
Normalization"), arXiv 2501.03262 (2025). No critic and no per-prompt normalisation: the
reward is normalised over the whole batch, the KL to the reference is a per-token
penalty in the reward, and PPO's clip guards the later mini-batches:

    A_i   = (R_i - mean_batch R) / (std_batch R + 1e-6)          reinforce_pp
    K_it  = beta * sum_{s >= t} KL_k1(is)                         KL in the reward
            KL_k1(is) = old_is - ref_is  (the sampling policy, no gradient)
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it (A_i - K_it), clip(r_it, 1 - eps, 1 + eps) (A_i - K_it))
    loss  = sum_it l_it / sum_i |o_i|                              token_mean

REINFORCE++-baseline (``--set advantage=reinforce_pp_baseline``), the paper's variant for
group sampling (reasoning): subtract the group mean, then divide by the std of the
centred rewards over the batch, A_i = (R_i - mean_g R) / (std_batch(R - mean_g R) + 1e-6).

DEVIATION, flagged: by default (``whiten = "response"``) the mean and std above are taken
over the batch's *responses*, each counted once. The paper (eq. 10), verl
(``masked_whiten``) and OpenRLHF whiten over the batch's *tokens*: a response of |o_i|
tokens counts |o_i| times, so where wrong answers are longer the mean moves toward them
and the advantages of a batch differ by up to ~0.5-0.65. The paper's per-token form is
``--set whiten=token`` (``zoo.core.losses.token_whiten``: the token-weighted mean and
unbiased std of the per-response values, which re-centres reinforce_pp_baseline's
group-centred values too, as verl and OpenRLHF do). The default will switch to "token"
once the running_sum board is re-made; it stays "response" until then so that board's
runs reproduce.

Choices, where the paper and its implementation (OpenRLHF) leave room:
- KL placement: the paper subtracts beta * KL from the per-token reward *before* the
  batch normalisation. Here advantages are computed when the rewards arrive, before the
  reference runs, so the KL return K_it is subtracted *after* normalising the task
  reward, unnormalised (for small beta, a small difference). ``kl_in_reward = False``
  moves it to the loss instead (``+ beta * KL(it)`` per token, estimator ``kl``; k2 gives
  the KL's gradient there, k1 would give none in expectation).
- Batch = the responses of one sampling round of the loop (``prompts_per_step`` groups),
  the unbiased std, 1e-6 added to it as in group_norm. With ``whiten = "token"`` a
  response's tokens are its length as the loop counts it: in a multi-turn episode every
  token after the prompt, the env's observation tokens included (they are not trained).
- beta = 0.01 (OpenRLHF's default KL coefficient, which the paper's runs use); eps = 0.2.
- aggregation token_mean: every token of the batch weighs the same (OpenRLHF's token
  mean over the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from zoo.algorithms.base import Algorithm, Card, EntropyFields, PolicyLossFields
from zoo.core.config import ConfigError
from zoo.core.losses import (
    group_center,
    token_whiten,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class ReinforcePPConfig(PolicyLossFields, EntropyFields):
    eps: float = 0.2
    """Symmetric clip range on the token ratio (REINFORCE++, arXiv 2501.03262, PPO clip)."""
    beta: float = 0.01
    """Weight of the KL to the reference (REINFORCE++'s token-level KL penalty; 0.01 as
    OpenRLHF's default KL coefficient)."""
    advantage: str = "reinforce_pp"  # global batch normalisation of the reward (the paper;
    # the group-baseline variant is reinforce_pp_baseline)
    kl: str = "k1"  # log(pi_old / pi_ref), as in REINFORCE++'s reward (arXiv 2501.03262)
    kl_in_reward: bool = True
    """True: -beta * KL is a per-token reward, summed into each token's return
    (REINFORCE++, arXiv 2501.03262); False: + beta * KL per token in the loss."""
    whiten: str = "response"
    """Over what the batch normalisation of reinforce_pp / reinforce_pp_baseline takes its
    mean and std: "token", every response token of the batch (the paper's eq. 10, verl,
    OpenRLHF); "response", every response once (this zoo's form so far, the default until
    the running_sum board is re-made; a flagged deviation)."""


WHITENED = ("reinforce_pp", "reinforce_pp_baseline")
"""The estimators whose batch normalisation ``whiten`` chooses."""


class ReinforcePP(Algorithm):
    name = "reinforce_pp"
    config_class = ReinforcePPConfig
    card = Card(
        paper="Hu et al., REINFORCE++, arXiv 2501.03262 (2025)",
        family="REINFORCE-style",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "token_mean"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        whiten = self.config.whiten
        if whiten not in ("response", "token"):
            raise ConfigError(
                f"algorithm 'reinforce_pp': whiten {whiten!r}; valid: response, token"
            )
        if whiten == "token" and self.config.advantage not in WHITENED:
            raise ConfigError(
                f"algorithm 'reinforce_pp': whiten = token applies to the advantage "
                f"estimators {', '.join(WHITENED)}, not {self.config.advantage!r}"
            )

    def advantages(
        self, rewards: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        if self.config.whiten == "response":  # the shared estimator, as before the option
            return super().advantages(rewards, lengths)
        if self.config.advantage == "reinforce_pp":
            return token_whiten(rewards, lengths)
        return token_whiten(group_center(rewards), lengths)

    def loss(self, batch: TrainBatch) -> LossOutput:
        # PPO's clip on A (or A - K, the KL's reward-to-go, when kl_in_reward)
        eps = self.config.eps
        return self.ratio_surrogate(
            batch, 1 - eps, 1 + eps, self.config.beta, kl_in_reward=self.config.kl_in_reward
        )

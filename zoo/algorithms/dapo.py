"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization.

Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale", arXiv
2503.14476, 2025. Exactly as docs/algorithms.md defines it:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                  group_norm
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 1 - eps_low, 1 + eps_high) A_i)   (Sec. 3.1)
    loss  = sum_it l_it / sum_i |o_i|                            token_mean (Sec. 3.3)

Dynamic sampling (Sec. 3.2, ``keep``): drop every group whose task rewards (accuracy)
are all equal, as the paper filters prompts with accuracy 0 or 1; the loop refills the
batch up to its ``max_sampling_rounds`` and charges every generated token.

Soft overlong punishment (Sec. 3.4, eq. 13, ``shape_rewards``), added to the task reward,
with L_max the generation budget and L_cache = ``overlong_cache``:

    R_length(o) = 0                                 if |o| <= L_max - L_cache
                  ((L_max - L_cache) - |o|) / L_cache   if L_max - L_cache < |o| <= L_max
                  -1                                if |o| > L_max

The window must start after the longest correct answer, or the punishment pushes correct
answers shorter than they can be (the paper's 16k tokens before a 4k window leave its
answers untouched). The built-in envs' documented generation budgets keep every reference
answer out of the default window (tests/test_algorithms.py checks it): arithmetic at
L_max 6 (answers <= 4 tokens), pyfunc at 12 (<= 9), the real-model envs at 1024.

Overlong filtering (Sec. 3.4, ``train_mask``, off by default): responses cut off by the
generation budget (finish reason "length") are masked out of the loss.

Entropy options, off by default (zoo/core/entropy.py): ``entropy_coef`` c subtracts
c * H_it from l_it (an entropy bonus); ``entropy_top_share`` rho keeps the clipped term
only on the top rho share of response tokens by entropy (Wang et al., arXiv 2506.01939,
rho = 0.2, trained on top of DAPO), the KL term on all.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card, EntropyFields, PolicyLossFields
from zoo.core.config import ConfigError
from zoo.core.losses import (
    all_equal_groups,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class DAPOConfig(PolicyLossFields, EntropyFields):
    eps_low: float = 0.2
    """Lower clip range: r is clipped below at 1 - eps_low (DAPO, arXiv 2503.14476, Sec. 3.1)."""
    eps_high: float = 0.28
    """Upper clip range, decoupled from eps_low ("Clip-Higher", DAPO, Sec. 3.1)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0, DAPO removes the KL (Sec. 2.3)."""
    overlong_punishment: bool = True
    """Add the soft overlong punishment to the task reward (DAPO, Sec. 3.4, eq. 13)."""
    overlong_cache: float | None = None
    """L_cache, the punishment interval in tokens; None = L_max / 4 (DAPO uses 4096 of 20480)."""
    overlong_filtering: bool = False
    """Mask truncated responses out of the loss (DAPO, Sec. 3.4); off, as in algorithms.md."""


class DAPO(Algorithm):
    name = "dapo"
    config_class = DAPOConfig
    card = Card(
        paper="Yu et al., DAPO, arXiv 2503.14476 (2025)",
        family="group-relative PPO-clip",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "token_mean"

    def shape_rewards(
        self, rewards: torch.Tensor, lengths: torch.Tensor, max_response_len: int
    ) -> torch.Tensor:
        if not self.config.overlong_punishment:
            return rewards
        max_len = float(max_response_len)
        cache = self.config.overlong_cache
        cache = max_len / 4 if cache is None else float(cache)
        if not 0 < cache <= max_len:
            raise ConfigError(f"dapo overlong_cache must be in (0, L_max={max_len:g}], got {cache}")
        # the three pieces of eq. 13 in one expression: >= 0 (clamped to 0) while
        # |o| <= L_max - L_cache, linear in between, <= -1 (clamped to -1) from L_max on
        punishment = ((max_len - cache - lengths.to(rewards.dtype)) / cache).clamp(-1.0, 0.0)
        return rewards + punishment

    def keep(self, rewards: torch.Tensor) -> torch.Tensor:
        return ~all_equal_groups(rewards)

    def train_mask(self, truncated: torch.Tensor) -> torch.Tensor:
        return ~truncated if self.config.overlong_filtering else ~torch.zeros_like(truncated)

    def loss(self, batch: TrainBatch) -> LossOutput:
        # clip-higher: min(r A, clip(r, 1 - eps_low, 1 + eps_high) A), token_mean
        low, high = 1 - self.config.eps_low, 1 + self.config.eps_high
        return self.ratio_surrogate(batch, low, high, self.config.beta)

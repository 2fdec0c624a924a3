"""PPO with a learned critic and GAE: the RLHF recipe of verl, OpenRLHF and TRL.

Schulman et al., "Proximal Policy Optimization Algorithms", arXiv 1707.06347 (2017), with
Generalized Advantage Estimation (Schulman et al., arXiv 1506.02438, 2016, eq. 16), as
Ouyang et al. applied it to language models (InstructGPT, arXiv 2203.02155, 2022): each
token is an action, the response's reward arrives on its last token, and a value model
V_phi(s_t) (the policy's architecture with a scalar head, its own weights; served by
zoo/services/value.py) is the baseline. Per response token t (t + 1: the next token the
mask marks; V = 0 after the last):

    r_t   = R on the last token, else 0        (- beta * KL_t with kl_in_reward)
    d_t   = r_t + gamma V(s_t+1) - V(s_t)
    A_t   = d_t + gamma lam A_t+1               GAE; whitened over the batch's tokens
    G_t   = A_t + V(s_t)                        (before whitening): the critic's target
    l_t   = -min(r A_t, clip(r, 1 - eps, 1 + eps) A_t) (+ beta KL_k3)   token_mean
    critic: 0.5 max((V - G)^2, (V_old + clip(V - V_old, -c, c) - G)^2)    token_mean

Defaults: verl's PPO recipe (verl/trainer/config/ppo_trainer.yaml and critic.yaml):
gamma = lam = 1 (algorithm.gamma, algorithm.lam; also OpenRLHF's), eps = 0.2, value clip
0.5 (critic.cliprange_value; OpenRLHF's value_clip), advantages whitened
(``masked_whiten`` in verl's ``compute_gae_advantage_return``), token-mean losses
(loss_agg_mode), no KL (use_kl_loss and use_kl_in_reward off), and the critic at 10x the
actor's learning rate (critic.optim.lr 1e-5 against actor 1e-6). The critic trains after
the policy on the same batch in as many mini-batches and epochs (critic.ppo_epochs =
actor's), with the run's grad clip and AdamW settings, from step 1 (trainer.critic_warmup
0). The critic is a separate model; a shared trunk (one body, two heads) is not built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from zoo.algorithms.base import Algorithm, Card, EntropyFields, KLField, LossField
from zoo.core.config import ConfigError
from zoo.core.losses import (
    STD_EPS,
    clipped_value_loss,
)
from zoo.core.types import LossOutput, TrainBatch, ValueBatch

CRITIC_LR_RATIO = 10.0
"""The critic's learning rate over the actor's when ``critic_lr`` is 0: verl's 1e-5 / 1e-6."""


@dataclass
class PPOConfig(LossField, KLField, EntropyFields):
    # No ``advantage`` field: the critic is the baseline (GAE below).
    eps: float = 0.2
    """Symmetric clip range on the token ratio (PPO, arXiv 1707.06347; verl clip_ratio)."""
    beta: float = 0.0
    """Weight of the KL penalty to the reference, in the loss (or, with --set
    kl_in_reward=true, in the per-token reward, as InstructGPT); 0 as in verl's PPO recipe
    (use_kl_loss and use_kl_in_reward off), so no reference model runs."""
    gamma: float = 1.0
    """GAE's discount per token (arXiv 1506.02438; verl and OpenRLHF: 1)."""
    lam: float = 1.0
    """GAE's lambda: 1 is the Monte-Carlo return less V(s_t), 0 the one-step TD error
    (verl and OpenRLHF: 1; InstructGPT-era recipes used 0.95)."""
    whiten: bool = True
    """Whiten the advantages over the batch's response tokens (mean 0, std 1), as verl and
    OpenRLHF do; the critic's targets are the returns before whitening."""
    value_clip: float = 0.5
    """c: the critic's new values are clipped to V_old +- c inside the value loss (verl
    critic.cliprange_value, OpenRLHF value_clip), in the reward's unit."""
    critic_lr: float = 0.0
    """The critic's AdamW learning rate; 0: 10x the run's --lr (verl: critic 1e-5 over
    actor 1e-6)."""


class PPO(Algorithm):
    name = "ppo"
    config_class = PPOConfig
    card = Card(
        paper="Schulman et al., PPO, arXiv 1707.06347 (2017); GAE, arXiv 1506.02438 (2016)",
        family="actor-critic",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "token_mean"
    needs_values = True

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        c, owner = self.config, f"algorithm {self.name!r}"
        if not (0.0 <= c.gamma <= 1.0 and 0.0 <= c.lam <= 1.0):
            raise ConfigError(f"{owner}: gamma and lam must be in [0, 1], got {c.gamma}, {c.lam}")
        if c.value_clip <= 0 or c.critic_lr < 0 or c.eps <= 0:
            raise ConfigError(
                f"{owner}: need value_clip > 0, critic_lr >= 0 (0: 10x lr) and "
                f"eps > 0, got {c.value_clip}, {c.critic_lr}, {c.eps}"
            )

    def advantages(
        self, rewards: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """No group baseline: the critic is PPO's. Before the values exist, a response's
        advantage is its reward (GAE with V = 0 and gamma = lam = 1), which the loop puts
        on its last token and hands to ``token_advantages`` with the values."""
        return rewards.clone()

    def token_advantages(
        self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        advantages, returns = gae(rewards, values, mask, self.config.gamma, self.config.lam)
        return (whiten_tokens(advantages, mask) if self.config.whiten else advantages), returns

    def critic_lr(self, lr: float) -> float:
        return self.config.critic_lr or CRITIC_LR_RATIO * lr

    def value_loss(self, batch: ValueBatch) -> LossOutput:
        loss, metrics = clipped_value_loss(batch, self.config.value_clip)
        return LossOutput(loss, metrics)

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, 1 - eps, 1 + eps) A) - beta KL: Algorithm.ratio_surrogate
        eps, beta = self.config.eps, self.config.beta
        return self.ratio_surrogate(batch, 1 - eps, 1 + eps, beta)


def gae(
    rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lam: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized Advantage Estimation (arXiv 1506.02438, eq. 16) over each row's marked
    tokens, right to left: d_t = r_t + gamma V_next - V_t, A_t = d_t + gamma lam A_next,
    where "next" is the next token the mask marks (unmarked tokens, such as a multi-turn
    episode's observations, are stepped over, as verl does) and V_next = A_next = 0 after
    the row's last marked token. Returns ([B, T] advantages, [B, T] returns A + V), both 0
    on unmarked tokens. Float64 inside, the values' dtype out."""
    on = mask > 0
    r, v = rewards.double(), values.double()
    advantages = torch.zeros_like(v)
    next_value = torch.zeros(v.shape[0], dtype=v.dtype)
    next_advantage = torch.zeros_like(next_value)
    for t in range(v.shape[1] - 1, -1, -1):
        here = r[:, t] + gamma * next_value - v[:, t] + gamma * lam * next_advantage
        next_value = torch.where(on[:, t], v[:, t], next_value)
        next_advantage = torch.where(on[:, t], here, next_advantage)
        advantages[:, t] = torch.where(on[:, t], here, 0.0)
    returns = torch.where(on, advantages + v, 0.0)
    return advantages.to(values.dtype), returns.to(values.dtype)


def whiten_tokens(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(x - mean) / (std + 1e-6) over the marked tokens of the whole batch (unbiased std;
    verl's ``masked_whiten`` divides by sqrt(var + 1e-8), the same to ~1e-6); 0 on
    unmarked tokens. All-equal values (or fewer than two tokens) become exact zeros."""
    on = mask > 0
    present = values[on]
    if present.numel() < 2 or bool((present == present[0]).all()):
        return torch.zeros_like(values)
    mean, std = present.mean(), present.std(unbiased=True)
    return torch.where(on, (values - mean) / (std + STD_EPS), 0.0)

"""GiGPO: Group-in-Group Policy Optimization, credit per turn of multi-turn episodes.

Feng, Xue, Liu and An, "Group-in-Group Policy Optimization for LLM Agent Training", arXiv
2505.10978 (NeurIPS 2025), Sec. 4. Each prompt's G episodes are one group (GRPO's); inside
it, the turns of its episodes that start from the same state are a step group. The
advantage of turn t of episode i adds a relative advantage at each level:

    A_E(i)   = (R_i - mean_g R) / F(R_g)                       episode level, over the G
    R_t(i)   = sum_{k >= t} gamma^(k - t) r_k(i)               return-to-go of turn t
    A_S(i,t) = (R_t(i) - mean_S R_t) / F(R_S)                  S: the step group of (i, t)
    A(i,t)   = A_E(i) + omega * A_S(i,t)                       every token of turn t
    l_it     = -min(r_it A, clip(r_it, 1 - eps, 1 + eps) A) + beta * KL_k3(it)
    loss     = sum_it l_it / sum_i |o_i|                       token_mean

F is ``norm``: "std", the unbiased std plus 1e-6 (GRPO's group_norm), or "none", F = 1. A
group or step group whose values are all equal (a singleton step group too) gets 0. The
anchor state of a turn is the history the policy saw before it: the prompt and every
earlier turn and observation of its episode, as token ids (``Algorithm.group_advantages``'
``turn_states``, built by zoo.run.episodes). r_k is the env's reward of turn k (the last
turn's is the episode's reward, after ``shape_rewards``), R_i = sum_k r_k(i) the
episode's return (its reward when only the last turn pays, as in the built-in envs).

Defaults: gamma = 0.95 and omega = 1 (the paper's, "without tuning"); norm = "std" (the
authors' ALFWorld and WebShop scripts, ``mode=mean_std_norm``; the paper reports both);
beta = 0.01 with the k3 estimator (their ``kl_loss_coef`` with ``low_var_kl``); eps = 0.2
(PPO's and GRPO's clip); token_mean (verl's ``token-mean``, on which their code runs).

Single-turn envs: every episode is one turn from the prompt, so the step group is the
whole group and R_0 = R: A_S = A_E and A = (1 + omega) * A_E, GRPO's advantages scaled by
1 + omega (exactly GRPO's at omega = 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from zoo.algorithms.base import Algorithm, Card, EntropyFields, KLField, LossField
from zoo.core.config import ConfigError
from zoo.core.losses import STD_EPS, group_center, group_norm
from zoo.core.types import LossOutput, TrainBatch

NORMS = ("std", "none")
DEPARTS_TOL = 1e-3
"""|A_S - A_E| above which a turn's step-level advantage counts as departing from its
episode-level one (advantages are in units of a group's std: a thousandth of one)."""


@dataclass
class GiGPOConfig(LossField, KLField, EntropyFields):
    # No ``advantage`` field: the paper fixes its two-level estimator.
    eps: float = 0.2
    """Symmetric clip on the token ratio (PPO's and GRPO's; arXiv 2505.10978 keeps it)."""
    beta: float = 0.01
    """Weight of the KL penalty to the reference (the authors' scripts: 0.01, k3)."""
    gamma: float = 0.95
    """Discount of the per-turn return-to-go R_t (arXiv 2505.10978: 0.95)."""
    omega: float = 1.0
    """Weight of the step-level advantage A_S beside A_E (arXiv 2505.10978: 1)."""
    norm: str = "std"
    """F, the divisor of both levels: "std" (unbiased std + 1e-6, GRPO's) or "none" (1)."""


class GiGPO(Algorithm):
    name = "gigpo"
    config_class = GiGPOConfig
    card = Card(
        paper="Feng et al., Group-in-Group Policy Optimization, arXiv 2505.10978 (2025)",
        family="group-relative PPO-clip",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "token_mean"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        c, owner = self.config, f"algorithm {self.name!r}"
        if c.norm not in NORMS:
            raise ConfigError(f"{owner}: norm {c.norm!r}; valid: {', '.join(NORMS)}")
        if not 0.0 <= c.gamma <= 1.0:
            raise ConfigError(f"{owner}: gamma must lie in [0, 1], got {c.gamma}")
        if c.omega < 0.0:
            raise ConfigError(f"{owner}: omega must be >= 0, got {c.omega}")
        self._tally = [0, 0, 0]  # turns, in a shared step group, departing: since last read

    # per-turn rewards for the step-level return, and the anchor states that group turns
    inputs = frozenset({"turn_rewards", "turn_states"})

    def advantages(
        self, rewards: torch.Tensor, turn_rewards: torch.Tensor, turn_states: torch.Tensor
    ) -> torch.Tensor:
        """[groups, G] episode rewards, [groups, G, K] per-turn rewards (NaN past an
        episode's end) and anchor-state ids (-1 past its end) -> [groups, G, K] advantages
        A_E + omega * A_S (0 past an episode's end); [groups, G] when K = 1."""
        c = self.config
        reached = turn_states >= 0
        step_rewards = torch.where(reached, turn_rewards, 0.0).to(rewards.dtype)
        returns = step_rewards.sum(-1)  # R_i; ``rewards`` where only the last turn pays
        episode = group_norm(returns) if c.norm == "std" else group_center(returns)
        # R_t = r_t + gamma * R_{t+1}, from the last turn back
        to_go = torch.zeros_like(step_rewards)
        later = torch.zeros_like(step_rewards[..., 0])
        for t in reversed(range(step_rewards.shape[-1])):
            later = step_rewards[..., t] + c.gamma * later
            to_go[..., t] = later
        step = self.step_relative(to_go.flatten(1), turn_states.flatten(1)).view_as(to_go)
        combined = torch.where(reached, episode[..., None] + c.omega * step, 0.0)
        self._tally_departures(episode, step, turn_states)
        return combined if combined.shape[-1] > 1 else combined[..., 0]  # single-turn: [groups, G]

    def _tally_departures(
        self, episode: torch.Tensor, step: torch.Tensor, states: torch.Tensor
    ) -> None:
        """Count the reached turns, those whose step group holds two turns or more (where
        A_S compares anything), and of those the ones whose A_S departs from A_E: where
        none does, A = (1 + omega) A_E and gigpo is GRPO with a larger step."""
        reached = states >= 0
        shared = same_state(states.flatten(1)).sum(-1).view_as(states) >= 2  # (reached only)
        departs = shared & ((step - episode[..., None]).abs() > DEPARTS_TOL)
        counts = (int(reached.sum()), int(shared.sum()), int(departs.sum()))
        self._tally = [a + b for a, b in zip(self._tally, counts, strict=True)]

    def advantage_metrics(self) -> dict[str, float]:
        """Over the turns of this step's episodes: ``step_group_shared_frac``, the share in a
        step group of two or more, and ``step_adv_departs_frac``, the share whose A_S differs
        from A_E by more than ``DEPARTS_TOL`` (0 in a single-turn env, where A_S = A_E)."""
        (turns, shared, departs), self._tally = self._tally, [0, 0, 0]
        if not turns:
            return {}
        return {"step_group_shared_frac": shared / turns, "step_adv_departs_frac": departs / turns}

    def step_relative(self, returns: torch.Tensor, states: torch.Tensor) -> torch.Tensor:
        """[groups, N] returns and state ids (-1: none) -> each one's return relative to
        the mean of its step group (equal ids in its row), divided by F of that group."""
        on = states >= 0
        same = same_state(states)
        peers = returns[:, None, :].expand_as(same)
        n = same.sum(-1).clamp(min=1)
        mean = torch.where(same, peers, 0.0).sum(-1) / n
        centred = returns - mean
        highest = torch.where(same, peers, -torch.inf).amax(-1)
        lowest = torch.where(same, peers, torch.inf).amin(-1)
        centred = torch.where(highest == lowest, 0.0, centred)  # all equal, singletons too
        if self.config.norm == "std":
            spread = torch.where(same, peers - mean[..., None], 0.0).square().sum(-1)
            centred = centred / ((spread / (n - 1).clamp(min=1)).sqrt() + STD_EPS)
        return torch.where(on, centred, 0.0)

    def loss(self, batch: TrainBatch) -> LossOutput:
        # min(r A, clip(r, 1 - eps, 1 + eps) A) - beta KL: Algorithm.ratio_surrogate
        eps = self.config.eps
        return self.ratio_surrogate(batch, 1 - eps, 1 + eps, self.config.beta)


def same_state(states: torch.Tensor) -> torch.Tensor:
    """[groups, N] state ids (-1: none) -> [groups, N, N]: do turns i and j of a group start
    from the same state (both reached)? Row i's sum is the size of i's step group."""
    on = states >= 0
    return (states[:, :, None] == states[:, None, :]) & on[:, :, None] & on[:, None, :]

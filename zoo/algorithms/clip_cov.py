"""Clip-Cov: detach the gradient of a few high-covariance tokens.

Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617, 2025 (Sec. 5). Entropy falls when tokens whose log-probability
and advantage covary strongly are pushed up; Clip-Cov removes a small random fraction of
those tokens from the update. Over the N response tokens of the rows the loss is given:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                      group_norm
    cov_t = (A_t - mean(A)) * (lp_t - mean(lp))                   (means over the N tokens)
    I     = max(floor(ratio * N), 1) tokens drawn at random from
            {t : cov_low < cov_t < cov_high, t not clipped by PPO}
    l_t   = -min(r_t A_t, clip(r_t, 1 - eps_low, 1 + eps_high) A_t)   if t not in I
            0                                                     if t in I
    loss  = sum_t l_t / sum_i |o_i|                               token_mean

Read as the authors' code (PRIME-RL/Entropy-Mechanism-of-RL) and verl's
``compute_policy_loss_clip_cov``: selected tokens contribute neither value nor gradient,
tokens the PPO clip already binds are not candidates, and the statistics are those of the
rows one loss call sees (a micro-batch, as there). The draw is reproducible: a
``torch.Generator`` seeded from ``seed`` and the batch's response tokens (count and
masked sum of ``old``), so the same rows give the same selection, after a resume too.
``cov_clip_frac`` reports the fraction of response tokens selected; ``clip_*_frac`` and
``clip_*_acting_frac`` the PPO clip's shares, out of range and gradient changed (never
the same tokens as the selection, which excludes PPO-clipped ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card
from zoo.core.losses import (
    aggregate,
    clipped_objective,
    kl_penalty,
    log_ratio,
    ratio_metrics,
    token_covariance,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class ClipCovConfig:
    cov_clip_ratio: float = 2e-4
    """r: fraction of the response tokens whose gradient is detached (Cui et al., arXiv
    2505.22617, Sec. 5's experiments: r = 2e-4)."""
    cov_low: float = 1.0
    """omega_low: candidates have covariance above it (Cui et al., Sec. 5: 1)."""
    cov_high: float = 5.0
    """omega_high: candidates have covariance below it (Cui et al., Sec. 5: 5)."""
    eps_low: float = 1.0
    """PPO clip below at 1 - eps_low; 1.0 as the authors' Clip-Cov scripts set it (no
    lower clip: the covariance clip takes the tight clip's place)."""
    eps_high: float = 1.0
    """PPO clip above at 1 + eps_high; 1.0 as the authors' Clip-Cov scripts set it."""
    seed: int = 0
    """Seed of the random draw of I, combined with the batch's tokens (reproducible runs)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0: the paper trains without one."""


def batch_generator(seed: int, batch: TrainBatch) -> torch.Generator:
    """A CPU generator seeded from ``seed`` and the batch's response tokens: the same rows
    (padding aside) always give the same draw."""
    tokens = int(batch.mask.sum())
    checksum = round(float((batch.old_logprobs.detach().double() * batch.mask).sum()) * 1e4)
    return torch.Generator().manual_seed((seed * 1_000_003 + tokens * 7919 + checksum) % 2**62)


class ClipCov(Algorithm):
    name = "clip_cov"
    config_class = ClipCovConfig
    card = Card(
        paper="Cui et al., The Entropy Mechanism of RL for Reasoning LMs, arXiv 2505.22617 (2025)",
        family="entropy control",
        # its mechanism, the covariance clip, acts whatever the ratio: declared as a token
        # selection, not as a ratio mechanism. The PPO clip at (0, 2) reports its acting
        # shares, but is a loose safeguard (the low side can never act: r > 0).
        mechanism={},
        token_selection="cov_clip_frac",
    )
    aggregation = "token_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        cfg = self.config
        low, high = 1 - cfg.eps_low, 1 + cfg.eps_high
        adv = batch.token_advantages
        ratio = torch.exp(log_ratio(batch))
        surrogate = clipped_objective(ratio, adv, low, high)

        ppo_clipped = torch.clamp(ratio, low, high) * adv < ratio * adv
        cov = token_covariance(batch)
        candidates = (batch.mask > 0) & ~ppo_clipped & (cov > cfg.cov_low) & (cov < cfg.cov_high)
        where = torch.nonzero(candidates.cpu())  # row-major: padding does not reorder them
        count = max(int(cfg.cov_clip_ratio * float(batch.mask.sum())), 1)
        drawn = where[torch.randperm(len(where), generator=batch_generator(cfg.seed, batch))]
        keep = torch.ones_like(surrogate)
        rows, cols = drawn[:count].T.to(keep.device)
        keep[rows, cols] = 0.0

        penalty, kl_metrics = kl_penalty(batch, cfg.beta)
        loss = aggregate(-surrogate * keep + penalty, batch, self.aggregation)

        metrics = ratio_metrics(ratio, batch, low, high, adv)
        tokens = max(float(batch.mask.sum()), 1.0)
        metrics["cov_clip_frac"] = float(((keep == 0) & (batch.mask > 0)).sum()) / tokens
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

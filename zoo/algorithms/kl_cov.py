"""KL-Cov: a KL penalty on the top-k covariance tokens.

Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617, 2025 (Sec. 5). Where Clip-Cov removes high-covariance tokens
from the update, KL-Cov keeps them but holds them near the sampling policy. Over the N
response tokens of the rows the loss is given:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                      group_norm
    cov_t = (A_t - mean(A)) * (lp_t - mean(lp))                   (means over the N tokens)
    I     = the max(floor(k * N), 1) tokens of largest cov_t, among those with cov_t > 0
    l_t   = -r_t A_t + kl_coef * |lp_t - old_t| * [t in I]
    loss  = sum_t l_t / sum_i |o_i|                               token_mean

Read as the authors' code and verl's ``compute_policy_loss_kl_cov``: no PPO clip, the
penalty is |log r| (their estimate of KL(pi_old || pi_theta)), and the statistics are
those of the rows one loss call sees (a micro-batch, as there). One choice of ours: only
tokens of positive covariance are candidates. The top k of a real batch always are, and
without it a batch of all-zero advantages (every cov_t = 0) would still pay a penalty.
At r = 1 the penalty and its gradient are 0: on-policy KL-Cov is REINFORCE.
``kl_cov_frac`` is the fraction of response tokens in I, ``kl_cov_penalty`` the mean
penalty over response tokens (0 while the ratio is 1), ``kl_cov_acting_frac`` the share
of response tokens whose gradient the penalty changed: those in I with lp_t != old_t
(the gradient of kl_coef |d| is kl_coef sgn(d), full size however small d is, and 0 at
d = 0). The mean penalty is above 0 exactly when that share is, but a tolerance on it
would miss a penalty acting on tiny log-ratios; the share does not.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card
from zoo.core.losses import (
    aggregate,
    kl_penalty,
    log_ratio,
    masked_mean,
    ratio_metrics,
    token_covariance,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class KLCovConfig:
    kl_cov_ratio: float = 2e-3
    """k: fraction of the response tokens penalised (Cui et al., arXiv 2505.22617, Sec. 5's
    experiments: 2e-3 for Qwen2.5-7B, 2e-4 for Qwen2.5-32B)."""
    kl_coef: float = 1.0
    """Weight of the |log r| penalty on the selected tokens (Cui et al., Sec. 5: 1)."""
    beta: float = 0.0
    """Weight of a k3 KL penalty to the reference; 0: the paper trains without one."""


class KLCov(Algorithm):
    name = "kl_cov"
    config_class = KLCovConfig
    card = Card(
        paper="Cui et al., The Entropy Mechanism of RL for Reasoning LMs, arXiv 2505.22617 (2025)",
        family="entropy control",
        clip_style="none",
        mechanism={"kl_cov_acting_frac": 0.0},
        token_selection="kl_cov_frac",
    )
    aggregation = "token_mean"

    def loss(self, batch: TrainBatch) -> LossOutput:
        cfg = self.config
        d = log_ratio(batch)
        ratio = torch.exp(d)

        cov = token_covariance(batch)
        candidates = (batch.mask > 0) & (cov > 0)
        count = min(max(int(cfg.kl_cov_ratio * float(batch.mask.sum())), 1), int(candidates.sum()))
        scores = cov.masked_fill(~candidates, float("-inf")).flatten()
        selected = torch.zeros_like(scores)
        selected[torch.topk(scores, count).indices] = 1.0
        selected = selected.view_as(d)

        kl_cov = cfg.kl_coef * d.abs() * selected
        penalty, kl_metrics = kl_penalty(batch, cfg.beta)
        per_token = -ratio * batch.token_advantages + kl_cov + penalty
        loss = aggregate(per_token, batch, self.aggregation)

        metrics = ratio_metrics(ratio, batch, low=None, high=None)
        metrics["kl_cov_frac"] = masked_mean(selected, batch.mask)
        metrics["kl_cov_penalty"] = masked_mean(kl_cov.detach(), batch.mask)
        acting = (cfg.kl_coef * selected != 0) & (d.detach() != 0)  # gradient kl_coef sgn(d)
        metrics["kl_cov_acting_frac"] = masked_mean(acting.to(d.dtype), batch.mask)
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

"""custom: PPO-clip with a KL penalty, written as the template for your own algorithm.

Copy this file to start a plugin. The loss below is PPO's clipped objective (Schulman et
al., "Proximal Policy Optimization Algorithms", arXiv 1707.06347, eq. 7) plus a k3 KL
penalty to the reference, with GRPO's group-normalised advantages:

    A_i   = (R_i - mean(R)) / (std(R) + 1e-6)                  group_norm (the default)
    r_it  = exp(lp_it - old_it)
    l_it  = -min(r_it A_i, clip(r_it, 1 - clip_range, 1 + clip_range) A_i) + beta * KL_k3(it)
    loss  = (1/B) sum_i (1/|o_i|) sum_t l_it                    seq_mean

Dual-clip PPO (Ye et al., "Mastering Complex Control in MOBA Games with Deep Reinforcement
Learning", arXiv 1912.09729), off by default (``dual_clip = 0``): with c =
``dual_clip`` > 1 (the paper uses 3), a token with A_i < 0 has the objective
max(min(r A, clip(r) A), c A), so once its ratio passes c it gets no gradient (a
negative advantage times a huge ratio cannot dominate the update); A >= 0 is unchanged.
It reports ``dual_clip_frac``, the fraction of response tokens where the bound binds.
That is exactly the share whose gradient the dual clip changed: for A < 0 the PPO
objective is A max(r, 1 - clip_range), so c A binds where r > c, and there the
objective is the constant c A instead of r A (no gradient instead of -A grad r); a
token with A = 0 never binds (c A = 0 = the objective).

How to write a plugin
  1. A config dataclass: one field per hyperparameter, each with its paper default and a
     docstring under it. Overrides (``get_algorithm("custom", clip_range=0.3)``, or
     ``python -m harness run custom --set clip_range=0.3``) are checked against these
     fields. A field named ``beta`` turns the reference model on when it is > 0.
  2. A subclass of ``Algorithm`` with ``name``, ``config_class`` and a ``card``
     (zoo/core/types.py: ``paper``, ``family``, ``clip_style``, ``sequence_level``,
     ``mechanism``, ``token_selection``), and a ``loss(batch)`` returning
     ``LossOutput(loss, metrics)``: minus the objective, a scalar. The batch holds [B, T]
     tensors ``logprobs`` (with grad), ``old_logprobs``, ``ref_logprobs``, ``mask`` and
     ``advantages``; always reduce with ``aggregate(per_token, batch, self.aggregation)``
     so padding never counts and micro-batches add up to the whole batch.
  3. Optionally override the other hooks (docs/algorithms.md, "The plugin contract"):
     ``advantages(rewards, lengths=None)``, declaring in ``inputs`` exactly the inputs
     it takes beside the rewards (the default's: {"lengths"}; ``frozenset()`` for
     ``advantages(rewards)``; "turn_rewards", "turn_states" and "greedy_rewards" too, see
     gigpo.py and remax.py), ``shape_rewards(rewards, lengths, max_response_len)``,
     ``keep(rewards)`` and ``train_mask(truncated)`` (see opo.py and dapo.py). Or pick a
     shared estimator without code: fields ``advantage`` (zoo.core.losses
     .ADVANTAGE_ESTIMATORS: group_norm, group_center, rloo, reinforce_pp,
     reinforce_pp_baseline, opo) and ``kl`` (KL_ESTIMATORS: k1, k2, k3, passed to
     ``kl_penalty``) are read by the base class and checked when the algorithm is built.
     The card's ``mechanism`` names your loss's acting shares, each idle at 0: the share
     of response tokens whose gradient the clip, cap or gate changed once the ratio moved
     away from 1 (each rollout batch trains in several mini-batches, so it does after the
     first), not the share merely out of range; ``ratio_metrics(..., advantages)`` gives
     them for PPO's clip. check-plugin and the compare report read it. Set
     ``aggregation`` beside the card: the loss computes with it.

How to register it
  - In this repository: add ``"name": "zoo.algorithms.<module>:<Class>"`` to ``builtins``
    in zoo/algorithms/__init__.py.
  - In your own package (no change to forge-zoo): declare an entry point in the group
    ``zoo.algorithms`` in your pyproject.toml, then ``pip install -e .``::

        [project.entry-points."zoo.algorithms"]
        myalgo = "my_package.myalgo:MyAlgo"

    A built-in name cannot be taken. Check your plugin against the invariants of
    docs/algorithms.md with ``python -m harness check-plugin myalgo``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from zoo.algorithms.base import Algorithm, Card, EstimatorFields
from zoo.core.config import ConfigError
from zoo.core.losses import (
    aggregate,
    clipped_objective,
    dual_clipped_objective,
    kl_penalty,
    log_ratio,
    masked_mean,
    ratio_metrics,
)
from zoo.core.types import LossOutput, TrainBatch


@dataclass
class CustomConfig(EstimatorFields):
    clip_range: float = 0.2
    """Symmetric clip range on the token ratio (PPO, arXiv 1707.06347, Sec. 3)."""
    beta: float = 0.1
    """Weight of the k3 KL penalty to the reference (Schulman, "Approximating KL", 2020)."""
    dual_clip: float = 0.0
    """Dual-clip bound c > 1 on the objective of A < 0 tokens, max(., c A); 0: off (dual-clip
    PPO, Ye et al., arXiv 1912.09729, uses c = 3)."""

    def __post_init__(self) -> None:
        if self.dual_clip != 0 and self.dual_clip <= 1:
            raise ConfigError(f"custom dual_clip must be 0 (off) or > 1, got {self.dual_clip}")


class Custom(Algorithm):
    name = "custom"
    config_class = CustomConfig
    card = Card(
        paper="Schulman et al., Proximal Policy Optimization Algorithms, arXiv 1707.06347 (2017)",
        # its heading in `harness list algorithms`
        family="group-relative PPO-clip",
        # a token whose ratio is clipped gets no policy gradient
        clip_style="zero",
        # the shares of tokens whose gradient its mechanism changed, each idle at 0
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )
    aggregation = "seq_mean"  # (1/B) sum_i (1/|o_i|) sum_t

    def loss(self, batch: TrainBatch) -> LossOutput:
        eps, beta = self.config.clip_range, self.config.beta
        advantages = batch.token_advantages  # [B, T], A_i on every token of o_i
        ratio = torch.exp(log_ratio(batch))  # r_it, exactly 1 on padding

        surrogate = clipped_objective(ratio, advantages, 1 - eps, 1 + eps)  # min(r A, clip(r) A)
        dual = {}
        if self.config.dual_clip:  # max(min(r A, clip(r) A), c A) where A < 0
            bounded = dual_clipped_objective(surrogate, advantages, self.config.dual_clip)
            # where c A binds (A < 0, r > c) the objective is the constant c A: binding is
            # exactly "gradient zeroed", and never overlaps the PPO clip (r < 1 - eps there)
            binds = (bounded > surrogate).to(ratio.dtype)
            dual = {"dual_clip_frac": masked_mean(binds, batch.mask)}
            surrogate = bounded
        penalty, kl_metrics = kl_penalty(batch, beta, self.config.kl)  # beta * KL, {"kl": ..}
        loss = aggregate(-surrogate + penalty, batch, self.aggregation)  # minus the objective

        # ratio_mean, ratio_max; clip_*_frac out of range, clip_*_acting_frac gradient changed
        metrics = ratio_metrics(ratio, batch, 1 - eps, 1 + eps, advantages)
        metrics.update(dual)
        return LossOutput(loss, {"loss": float(loss.detach()), **metrics, **kl_metrics})

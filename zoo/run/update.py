"""The optimizer-update part of a step: from a packed rollout batch to trained weights.

In order, each phase timed and charged to the ledger: the old log-probs (unless the
update's own first forward gives them), the reference's, the trainer-sampler mismatch
figures, the critic's values and targets (an algorithm with ``needs_values``), the
off-policy correction, KL control (zoo.run.kl_control), the trainer's updates, and the
critic's. What the loop decides before (how much of the budget is spent, whether the
old-log-prob pass can be skipped) comes in as arguments, so this module holds no run
state of its own."""

from __future__ import annotations

from typing import Any

import torch

from zoo.core.losses import KL_ESTIMATORS, explained_variance, last_token_rewards, masked_mean
from zoo.run.kl_control import FixedKLController
from zoo.run.run_config import RunConfig
from zoo.run.services import Services
from zoo.services.batch import RolloutBatch
from zoo.services.offpolicy import correction_weights, mismatch_metrics


def train_batch(
    cfg: RunConfig,
    s: Services,
    kl: FixedKLController,
    batch: RolloutBatch,
    shapes: list[tuple[int, int]],
    own_forward: bool,
) -> dict[str, Any]:
    """Train on ``batch``, whose rows have the (prompt, response) lengths ``shapes`` (a
    response masked out of the loss still passes through every forward, so it is charged).
    ``own_forward``: the trainer's first forward gives the old log-probs, so no pass of
    its own computes them. Returns the step's figures of the update."""
    ledger = s.ledger
    tokens = sum(p + r for p, r in shapes)
    forward = sum(ledger.scoring_flops(p, r) for p, r in shapes)
    if not own_forward:
        with ledger.timed("old_logprobs"):
            batch.old_logprobs = s.trainer.logprobs(batch)
        ledger.add("old_logprobs", forward, tokens)
    if s.algorithm.needs_reference:
        with ledger.timed("reference"):
            batch.ref_logprobs = s.reference.logprobs(batch)
        ledger.add("reference", forward, tokens)
    record = {}
    if not own_forward:  # (else the update's forward gives them, below)
        record = mismatch_metrics(batch.old_logprobs, batch.sampler_logprobs, batch.mask)
    if s.algorithm.needs_values:  # GAE's advantages, before a correction weighs them
        record.update(critic_targets(s, batch, shapes))
    weights, correction = correction_weights(
        cfg.correction.correction,
        batch.old_logprobs,
        batch.sampler_logprobs,
        batch.mask,
        cap=cfg.correction.correction_cap,
        low=cfg.correction.correction_low,
        high=cfg.correction.correction_high,
    )
    record.update(correction)
    if weights is not None:  # on the policy-gradient term only: through the advantages
        advantages = batch.advantages
        advantages = advantages if advantages.dim() == 2 else advantages[:, None]
        batch.advantages = advantages * weights
    if cfg.correction.correction == "bypass":
        batch.old_logprobs = batch.sampler_logprobs
    measured_kl, responses = kl.apply(batch, record), batch.size
    with ledger.timed("train"):
        trained = s.trainer.train(batch, s.algorithm.loss)
    ledger.add("train", cfg.regime.epochs * 3 * forward, cfg.regime.epochs * tokens)
    if own_forward:
        batch.old_logprobs = trained.pop("old_logprobs")
        record.update(mismatch_metrics(batch.old_logprobs, batch.sampler_logprobs, batch.mask))
    record.update(trained)
    if s.algorithm.needs_values:  # the critic's forward and backward, per pass
        with ledger.timed("critic_train"):
            record.update(s.critic.train(batch, s.algorithm.value_loss))
        value = sum(ledger.value_flops(p, r) for p, r in shapes)
        ledger.add("critic_train", cfg.regime.epochs * 3 * value, cfg.regime.epochs * tokens)
    if measured_kl is not None:
        # moved only now, so that this step trains (and a checkpoint of it holds) the
        # weight its KL was measured with
        kl.update(measured_kl, responses)
    return record


def critic_targets(
    s: Services, batch: RolloutBatch, shapes: list[tuple[int, int]]
) -> dict[str, Any]:
    """For an algorithm with a critic (``needs_values``): the critic's values of the
    batch's response tokens (charged to ``critic``), the per-token rewards (each
    response's reward, as its ``advantages`` hook gave it, on its last token; with
    ``kl_in_reward``, minus beta * KL of old against ref on every token, the algorithm's
    ``kl`` estimator), and from them the algorithm's per-token advantages and the critic's
    targets (``batch.advantages``, ``batch.returns``). Logged: ``value_mean``,
    ``return_mean`` and ``explained_variance`` of the values, which the critic predicted
    before training on this batch, over response tokens."""
    ledger, algo, mask = s.ledger, s.algorithm, batch.mask
    with ledger.timed("critic"):
        batch.values = s.critic.values(batch)
    ledger.add(
        "critic",
        sum(ledger.value_flops(p, r) for p, r in shapes),
        sum(p + r for p, r in shapes),
    )
    rewards, record = last_token_rewards(batch.advantages, mask), {}
    if algo.kl_in_reward_by_loop:
        kl = KL_ESTIMATORS[algo.kl_estimator](batch.old_logprobs, batch.ref_logprobs)
        kl = torch.where(mask > 0, kl, 0.0)
        rewards, record["kl"] = rewards - algo.kl_coef * kl, masked_mean(kl, mask)
    batch.advantages, batch.returns = algo.token_advantages(rewards, batch.values, mask)
    v, returns = batch.values, batch.returns
    return {
        **record,
        "value_mean": masked_mean(v, mask),
        "return_mean": masked_mean(returns, mask),
        "explained_variance": explained_variance(v, returns, mask),
    }

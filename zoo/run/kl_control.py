"""KL control: what the loop does with the algorithm's shared KL options
(``zoo.algorithms.base.SharedOptions``) around each update, as one object per run.

Shaped after verl's ``FixedKLController`` and ``AdaptiveKLController``: ``value`` is the
KL weight in force, ``update(current_kl, n_steps)`` moves it for the next step (the
adaptive one; the fixed one leaves it). The weight itself stays on the algorithm
(``Algorithm.kl_coef`` / ``set_kl_coef``): its loss reads it there, a checkpoint saves it
from there, and a trainer in another process gets it with each batch. A controller is
therefore only a view of the algorithm, cheap to make and holding nothing a resume would
have to restore.

Before the update, ``apply`` does the two things the options ask of the loop:

- ``kl_in_reward``: subtract the KL return beta * sum_{s >= t} KL_s of the sampling
  policy against the reference (``kl_reward_to_go``, the algorithm's ``kl`` estimator;
  with ``kl_reward_credit = token`` each token's own beta * KL_t) from each token's
  advantage, after any off-policy correction weights, as reinforce_pp's own KL in the
  reward does; ``kl`` goes to the record (the loss, at beta 0, reports none). An
  algorithm with a critic has it in GAE's per-token rewards instead
  (``zoo.run.update.critic_targets``).
- ``kl_target`` (adaptive KL): log the weight this step trains with, ``kl_coef``, and
  the KL the controller reads, ``kl_rollout`` (the ``kl`` estimator of old against ref:
  the sampling policy's, before this step's updates, averaged as ``kl_rollout_mean``
  says: over response tokens by default, where verl takes each response's token mean of
  k1, then their mean); and hand the weight to the trainer with the batch.

After the update, the loop calls ``update`` with the KL that ``apply`` measured and the
batch's responses: the next step's weight (``adaptive_kl_coef``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from zoo.core.losses import KL_ESTIMATORS, adaptive_kl_coef, kl_reward_to_go, rollout_kl
from zoo.core.types import TrainBatch
from zoo.services.batch import RolloutBatch

if TYPE_CHECKING:  # (the run reaches plugins only through their registries)
    from zoo.algorithms.base import Algorithm


class FixedKLController:
    """A KL weight that stays where the config set it."""

    adaptive = False

    def __init__(self, algorithm: Algorithm) -> None:
        self.algorithm = algorithm

    @property
    def value(self) -> float:
        """The weight in force: the algorithm's (what its loss reads)."""
        return self.algorithm.kl_coef

    def apply(self, batch: RolloutBatch, record: dict[str, Any]) -> float | None:
        """The KL options on ``batch``, whose old and reference log-probs are set, before
        it is trained on (the module's docstring); figures go to ``record``. Returns the
        KL an adaptive controller reads (None when the weight does not adapt)."""
        algo = self.algorithm
        if not (self.adaptive or algo.kl_in_reward_by_loop):
            return None  # no KL option acts in the loop: the batch is left as it is
        old, ref = batch.old_logprobs, batch.ref_logprobs
        view = TrainBatch(old, old, ref, batch.advantages, batch.mask)
        if algo.kl_in_reward_by_loop and not algo.needs_values:  # (a critic's: in GAE)
            kl_return, kl_metrics = kl_reward_to_go(
                view, algo.kl_coef, algo.kl_estimator, algo.options.kl_reward_credit
            )
            advantages = batch.advantages
            advantages = advantages if advantages.dim() == 2 else advantages[:, None]
            batch.advantages = advantages - kl_return
            record.update(kl_metrics)
        if not self.adaptive:
            return None
        kl = KL_ESTIMATORS[algo.kl_estimator](old, ref)
        measured = rollout_kl(kl, view.mask, algo.options.kl_rollout_mean)
        record.update({"kl_coef": self.value, "kl_rollout": measured})
        # a trainer in another process holds its own copy of the algorithm: the weight
        # travels with the batch
        batch.kl_coef = self.value
        return measured

    def next_value(self, current_kl: float, n_steps: int) -> float:
        """The weight the next step trains with, given this step's measured KL."""
        return self.value

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move the weight for the next step (and the checkpoint): here, nowhere."""


class AdaptiveKLController(FixedKLController):
    """A weight steered towards the algorithm's ``kl_target`` over ``kl_horizon``
    responses (Ziegler et al., arXiv 1909.08593, Sec. 2.2; ``adaptive_kl_coef``)."""

    adaptive = True

    def next_value(self, current_kl: float, n_steps: int) -> float:
        options = self.algorithm.options
        return adaptive_kl_coef(
            self.value, current_kl, options.kl_target, options.kl_horizon, n_steps
        )

    def update(self, current_kl: float, n_steps: int) -> None:
        self.algorithm.set_kl_coef(self.next_value(current_kl, n_steps))


def kl_controller(algorithm: Algorithm) -> FixedKLController:
    """The controller of ``algorithm``'s KL weight: adaptive when it sets a ``kl_target``."""
    if algorithm.options.kl_target > 0:
        return AdaptiveKLController(algorithm)
    return FixedKLController(algorithm)

"""Options and config fields that several algorithms share, declared once.

``SharedOptions`` are the options any algorithm takes beside its own config where they
apply (the KL controller and the KL-in-reward convention where the config has a KL weight
``beta``, ``pass_k`` where it has an ``advantage`` field); ``make_shared_options`` checks
them when an algorithm is built and ``check_shared_options`` against a run's group size
and batch. The field groups (``AdvantageField``, ``KLField``, ``LossField``,
``EstimatorFields``, ``PolicyLossFields``, ``EntropyFields``) are what a plugin's config
subclasses; ``zoo.algorithms.base`` re-exports them, where plugins have always imported
them from. Nothing here knows an algorithm class: it reads a config dataclass. Not a
plugin: the registry names none of it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from zoo.core.config import ConfigError, make_config
from zoo.core.losses import DEFAULT_PASS_K, KL_ERROR_CLIP, KL_REWARD_CREDITS, KL_ROLLOUT_MEANS


@dataclasses.dataclass
class SharedOptions:
    """Options any algorithm takes beside its own config where they apply (``--set
    kl_target=0.05``): the KL ones where the config has a KL weight ``beta``, ``pass_k``
    where it has an ``advantage`` field. A config that declares one of these fields itself
    keeps its own (reinforce_pp's ``kl_in_reward``, which its loss applies)."""

    kl_target: float = 0.0
    """Target KL of the adaptive KL controller (Ziegler et al., arXiv 1909.08593, Sec. 2.2),
    in the unit of the logged ``kl_rollout``: the config's ``kl`` estimator (k3 without
    one) of the sampling policy against the reference, averaged as ``kl_rollout_mean``
    says (over response tokens by default). Each step moves beta by the factor
    1 + clip(KL / kl_target - 1, -0.2, 0.2) * responses / kl_horizon. 0: beta stays fixed
    (the default; verl's default target is 0.1, in its unit: ``kl_rollout_mean``)."""
    kl_horizon: int = 10000
    """The controller's horizon, in responses: K_beta = responses per step / kl_horizon
    (10000 as in lm-human-preferences, verl, OpenRLHF and TRL)."""
    kl_in_reward: bool = False
    """True: each token is charged -beta * KL of the sampling policy as a reward, and with
    gamma = 1 the KL return beta * sum_{s >= t} KL_s is subtracted from its advantage
    (``kl_reward_to_go``; Ziegler et al.; REINFORCE++, arXiv 2501.03262), the loss adding
    no KL term. False: + beta * KL per token in the loss (every built-in's default but
    reinforce_pp's). The KL is the config's ``kl`` estimator: k3 for most built-ins, where
    Ziegler et al. and InstructGPT charge k1, log(pi / pi_ref) (``--set kl=k1``)."""
    kl_rollout_mean: str = "token_mean"
    """How the adaptive controller (``kl_target``) averages the per-token KL of a step:
    "token_mean", over the step's response tokens (this zoo's default); "seq_mean", each
    response's token mean, then the mean over responses (verl's ``apply_kl_penalty``,
    which with ``kl = k1`` is verl's measure). Only with ``kl_target > 0``."""
    kl_reward_credit: str = "to_go"
    """Where a KL charged in the reward (``kl_in_reward``, the shared option or
    reinforce_pp's own) enters a token's advantage: "to_go", the KL summed from the token
    to the end of the response (gamma = 1; REINFORCE++, verl, OpenRLHF); "token", the
    token's own KL only (the ReMax authors' code, arXiv 2310.10505). Not for an algorithm
    with a critic, whose GAE sums the per-token KL rewards its own way."""
    pass_k: int = DEFAULT_PASS_K
    """k of ``advantage = "pass_at_k"`` (Chen et al., arXiv 2508.10751); 1 <= k <= group
    size."""


KL_OPTIONS = ("kl_target", "kl_horizon", "kl_in_reward", "kl_rollout_mean", "kl_reward_credit")


# Config fields that several built-ins share, each declared once here. A plugin's config
# subclasses the groups it has; one that needs another default redeclares only the line
# ``advantage: str = "rloo"`` (its documentation stays the one below).


# Each single field is its own group too, for a config that has some of them but not
# another (remax has ``kl`` and ``loss``, but no ``advantage``: its paper fixes the
# baseline). The groups combine base-last, so a dataclass lists their fields in the order
# ``advantage, kl, loss`` as it always has (config.json and ``list algorithms`` keep it).


@dataclasses.dataclass
class AdvantageField:
    advantage: str = "group_norm"
    """Advantage estimator by name (zoo.core.losses.ADVANTAGE_ESTIMATORS; docs/algorithms.md,
    "Advantage estimators"); group_norm is GRPO's (DeepSeekMath, arXiv 2402.03300, eq. 3)."""


@dataclasses.dataclass
class KLField:
    kl: str = "k3"
    """Estimator of the KL penalty weighted by beta (zoo.core.losses.KL_ESTIMATORS: k1, k2,
    k3); k3 is GRPO's (DeepSeekMath, arXiv 2402.03300, eq. 4). Idle while beta is 0."""


@dataclasses.dataclass
class LossField:
    loss: str = "ppo_clip"
    """Policy loss by name (zoo.core.losses.POLICY_LOSSES) at this algorithm's ratio bounds:
    ppo_clip, PPO's clipped surrogate (arXiv 1707.06347, eq. 7); cispo, the ratio capped at
    the upper bound as a REINFORCE weight (arXiv 2506.13585); unclipped, r A, no bound."""


@dataclasses.dataclass
class EstimatorFields(KLField, AdvantageField):
    """The shared estimators by name: the advantage and the KL penalty's."""


@dataclasses.dataclass
class PolicyLossFields(LossField, EstimatorFields):
    """The shared estimators, and the policy loss of a plugin that bounds a token ratio."""


@dataclasses.dataclass
class EntropyFields:
    """The entropy options (zoo/core/entropy.py), both off by default."""

    entropy_coef: float = 0.0
    """Entropy bonus c: loss -= c * aggregate(H) over the policy's per-token entropy
    (zoo/core/entropy.py; PPO, arXiv 1707.06347, eq. 9). 0: off, as in the paper."""
    entropy_top_share: float = 1.0
    """Policy gradient only on this top share of response tokens by entropy (Wang et
    al., arXiv 2506.01939, keep 0.2). 1: every token, as in the paper."""


def make_shared_options(
    config: Any, shared: dict[str, Any], owner: str, critic: bool = False
) -> SharedOptions:
    """The ``SharedOptions`` of an algorithm with ``config`` built from ``shared`` (the
    overrides that name a shared option), refusing one that does not apply to this config
    (no ``beta`` for the KL ones, no ``advantage`` for ``pass_k``), is out of range, or
    names a KL convention that would change nothing (``critic``: the algorithm has a
    learned critic, whose GAE sums the per-token KL rewards its own way)."""
    options = make_config(SharedOptions, shared, owner=f"{owner} (shared options)")
    kl_given = sorted(set(shared) & set(KL_OPTIONS))
    if kl_given and not hasattr(config, "beta"):
        raise ConfigError(
            f"{owner} has no KL coefficient (config field beta), so "
            f"{', '.join(kl_given)} cannot apply to it"
        )
    if "pass_k" in shared and not hasattr(config, "advantage"):
        raise ConfigError(f"{owner} has no advantage field, so pass_k cannot apply to it")
    if options.kl_target < 0:
        raise ConfigError(
            f"{owner}: kl_target must be >= 0 (0: fixed beta), got {options.kl_target}"
        )
    if options.kl_horizon < 1:
        raise ConfigError(f"{owner}: kl_horizon must be >= 1, got {options.kl_horizon}")
    if options.pass_k < 1:
        raise ConfigError(f"{owner}: pass_k must be >= 1, got {options.pass_k}")
    _check_kl_conventions(config, options, owner, critic)
    return options


def _check_kl_conventions(config: Any, options: SharedOptions, owner: str, critic: bool) -> None:
    """Refuse a KL convention that names no valid choice, or one that would change
    nothing in this run (a silent no-op would read as a measured difference)."""
    choices = {"kl_rollout_mean": KL_ROLLOUT_MEANS, "kl_reward_credit": KL_REWARD_CREDITS}
    for field, valid in choices.items():
        if getattr(options, field) not in valid:
            raise ConfigError(
                f"{owner}: {field} {getattr(options, field)!r}; valid: {', '.join(valid)}"
            )
    if options.kl_rollout_mean != "token_mean" and options.kl_target <= 0:
        raise ConfigError(
            f"{owner}: kl_rollout_mean = {options.kl_rollout_mean} sets how the adaptive "
            "KL is measured; it needs kl_target > 0"
        )
    if options.kl_reward_credit != "to_go":
        in_reward = options.kl_in_reward or bool(getattr(config, "kl_in_reward", False))
        if not in_reward:
            raise ConfigError(
                f"{owner}: kl_reward_credit = {options.kl_reward_credit} sets how a KL in "
                "the reward reaches the advantages; it needs kl_in_reward = true"
            )
        if critic:
            raise ConfigError(
                f"{owner}: kl_reward_credit applies to critic-free advantages; a critic's "
                "GAE sums the per-token KL rewards itself (gamma, lam)"
            )


def check_shared_options(
    config: Any,
    options: SharedOptions,
    *,
    kl_coef: float,
    kl_in_reward: bool,
    group_size: int,
    responses_per_step: int,
    owner: str,
) -> None:
    """Refuse shared options that cannot work in a run with groups of ``group_size`` and
    up to ``responses_per_step`` responses per step (ConfigError naming the value): pass@k
    with k outside [1, group size], an adaptive or in-reward KL (``kl_in_reward``: the
    loop charges it) with a KL weight ``kl_coef`` of 0 (the controller scales beta, so 0
    stays 0), and a horizon so short that one step could take beta to 0 or below
    (0.2 * responses / kl_horizon >= 1)."""
    k = options.pass_k
    if getattr(config, "advantage", None) == "pass_at_k" and not 1 <= k <= group_size:
        raise ConfigError(
            f"{owner}: pass_k = {k} with advantage = pass_at_k needs 1 <= pass_k <= the "
            f"group size ({group_size}): set --set pass_k=K or a larger --group-size"
        )
    adaptive = options.kl_target > 0
    for on, what in ((adaptive, "kl_target"), (kl_in_reward, "kl_in_reward")):
        if on and kl_coef <= 0:
            raise ConfigError(
                f"{owner}: {what} needs a KL weight beta > 0 (its starting value), "
                f"got beta = {kl_coef}"
            )
    if adaptive and KL_ERROR_CLIP * responses_per_step >= options.kl_horizon:
        raise ConfigError(
            f"{owner}: kl_horizon = {options.kl_horizon} is too short for "
            f"{responses_per_step} responses per step: one step may scale beta by "
            f"1 -+ 0.2 * {responses_per_step} / kl_horizon, which must stay above 0 "
            f"(use kl_horizon > {KL_ERROR_CLIP * responses_per_step:g})"
        )

"""The algorithm plugin base class. A plugin sets ``name``, ``config_class`` and ``paper``
and writes ``loss``; it may override ``advantages``, ``shape_rewards``, ``keep`` and
``train_mask``.
It never sees a process, a device or a mesh: only tensors of rewards and a TrainBatch.

Shared estimators by name: a config field ``advantage`` picks one of
``zoo.core.losses.ADVANTAGE_ESTIMATORS`` (the default ``advantages`` reads it) and a field
``kl`` one of ``KL_ESTIMATORS`` (the loss passes ``self.config.kl`` to ``kl_penalty``);
both are checked when the algorithm is built, so ``--set advantage=nope`` fails at once,
naming the valid choices.

Response lengths: the loop calls ``group_advantages(rewards, lengths)``, which passes
``lengths`` ([groups, G] tokens) to ``advantages`` when its signature has a ``lengths``
parameter (OPO's length-weighted baseline needs them) and calls ``advantages(rewards)``
otherwise, so a plugin written as ``def advantages(self, rewards)`` keeps working.

Per-turn credit (multi-turn envs, docs/multi-turn.md): when ``advantages`` also has a
``turn_rewards`` parameter, the loop passes each episode's per-turn rewards as a
[groups, G, K] tensor (K: the most turns of any episode in the batch; NaN after an
episode's last turn; the last turn's entry is the episode's reward). Such an override may
return [groups, G, K] advantages, one per assistant turn: every token of turn k then
carries advantage k. A single-turn env passes K = 1.

More class attributes describe the loss to generic checks (zoo/algorithms/conformance.py),
to the compare report, to ``harness list algorithms`` and to readers; they do not change
what the loss does: ``family``, ``aggregation``, ``clip_style``, ``sequence_level``,
``mechanism`` and ``token_selection``."""

from __future__ import annotations

import dataclasses
import inspect
from abc import ABC, abstractmethod
from typing import Any, ClassVar, Literal

import torch

from zoo.core.config import ConfigError, make_config
from zoo.core.losses import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
    Aggregation,
    choose,
    estimate_advantages,
)
from zoo.core.types import LossOutput, TrainBatch


class Algorithm(ABC):
    name: ClassVar[str] = ""
    config_class: ClassVar[type]
    paper: ClassVar[str] = ""
    """The paper it follows: authors, title, arXiv id."""
    family: ClassVar[str] = "other"
    """The family ``harness list algorithms`` groups it under, e.g. "group-relative
    PPO-clip", "sequence-level", "soft/capped ratio", "REINFORCE-style", "entropy
    control", "geometric mean" (docs/algorithms.md); "other" for a plugin that says none."""
    aggregation: ClassVar[Aggregation] = "seq_mean"
    """How ``loss`` reduces per-token terms to a scalar: "seq_mean", "token_mean" or
    "fixed" (docs/algorithms.md, "Aggregation modes"). Pass it to
    ``zoo.core.losses.aggregate``; the conformance suite builds its REINFORCE reference
    -A*lp under the same mode. ``--set aggregation=token_mean`` overrides it for one run
    (an ablation); the plugin must then reduce with ``self.aggregation``."""
    clip_style: ClassVar[Literal["zero", "cap", "none"]] = "zero"
    """What happens to a token with A > 0 whose ratio is above the upper clip:
    "zero": PPO-style clip, its gradient is zero (GRPO, DAPO, GSPO, ...);
    "cap": the ratio's weight is capped, the gradient stays nonzero (CISPO);
    "none": no hard clip (SAPO's soft gate)."""
    sequence_level: ClassVar[bool] = False
    """True when the loss sees a sequence's tokens only through its mean log-ratio
    (GSPO's sequence ratio)."""
    mechanism: ClassVar[dict[str, float]] = {}
    """What the loss does once the ratio moves away from 1, as its acting shares: metric
    name -> idle value, always 0.0. An acting share counts the response tokens (or, named
    ``seq_...``, the sequences) whose gradient the clip, cap or gate changed, not those
    whose ratio is merely out of range: a token with A = 0, or out of range on the side its
    advantage does not push, is not counted. {"clip_low_acting_frac": 0.0,
    "clip_high_acting_frac": 0.0} for a PPO clip, {"capped_acting_frac": 0.0} for CISPO's
    cap, {"gate_acting_frac": 0.0} for SAPO's gate (docs/algorithms.md). ``check-plugin``
    and the compare report say from it whether the mechanism acted; empty: the algorithm
    declares none."""
    token_selection: ClassVar[str] = ""
    """For a loss that treats a few tokens differently, chosen from statistics of the rows
    it is given, whether or not the ratio moved (Clip-Cov's and KL-Cov's covariance
    selection): the metric reporting the fraction of response tokens it selected. The
    conformance suite then lets the on-policy gradient differ from REINFORCE's on at most
    that many tokens, and, since a micro-batch selects from its own rows, checks that each
    micro-batch divides by the whole batch's counts instead of that micro-batches add up
    to the whole batch. Empty: no such selection."""

    @classmethod
    def acting_shares(cls) -> list[str]:
        """The metrics that say on what share of its units the algorithm's own mechanism
        changed the gradient: its ``mechanism``, else its ``token_selection`` (Clip-Cov
        detaches the tokens it selects, ratio or not), else none (gpg). Boards and the
        tuning selection read these."""
        if cls.mechanism:
            return list(cls.mechanism)
        return [cls.token_selection] if cls.token_selection else []

    @classmethod
    def mechanism_acted(cls, metrics: dict[str, float]) -> bool:
        """True when an acting share of ``mechanism`` in ``metrics`` is above 0: the
        mechanism changed at least one token's (or sequence's) gradient. Shares missing
        from ``metrics`` count as idle."""
        return any(metrics.get(k, 0.0) > 0.0 for k in cls.mechanism)

    def __init__(self, **overrides: Any) -> None:
        overrides = dict(overrides)
        aggregation = overrides.pop("aggregation", None)
        if aggregation is not None:  # an ablation: any algorithm under another reduction
            if aggregation not in AGGREGATIONS:
                raise ConfigError(
                    f"aggregation {aggregation!r} for algorithm {self.name!r}; "
                    f"valid: {', '.join(AGGREGATIONS)}"
                )
            self.aggregation = aggregation
        self.config = make_config(self.config_class, overrides, owner=f"algorithm {self.name!r}")
        owner = f"algorithm {self.name!r}"
        if hasattr(self.config, "advantage"):
            choose(ADVANTAGE_ESTIMATORS, self.config.advantage, f"{owner}: advantage estimator")
        if hasattr(self.config, "kl"):
            choose(KL_ESTIMATORS, self.config.kl, f"{owner}: KL estimator")

    @property
    def needs_reference(self) -> bool:
        """True when the loss uses the frozen reference (a config ``beta`` > 0). When
        False the loop never runs the reference model."""
        return float(getattr(self.config, "beta", 0.0)) > 0.0

    def advantages(
        self, rewards: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[groups, G] rewards (and [groups, G] response lengths in tokens, or None) ->
        [groups, G] advantages. Default: the estimator the config's ``advantage`` field
        names (``zoo.core.losses.ADVANTAGE_ESTIMATORS``); group_norm (GRPO) without one."""
        name = getattr(self.config, "advantage", "group_norm")
        return estimate_advantages(name, rewards, lengths)

    @property
    def uses_turn_rewards(self) -> bool:
        """True when ``advantages`` declares ``turn_rewards``: only then does the loop build
        the per-turn reward tensor."""
        return "turn_rewards" in inspect.signature(self.advantages).parameters

    def group_advantages(
        self, rewards: torch.Tensor, lengths: torch.Tensor, turn_rewards: torch.Tensor | None = None
    ) -> torch.Tensor:
        """What the loop calls: ``advantages(rewards, ...)`` with ``lengths=`` and
        ``turn_rewards=`` only for the parameters an override declares (plugins written
        before they were passed keep working). ``turn_rewards``: [groups, G, K], NaN past
        an episode's last turn; None: one turn each, whose reward is ``rewards``. Returns
        [groups, G] advantages, or [groups, G, K] from an override that assigns credit
        per turn."""
        params = inspect.signature(self.advantages).parameters
        extra: dict[str, torch.Tensor] = {}
        if "lengths" in params:
            extra["lengths"] = lengths
        if self.uses_turn_rewards:
            extra["turn_rewards"] = rewards[..., None] if turn_rewards is None else turn_rewards
        advantages = self.advantages(rewards, **extra)
        expected = [tuple(rewards.shape)]
        if "turn_rewards" in extra:
            expected.append(tuple(extra["turn_rewards"].shape))
        if tuple(advantages.shape) not in expected:
            raise ValueError(
                f"algorithm {self.name!r}: advantages() returned shape {tuple(advantages.shape)}; "
                f"expected one of {expected} ([groups, G] per episode, [groups, G, K] per turn)"
            )
        return advantages

    def shape_rewards(
        self, rewards: torch.Tensor, lengths: torch.Tensor, max_response_len: int
    ) -> torch.Tensor:
        """Adjust task rewards before advantages, given response lengths [groups, G]
        (e.g. DAPO's overlong punishment). Default: unchanged."""
        return rewards

    def keep(self, rewards: torch.Tensor) -> torch.Tensor:
        """Bool [groups]: which groups to train on (e.g. DAPO's dynamic sampling).
        Default: all of them."""
        return torch.ones(rewards.shape[0], dtype=torch.bool)

    def train_mask(self, truncated: torch.Tensor) -> torch.Tensor:
        """Bool [groups, G]: which responses enter the loss, given which were cut off by
        the generation budget (finish reason "length"); e.g. DAPO's overlong filtering.
        Default: all of them."""
        return torch.ones_like(truncated, dtype=torch.bool)

    @abstractmethod
    def loss(self, batch: TrainBatch) -> LossOutput:
        """Minus the objective on ``batch``, plus metrics."""

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "paper": self.paper,
            "aggregation": self.aggregation,
            "config": dataclasses.asdict(self.config),
        }

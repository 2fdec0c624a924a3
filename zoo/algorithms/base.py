"""The algorithm plugin base class. A plugin sets ``name``, ``config_class`` and ``paper``
and writes ``loss``; it may override ``advantages``, ``shape_rewards``, ``keep`` and
``train_mask``, and declare state kept across steps (``state_dict`` / ``load_state_dict``,
which the run's checkpoint saves and a resume restores). When each hook runs:
docs/algorithms.md, "Hooks, and when each runs" (``advantages`` once per sampling round,
``loss`` once per micro-batch).
It never sees a process, a device or a mesh: only tensors of rewards and a TrainBatch.

Shared estimators by name: a config field ``advantage`` picks one of
``zoo.core.losses.ADVANTAGE_ESTIMATORS`` (the default ``advantages`` reads it) and a field
``kl`` one of ``KL_ESTIMATORS`` (the loss passes ``self.config.kl`` to ``kl_penalty``), and
a field ``loss`` one of ``POLICY_LOSSES`` (the loss passes it to ``policy_loss``); all are
checked when the algorithm is built, so ``--set advantage=nope`` fails at once, naming the
valid choices. The fields themselves are declared once, in ``EstimatorFields``,
``PolicyLossFields`` and ``EntropyFields``, which a config subclasses.

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

Which turns share a state (GiGPO's anchor states, zoo/algorithms/gigpo.py): when
``advantages`` has a ``turn_states`` parameter (``uses_turn_states``), the loop also passes
a [groups, G, K] integer tensor (K as for ``turn_rewards``): entry [g, i, k] identifies the
history the policy saw before turn k of episode i of group g, the prompt's ids and every
token of the episode before that turn (its earlier turns as sampled and the observations'
ids). Two turns of one group have equal ids exactly when those token sequences are equal
(ids count from 0 within each group; compare them within a group only); -1 after an
episode's last turn. Turn 0 of every episode of a group starts from the prompt alone, so
it is one state. A single-turn env passes K = 1, every id 0.

A greedy baseline (ReMax, arXiv 2310.10505): when ``advantages`` has a ``greedy_rewards``
parameter (``needs_greedy_baseline``), the loop also generates one greedy completion of
each prompt with the policy that sampled the group, scores it like the samples (shaped by
``shape_rewards`` as they are) and passes the [groups] rewards; it charges that generation
to the ledger (phase ``baseline``), so a matched-compute budget pays for it. Sync mode;
single- and multi-turn envs.

Entropy (zoo/core/entropy.py): when ``needs_entropy`` is True the trainer also hands the
loss ``batch.entropy``, the policy's per-token entropy over its whole next-token
distribution, with its gradient. The default property reads the config fields
``entropy_coef`` (a bonus, on at != 0) and ``entropy_top_share`` (train on the top share of
tokens by entropy, on at < 1); a plugin that always reads the entropy sets the class
attribute ``needs_entropy = True``. Otherwise it is never computed.

A learned critic (PPO, zoo/algorithms/ppo.py): an algorithm whose ``needs_values`` is True
gets a value model from the infrastructure (zoo/services/value.py), as the reference is
served. Its ``advantages`` hook gives each response's reward, which the loop places on the
response's last token; once the batch is packed the loop asks the critic for V(s_t) of
every response token and calls ``token_advantages(rewards, values, mask)`` for [B, T]
advantages and returns, and after the policy's updates trains the critic on the returns
with ``value_loss(ValueBatch)``, at ``critic_lr(run lr)``. Otherwise no critic exists.

Shared options (``SharedOptions``): beside its own config, any algorithm whose config has
a KL weight ``beta`` takes ``kl_target`` / ``kl_horizon`` (an adaptive KL coefficient,
Ziegler et al.; ``kl_rollout_mean`` picks how its KL is averaged) and ``kl_in_reward``
(the KL charged in the reward, not the loss; ``kl_reward_credit`` picks whether a token
is charged the KL to the end of its response or its own), and any
whose config has an ``advantage`` field takes ``pass_k`` (for ``advantage=pass_at_k``).
``kl_coef`` is the KL weight in force; the loop adapts it (``set_kl_coef``), checkpoints
it, and for ``kl_in_reward`` subtracts the KL return from the advantages itself, the loss
then seeing ``beta = 0``. ``check_run`` checks them against the run (group size, batch).

More class attributes describe the loss to generic checks (zoo/algorithms/conformance.py),
to the compare report, to ``harness list algorithms`` and to readers; they do not change
what the loss does: ``family``, ``aggregation``, ``clip_style``, ``sequence_level``,
``mechanism`` and ``token_selection``."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from zoo.core.card import CARD_FIELDS, Card
from zoo.core.config import ConfigError, config_fields, make_config
from zoo.core.entropy import MASKED_METRIC, check_entropy_options, entropy_terms
from zoo.core.losses import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    DEFAULT_PASS_K,
    KL_ERROR_CLIP,
    KL_ESTIMATORS,
    KL_REWARD_CREDITS,
    KL_ROLLOUT_MEANS,
    POLICY_LOSSES,
    Aggregation,
    aggregate,
    choose,
    estimate_advantages,
    kl_penalty,
    kl_reward_to_go,
    log_ratio,
    policy_loss,
)
from zoo.core.types import ADVANTAGE_INPUTS, AdvantageInputs, LossOutput, TrainBatch, ValueBatch


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


class _FromCard:
    """A card field read under its old name, on the class (``GRPO.family``, what
    ``harness list algorithms`` and the conformance suite read) and on an instance
    (``algo.mechanism``, whose card an option may have changed). Setting it on an instance
    replaces that instance's card, so the two never disagree."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return getattr((owner if obj is None else obj).card, self.field)

    def __set__(self, obj: Any, value: Any) -> None:
        obj.card = dataclasses.replace(obj.card, **{self.field: value})


HOOKS: tuple[str, ...] = (
    "advantages",
    "shape_rewards",
    "keep",
    "train_mask",
    "loss",
    "advantage_metrics",
    "state_dict",
    "load_state_dict",
    "token_advantages",
    "value_loss",
    "critic_lr",
)
"""The methods a plugin may override (docs/algorithms.md, "The plugin contract"): each
has a default but ``loss``, which every plugin writes."""

RUN_API: tuple[str, ...] = (
    "group_advantages",
    "uses_turn_rewards",
    "uses_turn_states",
    "needs_greedy_baseline",
    "needs_reference",
    "kl_coef",
    "set_kl_coef",
    "kl_estimator",
    "entropy_options",
    "check_run",
    "describe",
    "acting_shares",
    "mechanism_acted",
)
"""What the run and the harness call on an algorithm, derived from its declarations and
config: a plugin does not override these (a class that does is refused), so what the loop
computes always follows what the plugin declared."""


def _advantage_parameters(cls: type[Algorithm]) -> tuple[set[str], bool]:
    """The keyword parameters of ``cls.advantages`` after ``rewards``, and whether it
    takes ``**kwargs`` (then any declared input)."""
    params = list(inspect.signature(cls.advantages).parameters.values())[2:]  # self, rewards
    kinds = inspect.Parameter
    taken = {p.name for p in params if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)}
    return taken, any(p.kind is kinds.VAR_KEYWORD for p in params)


def _inputs_literal(names: set[str] | frozenset[str]) -> str:
    inside = ", ".join(f'"{n}"' for n in sorted(names))
    return f"frozenset({{{inside}}})" if names else "frozenset()"


def _check_inputs(cls: type[Algorithm]) -> None:
    """Check ``inputs`` once, when the class is created: each name must be in the
    vocabulary, and the parameters of ``advantages`` after ``rewards`` must be exactly the
    declared inputs (a declared input it cannot take would fail every step; a parameter not
    declared would never be passed). The message says what to write.

    A class that overrides ``advantages`` without declaring ``inputs`` (a plugin written
    before the declaration existed, e.g. ``def advantages(self, rewards)``) gets them
    from that signature here, once, with a DeprecationWarning when they differ from the
    declaration it inherits: such plugins keep working as they always did."""
    owner = f"algorithm class {cls.__qualname__}"
    valid = ", ".join(sorted(ADVANTAGE_INPUTS))
    taken, var_keyword = _advantage_parameters(cls)
    if "advantages" in cls.__dict__ and "inputs" not in cls.__dict__ and not var_keyword:
        inferred = frozenset(taken)
        if inferred != cls.inputs and not inferred - ADVANTAGE_INPUTS:
            warnings.warn(
                f"{owner}: advantages() takes {sorted(inferred)} but the class declares no "
                f"inputs; declare inputs = {_inputs_literal(inferred)}",
                DeprecationWarning,
                stacklevel=4,
            )
        cls.inputs = inferred
    declared = cls.inputs
    if isinstance(declared, str) or not all(isinstance(n, str) for n in declared):
        raise TypeError(f"{owner}: inputs must be a frozenset of names, got {declared!r}")
    declared = cls.inputs = frozenset(declared)
    unknown = sorted(declared - ADVANTAGE_INPUTS)
    if unknown:
        raise TypeError(f"{owner}: unknown inputs {', '.join(unknown)}; valid: {valid}")
    if var_keyword:
        return  # **kwargs takes whatever is declared
    fix = f"declare inputs = {_inputs_literal(taken & ADVANTAGE_INPUTS)}"
    missing = sorted(declared - taken)
    if missing:
        raise TypeError(
            f"{owner}: inputs declares {', '.join(missing)}, which its advantages() does "
            f"not take: add the parameter(s) or {fix}"
        )
    undeclared = sorted(taken - declared)
    if undeclared:
        raise TypeError(
            f"{owner}: advantages() takes {', '.join(undeclared)}, which inputs does not "
            f"declare (valid inputs: {valid}); {fix}"
        )


def _take_card(cls: type[Algorithm]) -> None:
    """Build the class's card from the card fields a plugin set one by one as class
    attributes (a plugin written before cards; ``mechanism = {...}``), over the card it
    inherits, and leave the names to ``_FromCard``."""
    own = {f: cls.__dict__[f] for f in CARD_FIELDS if f in cls.__dict__}
    if not own:
        return
    if "card" in cls.__dict__:
        raise TypeError(
            f"algorithm class {cls.__qualname__}: sets both card and {', '.join(own)}; "
            "state them in the card"
        )
    cls.card = dataclasses.replace(cls.card, **own)
    for f in own:
        delattr(cls, f)


class Algorithm(ABC):
    name: ClassVar[str] = ""
    config_class: ClassVar[type]
    card: ClassVar[Card] = Card()
    """What the algorithm is, for reports and generic checks (zoo/core/card.py): paper,
    family, clip style, whether it is sequence-level, its mechanism's acting shares and
    its token selection. Each field also reads under its own name below."""
    inputs: ClassVar[frozenset[str]] = frozenset({"lengths"})
    """What ``advantages`` takes beside the rewards, from the vocabulary
    ``zoo.core.types.ADVANTAGE_INPUTS`` (the fields of ``AdvantageInputs``): "lengths",
    "turn_rewards", "greedy_rewards", "turn_states". The loop builds only the declared ones
    and passes them as keyword arguments; the declaration must match the parameters of
    ``advantages`` exactly (checked when the class is created). The default's:
    {"lengths"}; a plugin whose ``advantages(self, rewards)`` reads nothing else declares
    ``frozenset()``."""
    aggregation: ClassVar[Aggregation] = "seq_mean"
    """How ``loss`` reduces per-token terms to a scalar: "seq_mean", "token_mean" or
    "fixed" (docs/algorithms.md, "Aggregation modes"). Pass it to
    ``zoo.core.losses.aggregate``; the conformance suite builds its REINFORCE reference
    -A*lp under the same mode. ``--set aggregation=token_mean`` overrides it for one run
    (an ablation); the plugin must then reduce with ``self.aggregation``. Not on the card:
    the loss computes with it."""

    paper = _FromCard()
    family = _FromCard()
    clip_style = _FromCard()
    sequence_level = _FromCard()
    mechanism = _FromCard()
    token_selection = _FromCard()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overridden = sorted(set(RUN_API) & set(cls.__dict__))
        if overridden:
            raise TypeError(
                f"algorithm class {cls.__qualname__} overrides {', '.join(overridden)}, which "
                f"the run derives from its declarations; a plugin overrides only the hooks "
                f"({', '.join(HOOKS)})"
            )
        _take_card(cls)
        _check_inputs(cls)

    @classmethod
    def acting_shares(cls) -> list[str]:
        """The card's acting shares (``Card.acting_shares``). Boards and the tuning
        selection read these."""
        return cls.card.acting_shares()

    @classmethod
    def mechanism_acted(cls, metrics: dict[str, float]) -> bool:
        """``Card.mechanism_acted``: did the declared mechanism act in ``metrics``?"""
        return cls.card.mechanism_acted(metrics)

    needs_values: ClassVar[bool] = False
    """True for an algorithm with a learned critic: the loop then serves it values and
    trains the critic (``token_advantages``, ``value_loss``, ``critic_lr``); False: no
    value model is built and nothing about a run changes."""

    options: SharedOptions = SharedOptions()
    """The shared options this instance was built with (defaults: all off)."""
    kl_in_reward_by_loop: bool = False
    """True when the shared ``kl_in_reward`` option is on: the loop subtracts the KL return
    from the advantages and the loss sees ``beta = 0`` (``kl_coef`` keeps the weight)."""

    def __init__(self, **overrides: Any) -> None:
        overrides = dict(overrides)
        own = set(config_fields(self.config_class))
        shared = {k: overrides.pop(k) for k in config_fields(SharedOptions)
                  if k in overrides and k not in own}  # fmt: skip
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
        if hasattr(self.config, "loss"):
            choose(POLICY_LOSSES, self.config.loss, f"{owner}: policy loss")
        self._take_shared_options(shared, owner)
        if hasattr(self.config, "entropy_coef") or hasattr(self.config, "entropy_top_share"):
            check_entropy_options(*self.entropy_options, owner)
            if self.entropy_options[1] < 1.0 and not self.token_selection:
                # the top-share selection masks most tokens' policy gradient: declared
                # like Clip-Cov's selection, so the conformance suite allows for it
                self.card = dataclasses.replace(self.card, token_selection=MASKED_METRIC)

    @property
    def entropy_options(self) -> tuple[float, float]:
        """(entropy_coef, entropy_top_share) from the config; (0.0, 1.0), both off, for a
        config without them."""
        coef = float(getattr(self.config, "entropy_coef", 0.0))
        return coef, float(getattr(self.config, "entropy_top_share", 1.0))

    @property
    def needs_entropy(self) -> bool:
        """True when the loss reads ``batch.entropy``: an entropy bonus (``entropy_coef``
        != 0) or a selection by entropy (``entropy_top_share`` < 1). Only then does the
        trainer compute the entropy (zoo/core/entropy.py); otherwise a run computes exactly
        what it did before the option existed."""
        coef, top_share = self.entropy_options
        return coef != 0.0 or top_share < 1.0

    def _take_shared_options(self, shared: dict[str, Any], owner: str) -> None:
        """Build ``self.options`` from the overrides that are shared options, refusing one
        that does not apply to this config (no ``beta`` for the KL ones, no ``advantage``
        for ``pass_k``) or is out of range."""
        options = make_config(SharedOptions, shared, owner=f"{owner} (shared options)")
        kl_given = sorted(set(shared) & set(KL_OPTIONS))
        if kl_given and not hasattr(self.config, "beta"):
            raise ConfigError(
                f"{owner} has no KL coefficient (config field beta), so "
                f"{', '.join(kl_given)} cannot apply to it"
            )
        if "pass_k" in shared and not hasattr(self.config, "advantage"):
            raise ConfigError(f"{owner} has no advantage field, so pass_k cannot apply to it")
        if options.kl_target < 0:
            raise ConfigError(
                f"{owner}: kl_target must be >= 0 (0: fixed beta), got {options.kl_target}"
            )
        if options.kl_horizon < 1:
            raise ConfigError(f"{owner}: kl_horizon must be >= 1, got {options.kl_horizon}")
        if options.pass_k < 1:
            raise ConfigError(f"{owner}: pass_k must be >= 1, got {options.pass_k}")
        self._check_kl_conventions(options, owner)
        self.options = options
        self._initial_beta = float(getattr(self.config, "beta", 0.0))
        if options.kl_in_reward:
            self.kl_in_reward_by_loop = True
            self._reward_beta = self._initial_beta
            self.config.beta = 0.0  # the loss adds no KL term: the loop charges it

    def _check_kl_conventions(self, options: SharedOptions, owner: str) -> None:
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
            in_reward = options.kl_in_reward or bool(getattr(self.config, "kl_in_reward", False))
            if not in_reward:
                raise ConfigError(
                    f"{owner}: kl_reward_credit = {options.kl_reward_credit} sets how a KL in "
                    "the reward reaches the advantages; it needs kl_in_reward = true"
                )
            if self.needs_values:
                raise ConfigError(
                    f"{owner}: kl_reward_credit applies to critic-free advantages; a critic's "
                    "GAE sums the per-token KL rewards itself (gamma, lam)"
                )

    @property
    def kl_coef(self) -> float:
        """The KL weight beta in force: the config's ``beta``, as the adaptive controller
        moved it (``set_kl_coef``); with the shared ``kl_in_reward``, the weight of the KL
        in the reward (the loss's own ``beta`` is then 0)."""
        if self.kl_in_reward_by_loop:
            return self._reward_beta
        return float(getattr(self.config, "beta", 0.0))

    def set_kl_coef(self, value: float) -> None:
        """Make ``value`` the KL weight from now on: the loss reads it as ``config.beta``
        (or, with the shared ``kl_in_reward``, the loop charges it in the reward). The loop
        calls it after each step of an adaptive KL run and on resume; a trainer in another
        process gets it with each batch (``RolloutBatch.kl_coef``)."""
        if self.kl_in_reward_by_loop:
            self._reward_beta = float(value)
        else:
            self.config.beta = float(value)

    @property
    def kl_estimator(self) -> str:
        """The per-token KL estimator the loss uses: the config's ``kl``, else k3 (the
        default of ``kl_penalty``)."""
        return getattr(self.config, "kl", "k3")

    def check_run(self, group_size: int, responses_per_step: int) -> None:
        """Refuse shared options that cannot work in a run with groups of ``group_size``
        and up to ``responses_per_step`` responses per step (ConfigError naming the
        value): pass@k with k outside [1, group size], an adaptive or in-reward KL with
        beta = 0 (the controller scales beta, so 0 stays 0), and a horizon so short that
        one step could take beta to 0 or below (0.2 * responses / kl_horizon >= 1)."""
        owner = f"algorithm {self.name!r}"
        k = self.options.pass_k
        if getattr(self.config, "advantage", None) == "pass_at_k" and not 1 <= k <= group_size:
            raise ConfigError(
                f"{owner}: pass_k = {k} with advantage = pass_at_k needs 1 <= pass_k <= the "
                f"group size ({group_size}): set --set pass_k=K or a larger --group-size"
            )
        adaptive = self.options.kl_target > 0
        for on, what in ((adaptive, "kl_target"), (self.kl_in_reward_by_loop, "kl_in_reward")):
            if on and self.kl_coef <= 0:
                raise ConfigError(
                    f"{owner}: {what} needs a KL weight beta > 0 (its starting value), "
                    f"got beta = {self.kl_coef}"
                )
        if adaptive and KL_ERROR_CLIP * responses_per_step >= self.options.kl_horizon:
            raise ConfigError(
                f"{owner}: kl_horizon = {self.options.kl_horizon} is too short for "
                f"{responses_per_step} responses per step: one step may scale beta by "
                f"1 -+ 0.2 * {responses_per_step} / kl_horizon, which must stay above 0 "
                f"(use kl_horizon > {KL_ERROR_CLIP * responses_per_step:g})"
            )

    @property
    def needs_reference(self) -> bool:
        """True when the KL weight is above 0 (a config ``beta`` > 0, in the loss or in the
        reward): the loss or the loop then reads the frozen reference. When False the loop
        never runs the reference model."""
        return self.kl_coef > 0.0

    def advantages(
        self, rewards: torch.Tensor, lengths: torch.Tensor | None = None
    ) -> torch.Tensor:
        """[groups, G] rewards (and [groups, G] response lengths in tokens, or None) ->
        [groups, G] advantages. Default: the estimator the config's ``advantage`` field
        names (``zoo.core.losses.ADVANTAGE_ESTIMATORS``; pass_at_k with ``k = pass_k``);
        group_norm (GRPO) without one."""
        name = getattr(self.config, "advantage", "group_norm")
        return estimate_advantages(name, rewards, lengths, k=self.options.pass_k)

    @property
    def uses_turn_rewards(self) -> bool:
        """True when ``inputs`` declares "turn_rewards": only then does the loop build the
        per-turn reward tensor."""
        return "turn_rewards" in self.inputs

    @property
    def uses_turn_states(self) -> bool:
        """True when ``inputs`` declares "turn_states": only then does the loop build the
        [groups, G, K] ids of the history before each turn (equal ids: identical history;
        GiGPO's anchor states)."""
        return "turn_states" in self.inputs

    @property
    def needs_greedy_baseline(self) -> bool:
        """True when ``inputs`` declares "greedy_rewards": only then does the loop generate
        one greedy (argmax) completion of each prompt besides its G samples, with the same
        generator and weights, score it with the env, charge it to the ledger's
        ``baseline`` phase (it is paid for from the run's budget) and pass its rewards
        (ReMax's baseline, arXiv 2310.10505). Otherwise nothing of it runs."""
        return "greedy_rewards" in self.inputs

    def ratio_surrogate(
        self, batch: TrainBatch, low: float, high: float, beta: float, kl_in_reward: bool = False
    ) -> LossOutput:
        """The shared surrogate of the ratio-bounded built-ins, written once: the config's
        policy loss (``loss``, PPO's clip by default) at the bounds ``low`` / ``high`` on
        the token ratio, minus the ``kl`` penalty weighted by ``beta``, plus the entropy
        options, aggregated by the class's ``aggregation``. ``kl_in_reward``: the KL enters
        the advantages as a reward-to-go instead (A - K, no gradient; REINFORCE++), and the
        loss has no penalty term. A plugin that uses it states only its advantages and
        bounds (grpo, dr_grpo, dapo, rloo, opo, reinforce_pp, remax, gigpo, ppo)."""
        ratio = torch.exp(log_ratio(batch))
        if kl_in_reward:
            kl_return, kl_metrics = kl_reward_to_go(
                batch, beta, self.config.kl, self.options.kl_reward_credit
            )
            adv, penalty = batch.token_advantages - kl_return, None
        else:
            adv = batch.token_advantages
            penalty, kl_metrics = kl_penalty(batch, beta, self.config.kl)
        keep, bonus, entropy_metrics = entropy_terms(batch, *self.entropy_options)
        if keep is not None:
            adv = adv * keep
        # min(r A, clip(r, low, high) A) unless the config names another policy loss
        policy = policy_loss(self.config.loss, ratio, adv, batch, low, high)
        per_token = -policy.objective if penalty is None else -policy.objective + penalty
        if bonus is not None:
            per_token = per_token - bonus
        loss = aggregate(per_token, batch, self.aggregation)
        return LossOutput(loss, {"loss": float(loss.detach()), **policy.metrics, **kl_metrics,
                                 **entropy_metrics})  # fmt: skip

    def advantage_metrics(self) -> dict[str, float]:
        """Figures of the advantages this algorithm gave since it was last asked, for the
        step's record (the loop asks once per step, after all its sampling rounds): an
        override's own, e.g. how often gigpo's step-level term differs from its
        episode-level one. None by default."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What this algorithm keeps across steps and a resume must restore, e.g. a
        running baseline its ``advantages`` updates each sampling round. The run's
        checkpoint saves it (``RLLoop.state``, every ``checkpoint_every`` steps and at the
        end, after the step's record) and a resume hands it to ``load_state_dict`` before
        the first step; a loaded checkpoint is read with ``weights_only=True``, so it holds
        tensors and plain values only (dict with str keys, list, tuple, str, int, float,
        bool, None), which a save checks. Empty by default: the algorithm keeps no state
        (the checkpoint then holds none). Only this instance's, the one the loop calls
        for advantages, shaping, ``keep`` and ``train_mask``: a loss under the Monarch
        placement runs on the trainer's own copy, built from the same config."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (a resume, on a freshly built instance).
        The default keeps no state and refuses any."""
        if state:
            raise ConfigError(
                f"algorithm {self.name!r} keeps no state (state_dict), but the checkpoint "
                f"holds some for it ({', '.join(sorted(map(str, state)))}): resume with the "
                "plugin version that wrote it"
            )

    def group_advantages(
        self, rewards: torch.Tensor, lengths: torch.Tensor,
        turn_rewards: torch.Tensor | None = None, greedy_rewards: torch.Tensor | None = None,
        turn_states: torch.Tensor | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """What the loop calls: ``advantages(rewards, ...)`` with ``lengths=``,
        ``turn_rewards=``, ``greedy_rewards=`` and ``turn_states=`` only for the names the
        class declares in ``inputs`` (packed once as ``AdvantageInputs``).
        ``turn_rewards``: [groups, G, K], NaN past an episode's last turn; None: one turn
        each, whose reward is ``rewards``. ``greedy_rewards``: [groups], the reward of each
        prompt's greedy completion (shaped like ``rewards``), required when
        ``needs_greedy_baseline``. ``turn_states``: [groups, G, K] ids of the history before
        each turn, -1 past an episode's last turn; None: one turn each, all from the prompt
        (ids 0). Returns [groups, G] advantages, or [groups, G, K] from an override that
        assigns credit per turn."""
        declared = self.inputs
        if "greedy_rewards" in declared and (
            greedy_rewards is None or tuple(greedy_rewards.shape) != tuple(rewards.shape[:1])
        ):
            got = None if greedy_rewards is None else tuple(greedy_rewards.shape)
            raise ValueError(
                f"algorithm {self.name!r}: advantages() takes greedy_rewards, the reward "
                f"of one greedy completion per prompt ([groups] = "
                f"{tuple(rewards.shape[:1])}); got {got}"
            )
        if "turn_states" in declared:
            turn_states = self._turn_states(rewards, turn_rewards, turn_states)
        if "turn_rewards" in declared and turn_rewards is None:
            turn_rewards = rewards[..., None]
        given = AdvantageInputs(lengths, turn_rewards, greedy_rewards, turn_states)
        extra = given.select(declared)
        advantages = self.advantages(rewards, **extra)
        expected = [tuple(rewards.shape)]
        for per_turn in ("turn_rewards", "turn_states"):
            shape = None if extra.get(per_turn) is None else tuple(extra[per_turn].shape)
            if shape is not None and shape not in expected:
                expected.append(shape)
        if tuple(advantages.shape) not in expected:
            raise ValueError(
                f"algorithm {self.name!r}: advantages() returned shape {tuple(advantages.shape)}; "
                f"expected one of {expected} ([groups, G] per episode, [groups, G, K] per turn)"
            )
        return advantages

    def _turn_states(
        self, rewards: torch.Tensor, turn_rewards: torch.Tensor | None,
        turn_states: torch.Tensor | None,
    ) -> torch.Tensor:  # fmt: skip
        """The ``turn_states`` an override gets: the loop's, checked against the per-turn
        rewards' shape; without them, one turn per episode, every one from the prompt."""
        if turn_rewards is not None:
            turns = turn_rewards.shape[-1]
        else:
            turns = 1 if turn_states is None else turn_states.shape[-1]
        if turn_states is None:
            if turns != 1:
                raise ValueError(
                    f"algorithm {self.name!r}: advantages() takes turn_states, the ids of the "
                    f"history before each turn; a batch of {turns} turns needs them"
                )
            return torch.zeros((*rewards.shape, 1), dtype=torch.long)
        want = (*rewards.shape, turns)
        if tuple(turn_states.shape) != want:
            raise ValueError(
                f"algorithm {self.name!r}: turn_states of shape {tuple(turn_states.shape)}; "
                f"expected {want} ([groups, G, K], as the per-turn rewards)"
            )
        return turn_states

    def token_advantages(
        self, rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Only for ``needs_values``: [B, T] per-token rewards (the response's reward on
        its last token; with the shared ``kl_in_reward``, minus beta * KL on every token),
        the critic's [B, T] values V(s_t) and the [B, T] response mask -> ([B, T]
        advantages, [B, T] returns, the critic's regression targets)."""
        raise NotImplementedError(f"algorithm {self.name!r} has no critic (needs_values)")

    def value_loss(self, batch: ValueBatch) -> LossOutput:
        """Only for ``needs_values``: the critic's loss on ``batch`` (additive over
        micro-batches: divide by ``batch.num_tokens``), plus metrics."""
        raise NotImplementedError(f"algorithm {self.name!r} has no critic (needs_values)")

    def critic_lr(self, lr: float) -> float:
        """Only for ``needs_values``: the critic's learning rate in a run whose policy
        trains at ``lr``."""
        return lr

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
        config = dataclasses.asdict(self.config)
        if "beta" in config:  # as configured (kl_in_reward zeroes the loss's own)
            config["beta"] = getattr(self, "_initial_beta", config["beta"])
        # shared options only when set, so the description of a run without them is
        # what it was before they existed
        defaults = dataclasses.asdict(SharedOptions())
        config.update({k: v for k, v in dataclasses.asdict(self.options).items()
                       if v != defaults[k]})  # fmt: skip
        return {
            "name": self.name,
            "paper": self.paper,
            "aggregation": self.aggregation,
            "config": config,
        }

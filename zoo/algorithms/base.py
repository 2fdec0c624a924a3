"""The algorithm plugin base class, and the contract a plugin keeps (docs/algorithms.md,
"The plugin contract").

A plugin DECLARES, as class attributes: ``name``, ``config_class`` (a dataclass of its
hyperparameters), ``card`` (what it is, for reports and generic checks:
zoo/core/types.py), ``inputs`` (what its ``advantages`` takes beside the rewards, from the
fixed vocabulary of ``zoo.core.types.AdvantageInputs``), ``aggregation`` (how its loss
reduces tokens), and where they apply ``needs_values`` (a learned critic) and
``needs_entropy``. It WRITES ``loss`` and may override the other ``HOOKS``; the run reads
everything else (``RUN_API``) from those declarations and the config, so a plugin never
overrides it (refused when the class is created, as is an ``inputs`` that does not match
``advantages``).

It never sees a process, a device or a mesh: only tensors of rewards and a TrainBatch.
The loop decides what to compute from the declarations alone: per-turn rewards, per-turn
states and a greedy baseline (which costs a generation) are built only for the
algorithms whose ``inputs`` name them; the reference only when the KL weight is above 0;
the entropy only when ``needs_entropy``; a critic only when ``needs_values``.

Shared estimators by name: a config field ``advantage`` picks one of
``zoo.core.losses.ADVANTAGE_ESTIMATORS`` (the default ``advantages`` reads it), a field
``kl`` one of ``KL_ESTIMATORS`` and a field ``loss`` one of ``POLICY_LOSSES``; all are
checked when the algorithm is built, so ``--set advantage=nope`` fails at once, naming the
valid choices. The fields are declared once (``EstimatorFields``, ``PolicyLossFields``,
``EntropyFields``; zoo/algorithms/options.py), as are the options any algorithm with a
KL weight ``beta`` or an ``advantage`` field takes beside its own config
(``SharedOptions``: the adaptive KL controller, the KL charged in the reward, pass@k's k).
``kl_coef`` is the KL weight in force; the loop adapts it (``set_kl_coef``), checkpoints
it, and for ``kl_in_reward`` subtracts the KL return from the advantages itself, the loss
then seeing ``beta = 0``.

A learned critic (PPO, zoo/algorithms/ppo.py): with ``needs_values`` the loop places each
response's reward on its last token, asks the critic for V(s_t), calls
``token_advantages(rewards, values, mask)`` for [B, T] advantages and returns, and trains
the critic with ``value_loss(ValueBatch)`` at ``critic_lr(run lr)``."""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch

from zoo.algorithms.options import (
    KL_OPTIONS,
    AdvantageField,
    EntropyFields,
    EstimatorFields,
    KLField,
    LossField,
    PolicyLossFields,
    SharedOptions,
    check_shared_options,
    make_shared_options,
)
from zoo.core.config import ConfigError, config_fields, make_config
from zoo.core.entropy import MASKED_METRIC, check_entropy_options, entropy_terms
from zoo.core.losses import (
    ADVANTAGE_ESTIMATORS,
    AGGREGATIONS,
    KL_ESTIMATORS,
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
from zoo.core.types import (
    ADVANTAGE_INPUTS,
    CARD_FIELDS,
    AdvantageInputs,
    Card,
    LossOutput,
    TrainBatch,
    ValueBatch,
)

# the field groups and options live in zoo/algorithms/options.py; plugins import them here
__all__ = [
    "HOOKS",
    "KL_OPTIONS",
    "RUN_API",
    "AdvantageField",
    "AdvantageInputs",
    "Algorithm",
    "Card",
    "EntropyFields",
    "EstimatorFields",
    "KLField",
    "LossField",
    "PolicyLossFields",
    "SharedOptions",
]


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
    """What the algorithm is, for reports and generic checks (zoo/core/types.py): paper,
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
        shared = {
            k: overrides.pop(k)
            for k in config_fields(SharedOptions)
            if k in overrides and k not in own
        }
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
        """Build ``self.options`` from the overrides that are shared options (checked in
        ``zoo.algorithms.options.make_shared_options``); with ``kl_in_reward`` the loop charges
        the KL, so the loss's own ``beta`` becomes 0 and ``kl_coef`` keeps the weight."""
        options = make_shared_options(self.config, shared, owner, critic=self.needs_values)
        self.options = options
        self._initial_beta = float(getattr(self.config, "beta", 0.0))
        if options.kl_in_reward:
            self.kl_in_reward_by_loop = True
            self._reward_beta = self._initial_beta
            self.config.beta = 0.0  # the loss adds no KL term: the loop charges it

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
        check_shared_options(  # zoo/algorithms/options.py
            self.config,
            self.options,
            kl_coef=self.kl_coef,
            kl_in_reward=self.kl_in_reward_by_loop,
            group_size=group_size,
            responses_per_step=responses_per_step,
            owner=f"algorithm {self.name!r}",
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
        return LossOutput(
            loss, {"loss": float(loss.detach()), **policy.metrics, **kl_metrics, **entropy_metrics}
        )

    def advantage_metrics(self) -> dict[str, float]:
        """Figures of the advantages this algorithm gave since it was last asked, for the
        step's record (the loop asks once per step, after all its sampling rounds): an
        override's own, e.g. how often gigpo's step-level term differs from its
        episode-level one. None by default."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        """What this algorithm keeps across steps and a resume must restore, e.g. a
        running baseline its ``advantages`` updates each sampling round. The run's
        checkpoint saves it (zoo.run.checkpoint's ``loop_state``, every ``checkpoint_every``
        steps and at the end, after the step's record) and a resume hands it to
        ``load_state_dict`` before the first step; a loaded checkpoint is read with
        ``weights_only=True``, so it holds tensors and plain values only (dict with str
        keys, list, tuple, str, int, float, bool, None), which a save checks. Empty by
        default: the algorithm keeps no state (the checkpoint then holds none). Only this
        instance's, the one the loop calls for advantages, shaping, ``keep`` and
        ``train_mask``: a loss under the Monarch placement runs on the trainer's own copy,
        built from the same config."""
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
        self,
        rewards: torch.Tensor,
        lengths: torch.Tensor,
        turn_rewards: torch.Tensor | None = None,
        greedy_rewards: torch.Tensor | None = None,
        turn_states: torch.Tensor | None = None,
    ) -> torch.Tensor:
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
        self,
        rewards: torch.Tensor,
        turn_rewards: torch.Tensor | None,
        turn_states: torch.Tensor | None,
    ) -> torch.Tensor:
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
        config.update(
            {k: v for k, v in dataclasses.asdict(self.options).items() if v != defaults[k]}
        )
        return {
            "name": self.name,
            "paper": self.paper,
            "aggregation": self.aggregation,
            "config": config,
        }

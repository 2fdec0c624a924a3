"""The data that flows between services in one RL step, and what an algorithm plugin
declares about itself (``Card``, ``AdvantageInputs``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

import torch


@dataclass
class Completion:
    """One sampled response, as the generator returns it."""

    prompt_ids: list[int]
    token_ids: list[int]
    """Response tokens, the end-of-text token included when the model emitted it."""
    logprobs: list[float]
    """The sampler's log-probability of each token in ``token_ids``."""
    text: str
    """Decoded response without the end-of-text token."""
    finish_reason: str
    """"stop" (end-of-text) or "length" (hit the generation budget); a multi-turn episode
    may also end "malformed" (its last turn's tokens do not decode faithfully,
    zoo.run.episodes)."""
    policy_version: int
    """Version of the weights that sampled it (0 = initial weights)."""
    # Multi-turn episodes (zoo.envs.episode, zoo.run.episodes) fill the fields below; a
    # single-turn completion keeps their defaults. ``token_ids`` is then every token after
    # the prompt: each assistant turn as sampled, each env observation between them.
    assistant_mask: list[int] | None = None
    """1 on tokens the model sampled, 0 on the env's observation tokens (whose
    ``logprobs`` are 0.0); None: every token is the model's."""
    reward: float | None = None
    """The episode's reward, given by the env when it ended (None: the env scores ``text``)."""
    turn_rewards: list[float] | None = None
    """Each assistant turn's reward from the env (``Reply.reward``; the last is the
    episode's), for algorithms that assign credit per turn."""
    turns: int = 1
    """Assistant turns in the episode."""
    tool_calls: int = 0
    """Turns the env executed as a tool call or submission ..."""
    tool_ok: int = 0
    """... of which ran without error."""
    transcript: str | None = None
    """Multi-turn: every turn and observation as text, in order (samples.jsonl); ``text``
    is the final assistant turn alone."""
    turn_requests: list[tuple[int, int, int]] | None = None
    """Multi-turn: the generate request of each assistant turn as the generator ran it,
    (context tokens sent, of which taken from its prefix cache, tokens sampled): what the
    ledger charges (zoo.services.ledger)."""
    # Every sample, single-turn or one turn of an episode (the generator sets it):
    cached_tokens: int = 0
    """Tokens at the start of ``prompt_ids`` whose keys and values the generator took from
    its prefix cache instead of computing them (vLLM's ``num_cached_tokens``); 0 where it
    computed the whole prompt (always with the transformers backend)."""

    @property
    def assistant_tokens(self) -> int:
        """Tokens the model sampled (the LM head ran for each)."""
        return len(self.token_ids) if self.assistant_mask is None else sum(self.assistant_mask)


@dataclass
class TrainBatch:
    """What an algorithm's ``loss`` sees. All [B, T] tensors are aligned on response tokens.

    ``num_sequences`` / ``num_tokens`` are the counts over the whole optimizer batch: with
    micro-batching each micro-batch still divides by them, so accumulated gradients equal
    the full-batch gradient. When left None they are taken from this batch.
    """

    logprobs: torch.Tensor
    """[B, T] log pi_theta of each response token (requires grad)."""
    old_logprobs: torch.Tensor
    """[B, T] log pi_old, the policy that sampled (detached)."""
    ref_logprobs: torch.Tensor | None
    """[B, T] log pi_ref of the frozen reference, or None when the algorithm needs none."""
    advantages: torch.Tensor
    """[B] per response, or [B, T] per token."""
    mask: torch.Tensor
    """[B, T] 1.0 on response tokens, 0.0 on padding."""
    num_sequences: int | None = None
    num_tokens: int | None = None
    max_response_len: int | None = None
    """The run's generation budget L_max (for Dr. GRPO's fixed normaliser)."""
    entropy: torch.Tensor | None = None
    """[B, T] entropy of the policy's whole next-token distribution at each response
    token, -sum_v p_v log p_v at the sampling temperature (zoo/core/entropy.py), with its
    gradient (an entropy bonus is differentiated through it; detach it to only rank
    tokens). Only for an algorithm whose ``needs_entropy`` is True; None otherwise."""

    def __post_init__(self) -> None:
        self.mask = self.mask.to(self.logprobs.dtype)
        if self.num_sequences is None:
            self.num_sequences = int((self.mask.sum(-1) > 0).sum())
        if self.num_tokens is None:
            self.num_tokens = int(self.mask.sum())

    @property
    def token_advantages(self) -> torch.Tensor:
        """Advantages broadcast to [B, T]."""
        adv = self.advantages.to(self.logprobs.dtype)
        return adv if adv.dim() == 2 else adv[:, None].expand_as(self.logprobs)


@dataclass
class LossOutput:
    loss: torch.Tensor
    """Scalar, differentiable. Always minus the objective."""
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class ValueBatch:
    """What an algorithm's ``value_loss`` sees (an algorithm with a learned critic,
    ``Algorithm.needs_values``): the critic's predictions on response tokens and their
    targets, all [B, T] and aligned like ``TrainBatch``. ``num_tokens`` counts the whole
    optimizer batch's response tokens, so micro-batches add up to the batch's loss."""

    values: torch.Tensor
    """[B, T] V_phi(s_t), the critic being trained (requires grad)."""
    old_values: torch.Tensor
    """[B, T] the critic's values when the batch was sampled (detached): the centre of
    the value clip."""
    returns: torch.Tensor
    """[B, T] the regression targets (GAE's returns, detached)."""
    mask: torch.Tensor
    """[B, T] 1.0 on response tokens, 0.0 on padding."""
    num_tokens: int | None = None

    def __post_init__(self) -> None:
        self.mask = self.mask.to(self.values.dtype)
        if self.num_tokens is None:
            self.num_tokens = int(self.mask.sum())


@dataclass(frozen=True)
class AdvantageInputs:
    """What the loop may hand an algorithm's ``advantages`` beside the [groups, G] rewards.
    Each field is one name of the fixed vocabulary ``ADVANTAGE_INPUTS``; an algorithm
    declares the names it reads (``Algorithm.inputs``) and the loop computes, and passes as
    keyword arguments, only those: a greedy baseline costs a generation, per-turn states a
    walk over every episode, so nothing is built that no one reads. None: not provided
    (not declared, or not built for this batch)."""

    lengths: torch.Tensor | None = None
    """[groups, G] response lengths in tokens, the env's observation tokens included
    (OPO's length-weighted baseline, arXiv 2505.23585; the shared estimators)."""
    turn_rewards: torch.Tensor | None = None
    """[groups, G, K] each assistant turn's reward (K: the most turns of any episode in
    the batch), NaN past an episode's last turn, whose entry is the episode's reward; a
    single-turn env gives K = 1 (docs/multi-turn.md)."""
    greedy_rewards: torch.Tensor | None = None
    """[groups] the reward of one greedy (argmax) completion of each prompt, shaped like
    the samples' (ReMax's baseline, arXiv 2310.10505); the loop charges its generation to
    the ledger's ``baseline`` phase."""
    turn_states: torch.Tensor | None = None
    """[groups, G, K] integer ids of the history the policy saw before each turn (equal
    ids within a group: identical token histories; GiGPO's anchor states, arXiv
    2505.10978), -1 past an episode's last turn; a single-turn env gives K = 1, ids 0."""

    def select(self, names: frozenset[str]) -> dict[str, torch.Tensor | None]:
        """The keyword arguments of ``advantages`` for the declared ``names``."""
        return {name: getattr(self, name) for name in sorted(names)}


ADVANTAGE_INPUTS: frozenset[str] = frozenset(f.name for f in fields(AdvantageInputs))
"""The vocabulary of ``Algorithm.inputs``: the fields of ``AdvantageInputs``."""


# --- an algorithm's card: what the algorithm is, for reports and generic checks ---------
# A card describes the loss; it never changes what the loss computes. Readers: ``harness
# list algorithms`` (family, paper, mechanism line), the compare report and the boards
# (acting shares), and the conformance suite (zoo/algorithms/conformance.py), which picks
# and phrases its checks by ``clip_style``, ``sequence_level``, ``mechanism`` and
# ``token_selection``. A plugin states one as a class attribute,
#     card = Card(paper="Shao et al., DeepSeekMath, arXiv 2402.03300 (2024)",
#                 family="group-relative PPO-clip",
#                 mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0})
# and each field stays readable under its old name on the class and its instances
# (``GRPO.family``, ``algo.mechanism``; zoo/algorithms/base.py).

ClipStyle = Literal["zero", "cap", "none"]


@dataclass(frozen=True)
class Card:
    paper: str = ""
    """The paper it follows: authors, title, arXiv id."""
    family: str = "other"
    """The family ``harness list algorithms`` groups it under, e.g. "group-relative
    PPO-clip", "sequence-level", "soft/capped ratio", "REINFORCE-style", "entropy
    control", "geometric mean" (docs/algorithms.md); "other" for a plugin that says none."""
    clip_style: ClipStyle = "zero"
    """What happens to a token with A > 0 whose ratio is above the upper clip:
    "zero": PPO-style clip, its gradient is zero (GRPO, DAPO, GSPO, ...);
    "cap": the ratio's weight is capped, the gradient stays nonzero (CISPO);
    "none": no hard clip (SAPO's soft gate)."""
    sequence_level: bool = False
    """True when the loss sees a sequence's tokens only through its mean log-ratio
    (GSPO's sequence ratio)."""
    mechanism: Mapping[str, float] = field(default_factory=dict)
    """What the loss does once the ratio moves away from 1, as its acting shares: metric
    name -> idle value, always 0.0. An acting share counts the response tokens (or, named
    ``seq_...``, the sequences) whose gradient the clip, cap or gate changed, not those
    whose ratio is merely out of range: a token with A = 0, or out of range on the side its
    advantage does not push, is not counted. {"clip_low_acting_frac": 0.0,
    "clip_high_acting_frac": 0.0} for a PPO clip, {"capped_acting_frac": 0.0} for CISPO's
    cap, {"gate_acting_frac": 0.0} for SAPO's gate (docs/algorithms.md). ``check-plugin``
    and the compare report say from it whether the mechanism acted; empty: the algorithm
    declares none. Read-only by convention (a dict, as plugins have always written it)."""
    token_selection: str = ""
    """For a loss that treats a few tokens differently, chosen from statistics of the rows
    it is given, whether or not the ratio moved (Clip-Cov's and KL-Cov's covariance
    selection): the metric reporting the fraction of response tokens it selected. The
    conformance suite then lets the on-policy gradient differ from REINFORCE's on at most
    that many tokens, and, since a micro-batch selects from its own rows, checks that each
    micro-batch divides by the whole batch's counts instead of that micro-batches add up
    to the whole batch. Empty: no such selection."""

    def acting_shares(self) -> list[str]:
        """The metrics that say on what share of its units the algorithm's own mechanism
        changed the gradient: its ``mechanism``, else its ``token_selection`` (Clip-Cov
        detaches the tokens it selects, ratio or not), else none (gpg)."""
        if self.mechanism:
            return list(self.mechanism)
        return [self.token_selection] if self.token_selection else []

    def mechanism_acted(self, metrics: Mapping[str, float]) -> bool:
        """True when an acting share of ``mechanism`` in ``metrics`` is above 0: the
        mechanism changed at least one token's (or sequence's) gradient. Shares missing
        from ``metrics`` count as idle."""
        return any(metrics.get(k, 0.0) > 0.0 for k in self.mechanism)


CARD_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Card))
"""The card's fields, each also an attribute of the algorithm class under the same name."""

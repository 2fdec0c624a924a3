"""An algorithm's card: what the algorithm is, for reports and generic checks.

A card describes the loss; it never changes what the loss computes. Readers:
``harness list algorithms`` (family, paper, mechanism line), the compare report and the
boards (acting shares), and the conformance suite (zoo/algorithms/conformance.py), which
uses ``clip_style``, ``sequence_level``, ``mechanism`` and ``token_selection`` to pick and
phrase its checks. A plugin states one as a class attribute::

    card = Card(
        paper="Shao et al., DeepSeekMath, arXiv 2402.03300 (2024)",
        family="group-relative PPO-clip",
        mechanism={"clip_low_acting_frac": 0.0, "clip_high_acting_frac": 0.0},
    )

Each field stays readable under its old name on the class and its instances
(``GRPO.family``, ``algo.mechanism``; zoo/algorithms/base.py), and a plugin written before
cards existed, which sets those class attributes one by one, still gets a card built from
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Literal

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

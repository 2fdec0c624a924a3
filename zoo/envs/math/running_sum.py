"""Procedural multi-step sums: ``34+17+58+21=``, answered with written partial sums.

The reasoning testbed of the zoo's boards. A problem is a list of ``terms_min`` to
``terms_max`` integers of ``digits`` digits; the reward is 1.0 when the text after the
completion's last ``=`` (the whole completion when it has none) is the exact total, and
0.0 otherwise. Nothing else is read, so any chain of steps that ends in the right total
pays, and so does the bare total:

    34+17=51,51+58=109,109+21=130     the full chain (the reference answer)
    34+17+58=109,109+21=130           two terms added in one step
    130                               no steps

Why this shape (docs/envs.md has the measurements): the tiny model cannot add four
two-digit numbers in one pass, but it adds a two- or three-digit number and a two-digit
one well, so writing the running total step by step is what solves the task, and each
step is one more chance to slip. Answers are tens of tokens (the full chain of 5 terms is
41 bytes) and their length is the policy's choice: it may write every partial sum or add
several terms in one step. That makes visible what 6-token answers hide: token- against
sequence-level ratios, length normalisation (a wrong answer's length under GRPO's
per-sequence mean, Dr. GRPO's claim) and entropy under clip-higher.

Splits: the held-out split (``eval_size`` problems) and the validation split
(``validation_size``, for selecting hyperparameters: ``harness tune``) are fixed lists
drawn with constant seeds and disjoint; train draws never return a problem of either.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from zoo.core.config import ConfigError
from zoo.envs.answers import exact_integer_reward
from zoo.envs.base import Env, Prompt

EVAL_SEED = "running-sum-heldout-v1"
VALIDATION_SEED = "running-sum-validation-v1"
MAX_TERMS = 64
MAX_DIGITS = 12
MAX_COMPLETION_CHARS = 4096
"""Completions longer than this score 0 unread (the longest chain of MAX_TERMS terms of
MAX_DIGITS digits is about 1,800 characters)."""

Problem = tuple[int, ...]


@dataclass
class RunningSumConfig:
    terms_min: int = 3
    """Fewest terms of a problem."""
    terms_max: int = 5
    """Most terms of a problem (drawn uniformly from terms_min..terms_max)."""
    digits: int = 2
    """Every term has exactly this many digits (2: 10..99)."""
    eval_size: int = 500
    """Held-out problems (>= 500 keeps binomial noise near +-2 points)."""
    validation_size: int = 500
    """Validation problems (hyperparameter selection), disjoint from held-out and train."""


class RunningSum(Env):
    name = "running_sum"
    config_class = RunningSumConfig
    reward_values = "1 (the text after the last '=' is the exact total) or 0"
    tiny_model = "tiny-sum"

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        cfg = self.config
        if not 2 <= cfg.terms_min <= cfg.terms_max <= MAX_TERMS:
            raise ConfigError(
                f"running_sum: need 2 <= terms_min <= terms_max <= {MAX_TERMS}, got "
                f"terms_min={cfg.terms_min}, terms_max={cfg.terms_max}"
            )
        if not 1 <= cfg.digits <= MAX_DIGITS:
            raise ConfigError(f"running_sum: need 1 <= digits <= {MAX_DIGITS}, got {cfg.digits}")
        for name in ("eval_size", "validation_size"):
            if getattr(cfg, name) < 1:
                raise ConfigError(f"running_sum: {name} must be >= 1, got {getattr(cfg, name)}")
        span = 9 * 10 ** (cfg.digits - 1)
        if cfg.eval_size + cfg.validation_size > span**cfg.terms_min // 4:
            raise ConfigError(
                "running_sum: eval_size + validation_size is over a quarter of the problems "
                "of terms_min terms; raise digits or terms_min"
            )

    def _draw(self, rng: random.Random) -> Problem:
        lo, hi = 10 ** (self.config.digits - 1), 10**self.config.digits - 1
        k = rng.randint(self.config.terms_min, self.config.terms_max)
        return tuple(rng.randint(lo, hi) for _ in range(k))

    def _fixed(self, seed: str, size: int, exclude: set[Problem]) -> list[Problem]:
        rng = random.Random(seed)
        seen: dict[Problem, None] = {}
        while len(seen) < size:
            problem = self._draw(rng)
            if problem not in exclude:
                seen.setdefault(problem, None)
        return list(seen)

    @cached_property
    def _heldout(self) -> list[Problem]:
        return self._fixed(EVAL_SEED, self.config.eval_size, set())

    @cached_property
    def _validation(self) -> list[Problem]:
        return self._fixed(VALIDATION_SEED, self.config.validation_size, set(self._heldout))

    @cached_property
    def _set_aside(self) -> set[Problem]:
        return {*self._heldout, *self._validation}

    def _prompt(self, terms: Problem, index: int, split: str) -> Prompt:
        text = "+".join(map(str, terms)) + "="
        return Prompt(
            text=text, answer=sum(terms), index=index, split=split, meta={"terms": list(terms)}
        )

    def train_prompt(self, index: int, seed: int) -> Prompt:
        # String seeds are hashed with SHA-512 by `random`: stable across runs and machines.
        rng = random.Random(f"running-sum:{seed}:{index}")
        problem = self._draw(rng)
        while problem in self._set_aside:
            problem = self._draw(rng)
        return self._prompt(problem, index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "eval") for i, p in enumerate(self._heldout)]

    def validation_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "validation") for i, p in enumerate(self._validation)]

    def reference_answer(self, prompt: Prompt) -> str:
        return chain_answer(prompt.meta["terms"], merges=())

    def demonstration(self, prompt: Prompt, rng: random.Random, merge_fraction: float) -> str:
        """A warm-start answer of ``prompt`` (``demonstration``; the tiny-sum recipe)."""
        return demonstration(prompt.meta["terms"], rng, merge_fraction)

    def score(self, prompt: Prompt, completion: str) -> float:
        if len(completion) > MAX_COMPLETION_CHARS:
            return 0.0
        final = completion[completion.rfind("=") + 1 :]  # rfind is -1 without "=": all of it
        return exact_integer_reward(final, prompt.answer, max_chars=MAX_COMPLETION_CHARS)


def chain_answer(terms: list[int], merges: tuple[int, ...] | set[int]) -> str:
    """The chain of partial sums of ``terms``: step ``j`` adds term ``j + 1`` to the running
    total, except that a step whose index is in ``merges`` also adds the term after it
    (three operands in one step). ``merges=()`` is the full chain."""
    steps, total, j = [], terms[0], 1
    while j < len(terms):
        operands = [terms[j]]
        if j in merges and j + 1 < len(terms):
            operands.append(terms[j + 1])
        shown = "+".join(map(str, [total, *operands]))
        total += sum(operands)
        steps.append(f"{shown}={total}")
        j += len(operands)
    return ",".join(steps)


def demonstration(terms: list[int], rng: random.Random, merge_fraction: float) -> str:
    """A warm-start answer: the chain with each step merged with the next one with
    probability ``merge_fraction`` (so the model sees chains of every granularity)."""
    merges = {j for j in range(1, len(terms) - 1) if rng.random() < merge_fraction}
    return chain_answer(terms, merges)

"""Procedural integer arithmetic: ``a+b=`` / ``a-b=`` with a, b of ``digits`` digits.

The model must answer with the exact integer (``-23``, ``117``) and then stop. Reward is
1.0 for the exact answer (surrounding whitespace ignored) and 0.0 for anything else,
including malformed output. The held-out split is a fixed set of ``eval_size`` problems
(drawn once with a constant seed); train draws never return a held-out problem.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from zoo.core.config import ConfigError
from zoo.envs.answers import exact_integer_reward
from zoo.envs.base import Env, Prompt

EVAL_SEED = "arithmetic-heldout-v1"
MAX_DIGITS = 1000
"""Operands past this (prompts of 2,000+ tokens, the product's answer of 2,000 digits)
are refused: no model's response budget holds such an answer, and building them is slow."""


@dataclass
class ArithmeticConfig:
    digits: int = 2
    """Difficulty: operands have exactly this many digits (2: 10..99)."""
    ops: str = "+-"
    """Operators to draw from, any of "+-*"."""
    eval_size: int = 500
    """Number of held-out problems (>= 500 keeps binomial noise near +-2 points)."""


class Arithmetic(Env):
    name = "arithmetic"
    config_class = ArithmeticConfig
    reward_values = "1 (exact integer answer) or 0"

    def __init__(self, **overrides) -> None:
        super().__init__(**overrides)
        cfg = self.config
        if not 1 <= cfg.digits <= MAX_DIGITS or not cfg.ops or set(cfg.ops) - set("+-*"):
            raise ConfigError(
                f"arithmetic: need 1 <= digits <= {MAX_DIGITS} and ops from '+-*', got {cfg}"
            )
        span = 9 * 10 ** (cfg.digits - 1)
        if cfg.eval_size < 1:  # (the run evaluates at step 0: an empty split has no mean)
            raise ConfigError(f"arithmetic: eval_size must be >= 1, got {cfg.eval_size}")
        if cfg.eval_size > (span * span * len(cfg.ops)) // 4:
            raise ConfigError("arithmetic: eval_size is over a quarter of all problems")

    def _draw(self, rng: random.Random) -> tuple[int, str, int]:
        lo, hi = 10 ** (self.config.digits - 1), 10**self.config.digits - 1
        return rng.randint(lo, hi), rng.choice(self.config.ops), rng.randint(lo, hi)

    def _prompt(self, problem: tuple[int, str, int], index: int, split: str) -> Prompt:
        a, op, b = problem
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        return Prompt(text=f"{a}{op}{b}=", answer=answer, index=index, split=split)

    @cached_property
    def _heldout(self) -> list[tuple[int, str, int]]:
        rng = random.Random(EVAL_SEED)
        seen: dict[tuple[int, str, int], None] = {}
        while len(seen) < self.config.eval_size:
            seen.setdefault(self._draw(rng), None)
        return list(seen)

    @cached_property
    def _heldout_set(self) -> set[tuple[int, str, int]]:
        return set(self._heldout)

    def train_prompt(self, index: int, seed: int) -> Prompt:
        # String seeds are hashed with SHA-512 by `random`: stable across runs and machines.
        rng = random.Random(f"arithmetic:{seed}:{index}")
        problem = self._draw(rng)
        while problem in self._heldout_set:
            problem = self._draw(rng)
        return self._prompt(problem, index, "train")

    def eval_prompts(self) -> list[Prompt]:
        return [self._prompt(p, i, "eval") for i, p in enumerate(self._heldout)]

    def reference_answer(self, prompt: Prompt) -> str:
        return str(prompt.answer)

    def score(self, prompt: Prompt, completion: str) -> float:
        return exact_integer_reward(completion, prompt.answer, max_chars=2 * MAX_DIGITS + 2)

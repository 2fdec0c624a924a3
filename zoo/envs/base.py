"""The environment contract: a seeded, index-addressable train split, a fixed held-out
split, and a scorer that turns completions into rewards in [-1, 1]."""

from __future__ import annotations

import random
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from zoo.core.config import make_config


@dataclass(frozen=True)
class Prompt:
    """One task instance. ``answer`` is the ground truth: the env keeps it for scoring,
    the generator only ever sees ``text``."""

    text: str
    answer: Any
    index: int
    """Position in its split (train: the seeded stream; eval: the fixed list)."""
    split: str
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class EmptyConfig:
    pass


class Env(ABC):
    """Subclasses set ``name``, ``config_class`` and ``reward_values``, and implement
    ``train_prompt``, ``eval_prompts`` and ``score``."""

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = EmptyConfig
    reward_values: ClassVar[str] = ""
    """Which rewards occur, in words (e.g. "0 or 1")."""
    tiny_model: ClassVar[str] = "tiny"
    """The tiny preset warm-started on this env's format: the model runs on it use when
    the command line names none (zoo.models.presets.TINY_MODELS)."""

    def __init__(self, **overrides: Any) -> None:
        self.config = make_config(self.config_class, overrides, owner=f"env {self.name!r}")

    @abstractmethod
    def train_prompt(self, index: int, seed: int) -> Prompt:
        """The ``index``-th prompt of the train stream for ``seed`` (pure function)."""

    @abstractmethod
    def eval_prompts(self) -> list[Prompt]:
        """The fixed held-out split: the same list on every call and every run."""

    @abstractmethod
    def score(self, prompt: Prompt, completion: str) -> float:
        """Reward of one completion text (ends before the end-of-text token)."""

    def validation_prompts(self) -> list[Prompt]:
        """A fixed validation split, disjoint from the train stream and the held-out split,
        on which ``harness tune`` selects hyperparameters (``--eval-split validation``).
        Envs without one raise a ConfigError."""
        from zoo.core.config import ConfigError

        raise ConfigError(
            f"env {self.name!r} has no validation split (selecting settings on the held-out "
            "split would tune on the test set); running_sum has one"
        )

    def warm_start_prompts(self, start: int, n: int, seed: int) -> list[Prompt]:
        """Prompts of a split set apart for a tiny preset's supervised warm start
        (``TinyRecipe.data == "warm_start"``), disjoint from the train stream and the
        held-out split, so that RL does not train on what the warm start memorised. Envs
        with a small, fixed pool of problems have one (pyfunc); the others raise a
        ConfigError."""
        from zoo.core.config import ConfigError

        raise ConfigError(f"env {self.name!r} has no warm-start split; pyfunc has one")

    def eval_split(self, split: str) -> list[Prompt]:
        """The prompts a run evaluates on: ``eval_prompts()`` for "heldout",
        ``validation_prompts()`` for "validation"."""
        return self.validation_prompts() if split == "validation" else self.eval_prompts()

    def train_prompts(self, start: int, n: int, seed: int) -> list[Prompt]:
        return [self.train_prompt(i, seed) for i in range(start, start + n)]

    def score_batch(self, prompts: list[Prompt], completions: list[str]) -> list[float]:
        return [self.score(p, c) for p, c in zip(prompts, completions, strict=True)]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "config": asdict(self.config)}

    def reference_answer(self, prompt: Prompt) -> str | None:
        """A correct completion of ``prompt`` (the warm start's target, and the check that
        no length shaping punishes a correct answer), or None where the env has none."""
        return None


HELDOUT_SEED = "heldout-v1"
"""Seed string of the held-out draw of the dataset envs (never changes: the split is fixed)."""


def split_off(items: list, eval_size: int, name: str) -> tuple[list, list]:
    """(train, held-out): ``eval_size`` items drawn with a constant per-env seed, the
    held-out ones in draw order, the train ones in their original order."""
    order = list(range(len(items)))
    random.Random(f"{name}:{HELDOUT_SEED}").shuffle(order)
    held = set(order[:eval_size])
    return [x for i, x in enumerate(items) if i not in held], [items[i] for i in order[:eval_size]]


class EpochShuffle:
    """A seeded, index-addressable stream over ``size`` items: ``stream(index, seed)`` is a
    position in the items, drawn from a fresh permutation per (seed, epoch), so it is a pure
    function of (index, seed). The last few permutations are kept; thread-safe."""

    def __init__(self, name: str, size: int, keep: int = 4) -> None:
        self.name, self.size, self.keep = name, size, keep
        self._orders: OrderedDict[tuple[int, int], list[int]] = OrderedDict()
        self._lock = threading.Lock()

    def __call__(self, index: int, seed: int) -> int:
        if index < 0:
            raise IndexError(f"train index must be >= 0, got {index}")
        epoch, pos = divmod(index, self.size)
        key = (seed, epoch)
        with self._lock:
            if key not in self._orders:
                order = list(range(self.size))
                random.Random(f"{self.name}:train:{seed}:{epoch}").shuffle(order)
                self._orders[key] = order
                while len(self._orders) > self.keep:
                    self._orders.popitem(last=False)
            self._orders.move_to_end(key)
            return self._orders[key][pos]

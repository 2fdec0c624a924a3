"""Multi-turn episodes: the env answers each assistant turn.

A single-turn env scores one completion: ``score(prompt, completion)``. A multi-turn env
(``MultiTurnEnv``) starts an ``Episode`` from a prompt; the loop then alternates

    assistant turn (sampled by the policy, up to the run's per-turn token budget)
    -> episode.step(text) -> Reply: an observation (tool output, test feedback, the next
       user message) shown to the model before its next turn, or the end with a reward

until the episode ends, reaches the env's ``max_turns`` or the run's token limit for the
whole episode. The trajectory the trainer sees is the prompt followed by every turn's
tokens and every observation's tokens; the loss mask is 1 on the assistant's tokens only,
so environment tokens never enter the loss or the ratios. One episode is one "response"
of its group: group advantages are per episode.

An env's code runs in the loop's process; anything the model wrote that must be executed
(a tool call, a submitted program) runs in the sandbox (zoo.envs.execution.sandbox), and a malformed
call is answered with an observation saying so, never with an exception.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from zoo.envs.base import Env, Prompt


@dataclass(frozen=True)
class Reply:
    """The env's answer to one assistant turn."""

    observation: str = ""
    """Text shown to the model before its next turn (ignored when ``done``)."""
    done: bool = False
    """The episode is over; ``reward`` is its reward."""
    reward: float = 0.0
    """When ``done``: the episode's reward, in the env's ``reward_values``. Otherwise a
    per-turn reward (0 for envs that reward only the end), recorded for algorithms that
    use per-turn credit."""
    tool_call: bool = False
    """This turn was a tool call (or a submission the env executed)."""
    tool_ok: bool = False
    """... and it was well formed and ran without error."""
    info: dict[str, Any] = field(default_factory=dict)


class Episode(ABC):
    """One run of a multi-turn task, from one prompt. Not shared between threads."""

    @abstractmethod
    def step(self, assistant_text: str) -> Reply:
        """Answer one assistant turn (its text, without the end-of-turn token)."""

    def final_reward(self) -> float:
        """The reward when the episode is cut off (turn or token limit) before the env said
        ``done``: by default 0. An env that can grade a partial episode overrides it."""
        return 0.0


class MultiTurnEnv(Env):
    """An env whose tasks take several turns. Subclasses implement ``start`` besides the
    ``Env`` methods; ``score(prompt, text)`` grades ``text`` as a final answer given in one
    turn (the warm start's validation and the overlong check use it)."""

    max_turns: int = 4
    """Assistant turns per episode at most (an env's config may override it)."""
    max_observation_tokens: int = 0
    """An upper bound of one observation's length in tokens (bytes bound it), where the env
    knows one: the default episode token limit then leaves room for every episode its turns
    allow (``zoo.run.episodes.episode_budget``). 0: unknown."""

    @abstractmethod
    def start(self, prompt: Prompt) -> Episode:
        """A fresh episode for ``prompt`` (a pure function of the prompt)."""

    def step_batch(self, episodes: list[Episode], texts: list[str]) -> list[Reply]:
        """``episode.step(text)`` for one turn of many episodes: the loop calls this once
        per turn with every running episode. By default one after another; an env whose
        turns execute something (a tool call, a program) overrides it to run them together
        (e.g. one sandbox pool call), giving the same replies."""
        return [e.step(t) for e, t in zip(episodes, texts, strict=True)]

    def turn_limit(self) -> int:
        return int(getattr(self.config, "max_turns", self.max_turns))


def is_multi_turn(env: Env) -> bool:
    return isinstance(env, MultiTurnEnv)

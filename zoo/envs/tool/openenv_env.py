"""``openenv``: any OpenEnv environment server as a multi-turn env (``zoo.envs.episode``).

OpenEnv (Meta's ``openenv-core``) serves an environment over HTTP and WebSocket with a
Gym-like API: ``reset(seed)`` gives the first observation, ``step(action)`` the next one
with ``reward`` and ``done``. This adapter is its client: it talks to a server that is
already running (``--env-set url=http://127.0.0.1:8000``), one WebSocket session per
episode, so the episodes of a batch run on the server side by side.

Text in, text out. The assistant's turn is sent as the action ``{action_field: text}``
("message" by default); the text the model sees is the observation's ``text_field``
("prompt" by default): the first observation is the prompt, each later one the observation
shown before the next turn. When the server says ``done`` its ``reward`` is the episode's;
a reward on an earlier step is a per-turn reward (``Reply.reward``). An action the server
refuses (a validation error, an exception in its ``step``) ends that episode with reward 0
and the server's message in ``Reply.info``: never a crash. A server that cannot be reached,
or that has no session left (its ``max_concurrent_envs`` must cover the episodes of one
step: prompts per step x group size), fails the run with a message that says so.

Splits. OpenEnv has no splits; the adapter makes them from ``reset``'s seed: train prompt
``index`` of stream ``seed`` resets with a seed drawn from (seed, index) in
``[0, 2**31)``, held-out prompt ``i`` with ``HELDOUT_SEED_BASE + i``. So the server's
``reset`` must be a function of its seed (the adapter checks: an episode that resets to a
text other than its prompt's raises an error). Disjoint seeds do not make disjoint
problems when the server draws from a small pool; that is the server's to ensure.

Where the action runs: on the server, never in this process. A server that executes model
output (code, shell) must sandbox it itself (OpenEnv's envs run in containers).
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from zoo.core.config import ConfigError
from zoo.envs.base import Prompt
from zoo.envs.episode import Episode, MultiTurnEnv, Reply

HELDOUT_SEED_BASE = 2**31
"""Held-out prompt i resets with seed HELDOUT_SEED_BASE + i; train seeds lie below it."""

T = TypeVar("T")


@dataclass
class OpenEnvConfig:
    url: str = ""
    """The running server's base URL (http://host:port or ws://host:port)."""
    action_field: str = "message"
    """The action's field that carries the assistant's text."""
    text_field: str = "prompt"
    """The observation's field that carries the text shown to the model."""
    eval_size: int = 100
    """Held-out prompts (seeds HELDOUT_SEED_BASE .. + eval_size - 1)."""
    max_turns: int = 4
    """Assistant turns per episode at most (the episode is then cut: reward 0)."""
    timeout_s: float = 60.0
    """Wait at most this long for one server reply."""


class OpenEnvEpisode(Episode):
    """One server session: opened at the first turn (reset to the prompt's seed), closed
    when the episode ends."""

    def __init__(self, env: OpenEnvEnv, prompt: Prompt) -> None:
        self.env, self.prompt = env, prompt
        self.client: Any = None
        self.done = False

    def step(self, assistant_text: str) -> Reply:
        return self.env.step_batch([self], [assistant_text])[0]

    def final_reward(self) -> float:
        """Cut off by a limit before the server said done: reward 0, and the session is
        closed (the server's sessions are few)."""
        self.env._run(self.env._end(self))
        return 0.0


class OpenEnvEnv(MultiTurnEnv):
    """``openenv``: an OpenEnv server's environment; see the module docstring."""

    name = "openenv"
    config_class = OpenEnvConfig
    reward_values = "the server's reward when it says done (0 if it refuses an action)"

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**overrides)
        cfg = self.config
        if not cfg.url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigError(
                f"openenv: url must be the server's address, e.g. --env-set "
                f"url=http://127.0.0.1:8000 (got {cfg.url!r})"
            )
        if cfg.eval_size < 1 or cfg.max_turns < 1 or cfg.timeout_s <= 0:
            raise ConfigError("openenv: need eval_size >= 1, max_turns >= 1, timeout_s > 0")
        try:
            from openenv.core.generic_client import GenericEnvClient
        except ImportError as e:  # scripts/setup.sh installs it
            raise ConfigError(f"openenv: openenv-core is not installed ({e})") from e
        self._client_class = GenericEnvClient
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._eval: list[Prompt] | None = None

    # ---- one event loop, in a thread of its own, for every session ----

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, daemon=True).start()
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __getstate__(self) -> dict[str, Any]:  # the loop and lock stay with their process
        state = dict(self.__dict__)
        state.update(_loop=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())

    async def _open(self, seed: int) -> tuple[Any, str]:
        """A connected session reset to ``seed``, and its first text."""
        client = self._client_class(
            base_url=self.config.url, message_timeout_s=self.config.timeout_s
        )
        try:
            result = await client.reset(seed=seed)
        except Exception as e:
            await client.close()
            raise RuntimeError(
                f"openenv: no session on {self.config.url} ({e}); is the server running, "
                "and does its max_concurrent_envs cover prompts per step x group size?"
            ) from e
        return client, self._text(result.observation)

    def _text(self, observation: dict[str, Any]) -> str:
        field = self.config.text_field
        if not isinstance(observation.get(field), str):
            raise RuntimeError(
                f"openenv: the observation has no text field {field!r} (its fields: "
                f"{', '.join(sorted(observation)) or 'none'}); set --env-set text_field=..."
            )
        return observation[field]

    # ---- prompts ----

    async def _first_texts(self, seeds: list[int]) -> list[str]:
        """The first observation of each seed, through one session reset in turn."""
        client = None
        texts = []
        try:
            for seed in seeds:
                if client is None:
                    client, text = await self._open(seed)
                else:
                    text = self._text((await client.reset(seed=seed)).observation)
                texts.append(text)
        finally:
            if client is not None:
                await client.close()
        return texts

    @staticmethod
    def train_seed(index: int, seed: int) -> int:
        return random.Random(f"openenv:train:{seed}:{index}").randrange(HELDOUT_SEED_BASE)

    def train_prompt(self, index: int, seed: int) -> Prompt:
        return self.train_prompts(index, 1, seed)[0]

    def train_prompts(self, start: int, n: int, seed: int) -> list[Prompt]:
        seeds = [self.train_seed(i, seed) for i in range(start, start + n)]
        texts = self._run(self._first_texts(seeds))
        return [
            Prompt(text=t, answer={"seed": s}, index=start + k, split="train")
            for k, (s, t) in enumerate(zip(seeds, texts, strict=True))
        ]

    def eval_prompts(self) -> list[Prompt]:
        if self._eval is None:
            seeds = [HELDOUT_SEED_BASE + i for i in range(self.config.eval_size)]
            texts = self._run(self._first_texts(seeds))
            self._eval = [
                Prompt(text=t, answer={"seed": s}, index=i, split="eval")
                for i, (s, t) in enumerate(zip(seeds, texts, strict=True))
            ]
        return list(self._eval)

    # ---- episodes ----

    def start(self, prompt: Prompt) -> OpenEnvEpisode:
        return OpenEnvEpisode(self, prompt)

    def step_batch(self, episodes: list[OpenEnvEpisode], texts: list[str]) -> list[Reply]:
        """One turn of every episode, the sessions' round trips side by side."""

        async def turn() -> list[Reply]:
            return list(
                await asyncio.gather(
                    *(self._step(e, t) for e, t in zip(episodes, texts, strict=True))
                )
            )

        return self._run(turn())

    async def _step(self, episode: OpenEnvEpisode, text: str) -> Reply:
        if episode.done:
            raise RuntimeError("openenv: step() after the episode ended")
        if episode.client is None:
            episode.client, first = await self._open(episode.prompt.answer["seed"])
            if first != episode.prompt.text:
                await self._end(episode)
                raise RuntimeError(
                    f"openenv: reset(seed={episode.prompt.answer['seed']}) gave {first!r}, "
                    f"not the prompt {episode.prompt.text!r}: the server's reset must be a "
                    "function of its seed"
                )
        try:
            result = await episode.client.step({self.config.action_field: text})
        except RuntimeError as e:  # the server refused this action: the episode ends
            await self._end(episode)
            return Reply(done=True, reward=0.0, info={"openenv_error": str(e)})
        reward = float(result.reward or 0.0)
        if result.done:
            await self._end(episode)
            return Reply(done=True, reward=reward)
        return Reply(observation=self._text(result.observation), reward=reward)

    async def _end(self, episode: OpenEnvEpisode) -> None:
        episode.done = True
        if episode.client is not None:
            await episode.client.close()
            episode.client = None

    def score(self, prompt: Prompt, completion: str) -> float:
        """``completion`` as a one-turn episode: the reward if the server ends it there."""
        episode = self.start(prompt)
        reply = episode.step(completion)
        return reply.reward if reply.done else episode.final_reward()

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        out["sources"] = {
            "train": f"{self.config.url}: reset(seed) with seeds below {HELDOUT_SEED_BASE}",
            "eval": f"{self.config.url}: reset(seed) with seeds {HELDOUT_SEED_BASE} + i",
        }
        out["reward_values"] = self.reward_values
        out["max_turns"] = self.turn_limit()
        return out

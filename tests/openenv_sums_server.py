"""An OpenEnv environment server for tests/test_openenv.py, built with openenv-core's own
``create_app`` and run by uvicorn on 127.0.0.1: ``python openenv_sums_server.py PORT``.

The game: ``reset(seed)`` draws a, b in 10..49 from the seed and shows "a+b=" (the tiny
model's arithmetic format). A right answer ends the episode with reward 1; a wrong one is
answered "\\nagain: a+b=" (per-turn reward -0.1) until the second wrong one, which ends it
with reward 0. An answer containing "!" makes ``step`` raise: a server-side refusal."""

from __future__ import annotations

import random
import sys
from typing import Any

import uvicorn
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State


class SumAction(Action):
    message: str


class SumObservation(Observation):
    prompt: str = ""


class Sums(Environment):
    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self.a = self.b = self.wrong = 0
        self._state = State()

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kw: Any):
        rng = random.Random(seed)
        self.a, self.b, self.wrong = rng.randint(10, 49), rng.randint(10, 49), 0
        self._state = State(episode_id=episode_id, step_count=0)
        return SumObservation(prompt=f"{self.a}+{self.b}=")

    def step(self, action: SumAction, timeout_s: float | None = None, **kw: Any):
        if "!" in action.message:
            raise ValueError("no '!' here")
        self._state.step_count += 1
        if action.message.strip() == str(self.a + self.b):
            return SumObservation(done=True, reward=1.0)
        self.wrong += 1
        if self.wrong >= 2:
            return SumObservation(done=True, reward=0.0)
        return SumObservation(prompt=f"\nagain: {self.a}+{self.b}=", reward=-0.1)

    @property
    def state(self) -> State:
        return self._state


app = create_app(Sums, SumAction, SumObservation, env_name="sums", max_concurrent_envs=1024)

if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")

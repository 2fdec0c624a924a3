"""Proxies with the local services' methods that forward each call to their actors, and
the replicas of a service (items split across them, a dead one replaced)."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from zoo.core.types import Completion
from zoo.placement.calls import ServiceFailure, result_of
from zoo.services.batch import RolloutBatch
from zoo.services.sampling import SamplingConfig
from zoo.services.trainer import write_hf_checkpoint


class Replicas:
    """Copies of one actor, each in processes of its own. A call's items are split into
    contiguous slices, one per replica; a replica whose process died is replaced (and its
    slice re-run on the new one) when ``replace_failed``, else the failure stops the run."""

    def __init__(
        self,
        service: str,
        spawn: Callable[[int], Any],
        count: int,
        replace_failed: bool,
        prepare: Callable[[Any], None] = lambda actor: None,
    ) -> None:
        self.service = service
        self.spawn = spawn
        self.prepare = prepare
        """Brings a replacement up to date (a generator: the current weights)."""
        self.replace_failed = replace_failed
        self.actors = [spawn(i) for i in range(count)]
        self.replacements = 0

    def submit(self, endpoint_name: str, sliced: tuple[list | None, ...], *shared: Any) -> Pending:
        """Call ``endpoint_name(*slices, *shared)`` on every replica with a non-empty
        slice of the (equally long) lists in ``sliced`` (None stays None)."""
        total = len(sliced[0])
        bounds = torch.linspace(0, total, len(self.actors) + 1).round().long().tolist()
        parts = []
        for replica, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            if hi > lo:
                args = (*(None if x is None else x[lo:hi] for x in sliced), *shared)
                actor = self.actors[replica]
                future = getattr(actor, endpoint_name).call_one(*args)
                parts.append((replica, actor, future, (endpoint_name, args)))
        return Pending(self, parts)

    def broadcast(self, endpoint_name: str, *args: Any) -> list[tuple[int, Any, Any]]:
        """Send to every replica; (replica, actor, future) for ``settle``."""
        return [
            (i, a, getattr(a, endpoint_name).call_one(*args)) for i, a in enumerate(self.actors)
        ]

    def settle(self, sent: list[tuple[int, Any, Any]]) -> list[Any]:
        """The answers of a broadcast (a replica that died meanwhile is replaced, already
        up to date, and answers nothing; or the run stops)."""
        answers = (self.answer(replica, actor, future) for replica, actor, future in sent)
        return [a for a in answers if a is not None]

    def answer(
        self, replica: int, actor: Any, future: Any, rerun: tuple[str, tuple] | None = None
    ) -> Any:
        """``future``'s value. If ``actor`` died: replace it (unless an earlier failed call
        did) and, given ``rerun`` (endpoint, arguments), ask the replacement; else None.
        Without ``replace_failed`` the failure stops the run."""
        try:
            return result_of(self.service, future)
        except ServiceFailure:
            if not self.replace_failed:
                raise
            if self.actors[replica] is actor:
                self.replace(replica)
            if rerun is None:
                return None
            name, args = rerun
            return result_of(self.service, getattr(self.actors[replica], name).call_one(*args))

    def replace(self, replica: int) -> Any:
        """Start a new process for a failed replica and bring it up to date."""
        print(
            f"forge-zoo: {self.service} replica {replica} failed; starting a replacement",
            file=sys.stderr,
        )
        actor = self.spawn(replica)
        self.prepare(actor)
        self.actors[replica] = actor
        self.replacements += 1
        return actor


class Pending:
    """A split call in flight; ``result()`` waits and returns the replicas' answers in
    slice order, re-running a dead replica's slice on its replacement."""

    def __init__(self, replicas: Replicas, parts: list[tuple[int, Any, Any, tuple]]) -> None:
        self.replicas = replicas
        self.parts = parts  # (replica, actor, future, (endpoint, arguments))

    def result(self) -> list[Any]:
        return [self.replicas.answer(*part) for part in self.parts]


class PendingGeneration:
    """A generate call in flight; ``result()`` waits for the groups."""

    def __init__(self, generator: RemoteGenerator, pending: Pending) -> None:
        self.generator = generator
        self.pending = pending

    def result(self) -> list[list[Completion]]:
        groups: list[list[Completion]] = []
        for part, busy in self.pending.result():
            self.generator.busy_seconds += busy
            groups += part
        return groups


class RemoteGenerator:
    """Generator replicas behind the local generator's interface: a call's prompts are
    split across the replicas (with their seeds, so the samples do not depend on the
    split), weight updates go to all of them.

    ``wait_for_updates`` False (asynchronous mode): ``update_weights`` returns once the
    weights are sent; each replica applies them after the requests already queued on it
    (an actor handles its messages in order), which is what bounds the policy age."""

    def __init__(
        self,
        spawn: Callable[[int], Any],
        replicas: int,
        replace_failed: bool,
        current_weights: Callable[[], tuple[dict[str, torch.Tensor], int]],
        wait_for_updates: bool = True,
    ) -> None:
        def prepare(actor: Any) -> None:  # a replacement gets the trainer's weights
            result_of("generator", actor.update_weights.call_one(*current_weights()))

        self.pool = Replicas("generator", spawn, replicas, replace_failed, prepare)
        self.wait_for_updates = wait_for_updates
        self.policy_version = 0
        self.busy_seconds = 0.0
        """Seconds the replicas spent generating (summed over replicas)."""
        self.load_seconds = 0.0
        """Seconds the replicas spent receiving and loading weights (summed; in async
        mode this happens off the loop's path, so the loop's sync phase does not show it)."""
        self._updates: list[Any] = []

    @property
    def actors(self) -> list[Any]:
        return self.pool.actors

    @property
    def replicas(self) -> int:
        return len(self.actors)

    @property
    def replacements(self) -> int:
        return self.pool.replacements

    def submit(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> PendingGeneration:
        pending = self.pool.submit("generate", (prompts, seeds), n, sampling, greedy)
        return PendingGeneration(self, pending)

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        return self.submit(prompts, n, sampling, seeds, greedy).result()

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Send the weights to every replica in a message (the endpoint backend)."""
        self._send("update_weights", (hf_state_dict, version), version)

    def pull_weights(self, buffer: Any, layout: list, version: int) -> None:
        """Tell every replica to read the weights from ``buffer`` (the RDMA backend)."""
        self._send("pull_weights", (buffer, layout, version), version)

    def _send(self, endpoint_name: str, args: tuple, version: int) -> None:
        self.settle()  # the previous update's errors surface here, not never
        self._updates = self.pool.broadcast(endpoint_name, *args)
        self.policy_version = version
        if self.wait_for_updates:
            self.settle()

    def settle(self) -> None:
        """Wait until the weight updates sent so far are applied."""
        updates, self._updates = self._updates, []
        self.load_seconds += sum(self.pool.settle(updates))


class RemoteScorer:
    """``score_batch`` split across scorer replicas (scores are per item, so the split
    does not change them)."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas

    def score_batch(self, prompts: list[Any], completions: list[str]) -> list[float]:
        return [
            r
            for part in self.replicas.submit("score_batch", (prompts, completions)).result()
            for r in part
        ]


class RemoteTrainer:
    """The Trainer's interface, forwarded to every trainer process (FSDP2 needs all ranks
    in each collective); the answer is rank 0's. ``train`` ignores its ``loss_fn``
    argument: the actors call the loss of the algorithm they were built with (the run's)."""

    def __init__(self, actors: Any) -> None:
        self.actors = actors

    def _all(self, name: str, *args: Any) -> Any:
        values = result_of("trainer", getattr(self.actors, name).call(*args))
        return next(iter(values.values()))

    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return self._all("logprobs", batch)

    def train(self, batch: RolloutBatch, loss_fn: Any = None) -> dict:
        return self._all("train", batch)

    @property
    def version(self) -> int:
        return self._all("version")

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return self._all("hf_state_dict")

    def export_weights(self) -> tuple[Any, list, int]:
        return self._all("export_weights")

    def optimizer_state_dict(self) -> dict:
        return self._all("optimizer_state_dict")

    def load_state(self, hf_state_dict: dict, optimizer_state: dict, version: int) -> None:
        self._all("load_state", hf_state_dict, optimizer_state, version)

    def save_hf(self, directory: Path, source: Path) -> None:
        """The weights come to this (the loop's) process, which writes them: every part of
        a checkpoint lands on the loop's host, whichever host the trainer runs on."""
        write_hf_checkpoint(self.hf_state_dict(), directory, source)


class RemoteReference:
    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return result_of("reference", self.actor.logprobs.call_one(batch))


class RemoteCritic:
    """The critic's interface, forwarded to its actor. ``train`` ignores its ``loss_fn``
    argument: the actor calls the ``value_loss`` of the algorithm it was built with."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def values(self, batch: RolloutBatch) -> torch.Tensor:
        return result_of("critic", self.actor.values.call_one(batch))

    def train(self, batch: RolloutBatch, loss_fn: Any = None) -> dict:
        return result_of("critic", self.actor.train.call_one(batch))

    def state_dict(self) -> dict:
        return result_of("critic", self.actor.state_dict.call_one())

    def load_state(self, state: dict) -> None:
        result_of("critic", self.actor.load_state.call_one(state))

"""The services as the loop sees them: the methods a placement must provide.

The loop, the checkpoints and the evaluation call only these. ``--placement local`` gives
them the classes themselves (``VLLMGenerator`` or ``HFGenerator``, ``Trainer``,
``Reference``, ``Critic``, and the env as its own scorer); ``--placement monarch`` gives proxies
(zoo.placement.remote) that forward each call to actors in other processes. A placement is
correct when its objects have these methods with these signatures and, in sync mode,
return the same values; tests/test_protocols.py checks the signatures of both.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from zoo.core.types import Completion, LossOutput, TrainBatch, ValueBatch

if TYPE_CHECKING:
    from collections.abc import Callable

    from zoo.services.batch import RolloutBatch
    from zoo.services.sampling import SamplingConfig


@runtime_checkable
class GeneratorService(Protocol):
    """Samples completions with per-prompt seeds and takes new weights in place."""

    replicas: int
    """Engines behind this service (the loop's generator idle time counts each)."""
    busy_seconds: float
    """Seconds spent generating so far, summed over replicas."""
    policy_version: int
    """The version of the weights it samples with (stamped on every completion)."""

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        """``n`` completions of each prompt (token ids), one group per prompt."""
        ...

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Sample with these weights (Hugging Face naming) from now on, as ``version``."""
        ...


class PendingGeneration(Protocol):
    """A ``submit`` call in flight."""

    def result(self) -> list[list[Completion]]:
        """Wait for the groups ``generate`` would have returned."""
        ...


@runtime_checkable
class AsyncGeneratorService(GeneratorService, Protocol):
    """A generator that takes requests without waiting for them: what asynchronous mode
    (``--mode async``) needs, so that sampling the next batches overlaps training on this
    one. The Monarch placement's ``RemoteGenerator`` is one (its replicas run in other
    processes); the in-process generators are not, which is why async mode needs it."""

    def submit(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> PendingGeneration:
        """Request what ``generate`` returns; ``result()`` of the answer waits for it."""
        ...


@runtime_checkable
class TrainerService(Protocol):
    """Holds the policy and its optimizer; the only service whose weights change."""

    version: int
    """The policy version: optimizer passes over rollout batches so far."""

    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] log pi_old of each row, under the weights that sampled it."""
        ...

    def train(self, batch: RolloutBatch, loss_fn: Callable[[TrainBatch], LossOutput]) -> dict:
        """Every update on one rollout batch; the version advances by one."""
        ...

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        """The current weights in Hugging Face naming, whole."""
        ...

    def optimizer_state_dict(self) -> dict:
        """The optimizer's state, whole (a checkpoint resumes at any world size)."""
        ...

    def load_state(
        self, hf_state_dict: dict[str, torch.Tensor], optimizer_state: dict, version: int
    ) -> None:
        """Restore weights, optimizer state and version (a resume)."""
        ...

    def save_hf(self, directory: Path, source: Path) -> None:
        """Write the current weights as a Hugging Face checkpoint beside ``source``'s
        config and tokenizer files."""
        ...


@runtime_checkable
class ReferenceService(Protocol):
    """The frozen reference policy of a KL penalty."""

    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] the reference model's log-probs of the response tokens."""
        ...


@runtime_checkable
class ValueService(Protocol):
    """The critic of an algorithm with ``needs_values`` (zoo/services/value.py): values
    of response tokens, trained on returns; its state goes into checkpoints."""

    def values(self, batch: RolloutBatch) -> torch.Tensor:
        """[B, T] V(s_t) of each response token (0 on padding)."""
        ...

    def train(self, batch: RolloutBatch, loss_fn: Callable[[ValueBatch], LossOutput]) -> dict:
        """Every update on one batch (``batch.values`` and ``batch.returns`` set)."""
        ...

    def state_dict(self) -> dict:
        """Weights and optimizer state, whole."""
        ...

    def load_state(self, state: dict) -> None:
        """Restore ``state_dict``'s (a resume)."""
        ...


@runtime_checkable
class ScorerService(Protocol):
    """Scores completions (the env itself, or scorer processes)."""

    def score_batch(self, prompts: list[Any], completions: list[str]) -> list[float]:
        """One reward per (prompt, completion text) pair."""
        ...


SERVICES: dict[str, type] = {
    "generator": GeneratorService,
    "trainer": TrainerService,
    "reference": ReferenceService,
    "critic": ValueService,
    "scorer": ScorerService,
}
"""The protocols by the name of the ``Services`` field that holds the service."""

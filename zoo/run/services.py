"""``Services``: what one run's loop calls, the plugins and the services behind their
protocols, whichever placement built them (``zoo.run.wiring.build_services`` builds them).

A module of its own, apart from the wiring, so that what only calls the services (the
rollouts, the episodes, the loop) names their type without reaching the code that builds
engines and trainers; ``zoo.run.wiring`` re-exports it for its older importers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zoo.algorithms import Algorithm
from zoo.envs import Env, Prompt
from zoo.run.plan import RunPlan
from zoo.services.conversation import Conversation
from zoo.services.ledger import Ledger
from zoo.services.protocols import (
    GeneratorService,
    ReferenceService,
    ScorerService,
    TrainerService,
    ValueService,
)


@dataclass
class Services:
    """What one run's loop calls: the plugins, and the services as their protocols
    (zoo.services.protocols), whichever placement built them."""

    env: Env
    algorithm: Algorithm
    generator: GeneratorService
    trainer: TrainerService
    reference: ReferenceService | None
    encode: Callable[[Prompt], list[int]]
    """Prompt -> token ids (plain text, or the chat template when the env asks for it)."""
    ledger: Ledger
    observe: Conversation | None = None
    """Multi-turn envs: the run's tokenizer for the episodes, called as (prompt, assistant
    turns so far, observation) -> the observation's token ids, and decoding each sampled
    turn (zoo.services.conversation.Conversation); None: not needed."""
    close: Callable[[], None] = lambda: None
    """Release what the placement started (the Monarch placement's processes)."""
    scorer: ScorerService | None = None
    """Scores completions in processes of their own (the Monarch placement's scorer
    service); None: the env scores them in this process."""
    publish_weights: Callable[[], None] | None = None
    """Send the trainer's current weights and version to every generator. Default: the
    trainer's Hugging Face state dict passed to ``generator.update_weights``; the Monarch
    placement's RDMA backend moves them between its processes without the loop."""
    critic: ValueService | None = None
    """The value model of an algorithm with ``needs_values`` (PPO); None otherwise."""
    plan: RunPlan | None = None
    """The run's plan (zoo.run.plan), its model resolved: what the loop and config.json
    read instead of resolving the config again. None: services assembled by hand (tests);
    the loop then derives what it needs from the config."""

    def score_batch(self, prompts: list[Prompt], texts: list[str]) -> list[float]:
        return (self.scorer or self.env).score_batch(prompts, texts)

    def sync_weights(self) -> None:
        if self.publish_weights is not None:
            self.publish_weights()
        else:
            self.generator.update_weights(self.trainer.hf_state_dict(), self.trainer.version)

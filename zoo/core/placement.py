"""Where the services run. ``local``: everything in this process (the fast default).
``monarch``: the generator, the trainer and the reference model each in their own process,
as Monarch actors on a local process mesh; the loop, the env (whose scorer keeps its own
sandbox processes) and the ledger stay in the calling process.

The loop does not know which it has: a ``Remote*`` proxy has the same methods as the local
service and forwards each call to its actor, waiting for the answer (synchronous mode), so
the same seed gives the same numbers in both placements. Weight sync goes trainer actor ->
loop -> generator actor as a Hugging Face state dict.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from monarch.actor import Actor, endpoint, this_host

from zoo.core.generator import SamplingConfig
from zoo.core.trainer import RolloutBatch
from zoo.core.types import Completion

CALL_TIMEOUT_S = 3600.0
"""Upper bound on one call to an actor: a dead or hung process surfaces as an error."""


class GeneratorActor(Actor):
    def __init__(self, backend: str, model_path: str, init: str, device: str,
                 max_model_len: int) -> None:  # fmt: skip
        from zoo.core.generator import make_generator

        self.generator = make_generator(backend, Path(model_path), seed=0, init=init,
                                        device=device, max_model_len=max_model_len)  # fmt: skip

    @endpoint
    def generate(self, prompts: list[list[int]], n: int, sampling: SamplingConfig,
                 seeds: list[int] | None, greedy: bool) -> list[list[Completion]]:  # fmt: skip
        return self.generator.generate(prompts, n=n, sampling=sampling, seeds=seeds,
                                       greedy=greedy)  # fmt: skip

    @endpoint
    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> None:
        self.generator.update_weights(hf_state_dict, version)

    @endpoint
    def pid(self) -> int:
        """The actor's process id (for fault tests and operators)."""
        return os.getpid()


class TrainerActor(Actor):
    """A Trainer and the algorithm whose loss it calls (built here from name and config:
    the loss is a method, so it lives where the model does)."""

    def __init__(
        self,
        model_path: str,
        trainer_config: Any,
        max_response_len: int,
        init: str,
        device: str,
        algorithm: str,
        algorithm_config: dict,
        seed: int,
    ) -> None:
        from zoo.algorithms import get_algorithm
        from zoo.core.trainer import Trainer

        torch.manual_seed(seed)  # as the local placement seeds before building the trainer
        self.trainer = Trainer(Path(model_path), trainer_config, max_response_len, init=init,
                               device=device)  # fmt: skip
        self.algorithm = get_algorithm(algorithm, **algorithm_config)

    @endpoint
    def step(self, batch: RolloutBatch) -> dict:
        return self.trainer.step(batch, self.algorithm.loss)

    @endpoint
    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return self.trainer.hf_state_dict()

    @endpoint
    def version(self) -> int:
        return self.trainer.version

    @endpoint
    def optimizer_state_dict(self) -> dict:
        return self.trainer.optimizer_state_dict()

    @endpoint
    def load_state(self, hf_state_dict: dict, optimizer_state: dict, version: int) -> None:
        self.trainer.load_state(hf_state_dict, optimizer_state, version)

    @endpoint
    def save_hf(self, directory: str, source: str) -> None:
        self.trainer.save_hf(Path(directory), Path(source))


class ReferenceActor(Actor):
    """The frozen reference: built from the trainer's initial weights (sent once)."""

    def __init__(self, model_path: str, hf_state_dict: dict, micro_batch_size: int,
                 device: str) -> None:  # fmt: skip
        from zoo.core.models import build_titan_model
        from zoo.core.reference import Reference

        model, adapter = build_titan_model(Path(model_path), init="random", device=device)
        model.load_state_dict(adapter.from_hf(hf_state_dict), strict=True)
        self.reference = Reference(model, micro_batch_size)

    @endpoint
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return self.reference.logprobs(batch)


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]


class ServiceFailure(RuntimeError):
    """A service's process died or a call to it failed or timed out."""


def _report_fault(failure: Any) -> None:
    """Monarch's hook for a failed process that nobody is waiting on. Its default ends the
    main thread with KeyboardInterrupt; instead, say what failed and let the pending call
    (if any) raise ServiceFailure, so the run stops with its metrics and checkpoint."""
    print(f"forge-zoo: a service process failed: {one_line(failure)}", file=sys.stderr)


def _get(service: str, call: Any) -> Any:
    try:
        return call.get(timeout=CALL_TIMEOUT_S)
    except Exception as exc:
        raise ServiceFailure(
            f"the {service} service failed ({type(exc).__name__}: {one_line(exc)}); the run "
            "stops here: metrics up to the last finished step and the last checkpoint are "
            "kept, continue with --resume"
        ) from exc


class RemoteGenerator:
    def __init__(self, actor: Any) -> None:
        self.actor = actor
        self.policy_version = 0

    def generate(
        self,
        prompts: list[list[int]],
        n: int,
        sampling: SamplingConfig,
        seeds: list[int] | None = None,
        greedy: bool = False,
    ) -> list[list[Completion]]:
        return _get("generator", self.actor.generate.call_one(prompts, n, sampling, seeds, greedy))

    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> None:
        _get("generator", self.actor.update_weights.call_one(hf_state_dict, version))
        self.policy_version = version


class RemoteTrainer:
    """The Trainer's interface, forwarded. ``step`` ignores its ``loss_fn`` argument: the
    actor calls the loss of the algorithm it was built with (the run's)."""

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def step(self, batch: RolloutBatch, loss_fn: Any = None) -> dict:
        return _get("trainer", self.actor.step.call_one(batch))

    @property
    def version(self) -> int:
        return _get("trainer", self.actor.version.call_one())

    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return _get("trainer", self.actor.hf_state_dict.call_one())

    def optimizer_state_dict(self) -> dict:
        return _get("trainer", self.actor.optimizer_state_dict.call_one())

    def load_state(self, hf_state_dict: dict, optimizer_state: dict, version: int) -> None:
        _get("trainer", self.actor.load_state.call_one(hf_state_dict, optimizer_state, version))

    def save_hf(self, directory: Path, source: Path) -> None:
        _get("trainer", self.actor.save_hf.call_one(str(directory), str(source)))


class RemoteReference:
    def __init__(self, actor: Any) -> None:
        self.actor = actor

    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return _get("reference", self.actor.logprobs.call_one(batch))


def spawn_monarch_services(
    cfg: Any, spec: Any, device: str, trainer_config: Any, needs_reference: bool, max_model_len: int
) -> dict[str, Any]:
    """Spawn one process per service on this host and return the proxies. The processes
    inherit this one's environment (FORGE_ZOO_CACHE, thread settings)."""
    import monarch.actor

    monarch.actor.unhandled_fault_hook = _report_fault
    names = ["trainer", "generator"] + (["reference"] if needs_reference else [])
    meshes = {name: this_host().spawn_procs(per_host={"procs": 1}) for name in names}
    trainer = RemoteTrainer(meshes["trainer"].spawn(
        "trainer", TrainerActor, str(spec.path), trainer_config, cfg.max_response_len,
        cfg.init, device, cfg.algorithm, cfg.algorithm_config, cfg.seed,
    ))  # fmt: skip
    initial = trainer.hf_state_dict()
    generator = RemoteGenerator(meshes["generator"].spawn(
        "generator", GeneratorActor, cfg.generator, str(spec.path), cfg.init, device,
        max_model_len,
    ))  # fmt: skip
    if cfg.init == "random":  # the engine started without weights: send the trainer's
        generator.update_weights(initial, version=0)
    reference = None
    if needs_reference:
        reference = RemoteReference(meshes["reference"].spawn(
            "reference", ReferenceActor, str(spec.path), initial, cfg.micro_batch_size, device,
        ))  # fmt: skip

    def close() -> None:
        for mesh in meshes.values():
            mesh.stop().get(timeout=60)

    return {"trainer": trainer, "generator": generator, "reference": reference,
            "close": close}  # fmt: skip

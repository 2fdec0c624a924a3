"""The Monarch actors, one per service process: generator, trainer, reference, critic,
scorer.
Each wraps the local service class of the same name and pins its threads."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import torch
from monarch.actor import Actor, current_rank, endpoint

from zoo.core.types import Completion
from zoo.placement.calls import CALL_TIMEOUT_S
from zoo.placement.weight_sync import WeightSlots
from zoo.services.batch import RolloutBatch
from zoo.services.sampling import SamplingConfig


def pin_cores(cores: list[int] | None) -> None:
    """Run this process's threads on ``cores`` only (None: leave it to the OS). Called
    first thing in an actor, before any thread pool starts."""
    if not cores:
        return
    os.sched_setaffinity(0, cores)
    os.environ["OMP_NUM_THREADS"] = str(len(cores))  # vLLM sizes its OpenMP pool from it
    torch.set_num_threads(len(cores))


class GeneratorActor(Actor):
    """One generator replica. Replies carry the seconds the call kept the engine busy, so
    the loop can tell generator idle time from its own waiting."""

    def __init__(
        self,
        backend: str,
        model_path: str,
        init: str,
        device: str,
        max_model_len: int,
        cores: list[int] | None,
        tensor_parallel: int = 1,
    ) -> None:
        from zoo.services.generation import make_generator

        pin_cores(cores)
        self.generator = make_generator(
            backend,
            Path(model_path),
            seed=0,
            init=init,
            device=device,
            max_model_len=max_model_len,
            tensor_parallel=tensor_parallel,
        )
        self.flat: torch.Tensor | None = None  # where RDMA reads land

    @endpoint
    def generate(
        self,
        prompts: list[list[int]],
        seeds: list[int] | None,
        n: int,
        sampling: SamplingConfig,
        greedy: bool,
    ) -> tuple[list[list[Completion]], float]:
        """(Per-prompt arguments first: Replicas.submit slices them.)"""
        start = time.perf_counter()
        groups = self.generator.generate(
            prompts, n=n, sampling=sampling, seeds=seeds, greedy=greedy
        )
        return groups, time.perf_counter() - start

    @endpoint
    def update_weights(self, hf_state_dict: dict[str, torch.Tensor], version: int) -> float:
        start = time.perf_counter()
        self.generator.update_weights(hf_state_dict, version)
        return time.perf_counter() - start

    @endpoint
    def pull_weights(self, buffer: Any, layout: list, version: int) -> float:
        """Read the trainer's weights from its registered buffer and load them."""
        start = time.perf_counter()
        if self.flat is None or self.flat.numel() != buffer.size():
            self.flat = torch.empty(buffer.size(), dtype=torch.uint8)
        buffer.read_into(self.flat).get(timeout=CALL_TIMEOUT_S)
        self.generator.update_weights(WeightSlots.views(self.flat, layout), version)
        return time.perf_counter() - start

    @endpoint
    def pid(self) -> int:
        """The actor's process id (for fault tests and operators)."""
        return os.getpid()


class TrainerActor(Actor):
    """One process of the trainer: a Trainer and the algorithm whose loss it calls (built
    here from name and config: the loss is a method, so it lives where the model does).
    With several processes they form a gloo/NCCL process group and the Trainer splits the
    model over them (FSDP2, or tensor parallelism); every endpoint is then called on all
    of them together."""

    def __init__(
        self,
        model_path: str,
        trainer_config: Any,
        trainer_options: dict,
        max_response_len: int,
        init: str,
        device: str,
        algorithm: str,
        algorithm_config: dict,
        seed: int,
        cores: list[int] | None,
    ) -> None:
        self.cores = cores
        self.args = (Path(model_path), trainer_config, max_response_len, init, device)
        self.trainer_options = trainer_options  # temperature, max_policy_age (wiring)
        self.algorithm_args = (algorithm, algorithm_config)
        self.seed = seed

    @endpoint
    def rendezvous(self) -> tuple[str, int]:
        """(host, free port) for the process group's store (asked of rank 0 only)."""
        import socket

        with socket.socket() as s:
            s.bind(("", 0))
            return socket.gethostname(), s.getsockname()[1]

    @endpoint
    def start(
        self, world_size: int, master: tuple[str, int] | None, tensor_parallel: int = 1
    ) -> None:
        from zoo.algorithms import get_algorithm
        from zoo.services.trainer import Trainer

        self.rank = current_rank().rank  # (this call reaches the whole mesh)
        self.slots: WeightSlots | None = None
        cores = self.cores
        if cores and len(cores) >= world_size:  # the ranks split the trainer's cores
            cores = [c for i, c in enumerate(cores) if i % world_size == self.rank]
        pin_cores(cores)
        if self.args[4] == "cuda":  # one GPU per process, set before NCCL starts (no GPU here)
            torch.cuda.set_device(self.rank % torch.cuda.device_count())
        if world_size > 1:
            import torch.distributed as dist

            os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = master[0], str(master[1])
            backend = "nccl" if self.args[4] == "cuda" else "gloo"
            dist.init_process_group(backend, rank=self.rank, world_size=world_size)
        torch.manual_seed(self.seed)  # as the local placement seeds before building it
        path, config, max_response_len, init, device = self.args
        self.trainer = Trainer(
            path,
            config,
            max_response_len,
            init=init,
            device=device,
            tensor_parallel=tensor_parallel,
            **self.trainer_options,
        )
        self.algorithm = get_algorithm(self.algorithm_args[0], **self.algorithm_args[1])

    @endpoint
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return self.trainer.logprobs(batch)

    @endpoint
    def train(self, batch: RolloutBatch) -> dict:
        if batch.kl_coef is not None:  # the loop's adaptive KL weight (zoo.run.kl_control)
            self.algorithm.set_kl_coef(batch.kl_coef)
        return self.trainer.train(batch, self.algorithm.loss)

    @endpoint
    def hf_state_dict(self) -> dict[str, torch.Tensor]:
        return self.trainer.hf_state_dict()

    @endpoint
    def version(self) -> int:
        return self.trainer.version

    @endpoint
    def shard(self) -> dict[str, int]:
        """This process's rank, the trainer's world size and how many parameter elements
        this process holds (its FSDP2 shard or tensor-parallel slice; the whole model when
        unsplit)."""
        local = sum(getattr(p, "_local_tensor", p).numel() for p in self.trainer.model.parameters())
        return {"rank": self.rank, "world": self.trainer.world, "local_params": local}

    @endpoint
    def export_weights(self) -> tuple[Any, list, int] | None:
        """Write the current weights into this version's slot of the registered buffers;
        rank 0 answers (buffer, layout, version) for the generators to read."""
        state = self.trainer.hf_state_dict()  # every rank: a collective under FSDP2
        if self.rank != 0:
            return None
        if self.slots is None:
            self.slots = WeightSlots(state)
        return self.slots.write(state, self.trainer.version)

    @endpoint
    def optimizer_state_dict(self) -> dict:
        return self.trainer.optimizer_state_dict()

    @endpoint
    def load_state(self, hf_state_dict: dict, optimizer_state: dict, version: int) -> None:
        self.trainer.load_state(hf_state_dict, optimizer_state, version)

    @endpoint
    def pid(self) -> int:
        """The actor's process id (for fault tests and operators)."""
        return os.getpid()


class ReferenceActor(Actor):
    """The frozen reference: built from the trainer's initial weights (sent once)."""

    def __init__(
        self,
        model_path: str,
        hf_state_dict: dict,
        micro_batch_size: int,
        temperature: float,
        device: str,
        cores: list[int] | None,
    ) -> None:
        from zoo.models.titan import build_titan_model
        from zoo.services.reference import Reference

        pin_cores(cores)
        model, adapter = build_titan_model(Path(model_path), init="random", device=device)
        model.load_state_dict(adapter.from_hf(hf_state_dict), strict=True)
        self.reference = Reference(model, micro_batch_size, temperature)

    @endpoint
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return self.reference.logprobs(batch)

    @endpoint
    def pid(self) -> int:
        """The actor's process id (for fault tests and operators)."""
        return os.getpid()


class CriticActor(Actor):
    """The learned critic of an algorithm with ``needs_values`` (zoo/services/value.py),
    built from the trainer's initial weights (sent once) and the algorithm, whose
    ``value_loss`` it trains on (built here from name and config, as the trainer actor
    builds the algorithm whose loss it calls)."""

    def __init__(
        self,
        model_path: str,
        hf_state_dict: dict,
        critic_config: Any,
        algorithm: str,
        algorithm_config: dict,
        device: str,
        cores: list[int] | None,
    ) -> None:
        from zoo.algorithms import get_algorithm
        from zoo.models.titan import build_titan_model
        from zoo.services.value import Critic

        pin_cores(cores)
        model, adapter = build_titan_model(Path(model_path), init="random", device=device)
        model.load_state_dict(adapter.from_hf(hf_state_dict), strict=True)
        self.critic = Critic(model, critic_config)
        self.algorithm = get_algorithm(algorithm, **algorithm_config)

    @endpoint
    def values(self, batch: RolloutBatch) -> torch.Tensor:
        return self.critic.values(batch)

    @endpoint
    def train(self, batch: RolloutBatch) -> dict:
        return self.critic.train(batch, self.algorithm.value_loss)

    @endpoint
    def state_dict(self) -> dict:
        return self.critic.state_dict()

    @endpoint
    def load_state(self, state: dict) -> None:
        self.critic.load_state(state)

    @endpoint
    def pid(self) -> int:
        """The actor's process id (for fault tests and operators)."""
        return os.getpid()


class ScorerActor(Actor):
    """The env's scoring in a process of its own (its sandbox runs from here)."""

    def __init__(self, env: str, env_config: dict) -> None:
        from zoo.envs import get_env

        self.env = get_env(env, **env_config)

    @endpoint
    def score_batch(self, prompts: list[Any], texts: list[str]) -> list[float]:
        return self.env.score_batch(prompts, texts)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

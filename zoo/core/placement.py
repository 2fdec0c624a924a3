"""Where the services run. ``local``: everything in this process (the fast default).
``monarch``: the generator, the trainer, the reference model (and, when the placement file
asks, the scorer) in processes of their own, as Monarch actors on this host or on the
hosts of a placement file (zoo.core.placement_config); the loop and the ledger stay in the
calling process.

The loop does not know which it has: a ``Remote*`` proxy has the same methods as the local
service and forwards each call to its actors, so in sync mode the same seed gives the
same numbers in both placements.

- Generators and scorers can have replicas (``Replicas``): a call's items are split
  across them, and a dead one is replaced (its slice re-run) or stops the run.
- The trainer can span several processes: they form a process group and the Trainer
  shards the model with FSDP2 (zoo.core.sharding); every call goes to all of them.
- Weight sync: ``RDMAWeightSync`` (generators read the trainer's registered buffers) or
  the state dict in messages (``RemoteGenerator.update_weights``).
- Async mode: ``RemoteGenerator.submit`` returns at once and updates are not waited for;
  each actor handles its messages in order, which is what bounds the policy age.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from monarch.actor import Actor, current_rank, endpoint, this_host

from zoo.core.generator import SamplingConfig
from zoo.core.models import ModelShape
from zoo.core.sharding import check_tensor_parallel
from zoo.core.trainer import RolloutBatch, write_hf_checkpoint
from zoo.core.types import Completion

CALL_TIMEOUT_S = 3600.0
"""Upper bound on one call to an actor: a dead or hung process surfaces as an error."""


def pin_cores(cores: list[int] | None) -> None:
    """Run this process's threads on ``cores`` only (None: leave it to the OS). Called
    first thing in an actor, before any thread pool starts."""
    if not cores:
        return
    os.sched_setaffinity(0, cores)
    os.environ["OMP_NUM_THREADS"] = str(len(cores))  # vLLM sizes its OpenMP pool from it
    torch.set_num_threads(len(cores))


def split_cores(mode: str, device: str, on_this_host: bool) -> tuple[list | None, list | None]:
    """(trainer cores, generator cores). In async mode on CPU the trainer and the
    generators compute at the same time: each gets its own half of this process's cores,
    since oversubscribed torch/OpenMP threads spin and slow both down several times. In
    sync mode they take turns, and each uses every core."""
    cores = sorted(os.sched_getaffinity(0))
    if mode != "async" or device != "cpu" or not on_this_host or len(cores) < 2:
        return None, None
    half = len(cores) // 2
    return cores[:half], cores[half:]


class GeneratorActor(Actor):
    """One generator replica. Replies carry the seconds the call kept the engine busy, so
    the loop can tell generator idle time from its own waiting."""

    def __init__(self, backend: str, model_path: str, init: str, device: str,
                 max_model_len: int, cores: list[int] | None,
                 tensor_parallel: int = 1) -> None:  # fmt: skip
        from zoo.core.generator import make_generator

        pin_cores(cores)
        self.generator = make_generator(backend, Path(model_path), seed=0, init=init,
                                        device=device, max_model_len=max_model_len,
                                        tensor_parallel=tensor_parallel)  # fmt: skip
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
        groups = self.generator.generate(prompts, n=n, sampling=sampling, seeds=seeds,
                                         greedy=greedy)  # fmt: skip
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
        from zoo.core.trainer import Trainer

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
            path, config, max_response_len, init=init, device=device,
            tensor_parallel=tensor_parallel,
        )  # fmt: skip
        self.algorithm = get_algorithm(self.algorithm_args[0], **self.algorithm_args[1])

    @endpoint
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return self.trainer.logprobs(batch)

    @endpoint
    def train(self, batch: RolloutBatch) -> dict:
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


class ReferenceActor(Actor):
    """The frozen reference: built from the trainer's initial weights (sent once)."""

    def __init__(self, model_path: str, hf_state_dict: dict, micro_batch_size: int,
                 temperature: float, device: str, cores: list[int] | None) -> None:  # fmt: skip
        from zoo.core.models import build_titan_model
        from zoo.core.reference import Reference

        pin_cores(cores)
        model, adapter = build_titan_model(Path(model_path), init="random", device=device)
        model.load_state_dict(adapter.from_hf(hf_state_dict), strict=True)
        self.reference = Reference(model, micro_batch_size, temperature)

    @endpoint
    def logprobs(self, batch: RolloutBatch) -> torch.Tensor:
        return self.reference.logprobs(batch)


class WeightSlots:
    """A state dict's bytes in flat buffers registered for RDMA reads (Monarch; a TCP
    fallback where there is no RDMA NIC). Two slots: version v is written into one while
    generators may still read v - 1 from the other; RDMAWeightSync waits for every
    generator to have loaded v - 1 before v + 1 overwrites its slot."""

    COUNT = 2
    ALIGN = 64  # bytes: every tensor starts on a cache line

    def __init__(self, state: dict[str, torch.Tensor]) -> None:
        import warnings

        from monarch.rdma import RDMABuffer

        self.layout: list[tuple[str, str, tuple[int, ...], int, int]] = []
        offset = 0
        for name, tensor in state.items():
            size = tensor.numel() * tensor.element_size()
            dtype = str(tensor.dtype).removeprefix("torch.")
            self.layout.append((name, dtype, tuple(tensor.shape), offset, size))
            offset += -(-size // self.ALIGN) * self.ALIGN
        self.flats = [torch.empty(offset, dtype=torch.uint8) for _ in range(self.COUNT)]
        with warnings.catch_warnings():  # the TCP fallback warns once per process
            warnings.simplefilter("ignore")
            self.buffers = [RDMABuffer(flat) for flat in self.flats]

    def write(self, state: dict[str, torch.Tensor], version: int) -> tuple[Any, list, int]:
        flat = self.flats[version % self.COUNT]
        for name, _, _, offset, size in self.layout:
            flat[offset : offset + size].copy_(state[name].contiguous().view(-1).view(torch.uint8))
        return self.buffers[version % self.COUNT], self.layout, version

    @staticmethod
    def views(flat: torch.Tensor, layout: list) -> dict[str, torch.Tensor]:
        """The state dict stored in ``flat`` (views, no copies)."""
        return {
            name: flat[offset : offset + size].view(getattr(torch, dtype)).view(shape)
            for name, dtype, shape, offset, size in layout
        }


class RDMAWeightSync:
    """Weight sync by RDMA: the trainer writes its weights into a registered buffer and
    every generator replica reads them from there; the loop only passes the handle."""

    def __init__(self, trainer: RemoteTrainer, generator: RemoteGenerator) -> None:
        self.trainer = trainer
        self.generator = generator

    def __call__(self) -> None:
        self.generator.settle()  # the slot about to be written is read by now
        buffer, layout, version = self.trainer.export_weights()
        self.generator.pull_weights(buffer, layout, version)


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


class Replicas:
    """Copies of one actor, each in processes of its own. A call's items are split into
    contiguous slices, one per replica; a replica whose process died is replaced (and its
    slice re-run on the new one) when ``replace_failed``, else the failure stops the run."""

    def __init__(self, service: str, spawn: Callable[[int], Any], count: int,
                 replace_failed: bool, prepare: Callable[[Any], None] = lambda actor: None,
                 ) -> None:  # fmt: skip
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

    def answer(self, replica: int, actor: Any, future: Any,
               rerun: tuple[str, tuple] | None = None) -> Any:  # fmt: skip
        """``future``'s value. If ``actor`` died: replace it (unless an earlier failed call
        did) and, given ``rerun`` (endpoint, arguments), ask the replacement; else None.
        Without ``replace_failed`` the failure stops the run."""
        try:
            return _get(self.service, future)
        except ServiceFailure:
            if not self.replace_failed:
                raise
            if self.actors[replica] is actor:
                self.replace(replica)
            if rerun is None:
                return None
            name, args = rerun
            return _get(self.service, getattr(self.actors[replica], name).call_one(*args))

    def replace(self, replica: int) -> Any:
        """Start a new process for a failed replica and bring it up to date."""
        print(f"forge-zoo: {self.service} replica {replica} failed; starting a replacement",
              file=sys.stderr)  # fmt: skip
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
            _get("generator", actor.update_weights.call_one(*current_weights()))

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


class RemoteScorer:
    """``score_batch`` split across scorer replicas (scores are per item, so the split
    does not change them)."""

    def __init__(self, replicas: Replicas) -> None:
        self.replicas = replicas

    def score_batch(self, prompts: list[Any], texts: list[str]) -> list[float]:
        return [r for part in self.replicas.submit("score_batch", (prompts, texts)).result()
                for r in part]  # fmt: skip


class RemoteTrainer:
    """The Trainer's interface, forwarded to every trainer process (FSDP2 needs all ranks
    in each collective); the answer is rank 0's. ``train`` ignores its ``loss_fn``
    argument: the actors call the loss of the algorithm they were built with (the run's)."""

    def __init__(self, actors: Any) -> None:
        self.actors = actors

    def _all(self, name: str, *args: Any) -> Any:
        values = _get("trainer", getattr(self.actors, name).call(*args))
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
        return _get("reference", self.actor.logprobs.call_one(batch))


ATTACH_TIMEOUT_S = 120.0


def attach_hosts(addresses: list[str]) -> Any:
    """A host mesh over Monarch workers already running at ``addresses`` (one per host).
    Monarch 0.7 has no TLS for worker connections yet, hence trust_all_connections: run
    workers only on a trusted cluster network."""
    from monarch.actor import attach_to_workers

    hosts = attach_to_workers(ca="trust_all_connections", workers=addresses, name="forge-zoo")
    try:
        hosts.initialized.get(timeout=ATTACH_TIMEOUT_S)
    except Exception as exc:
        raise ServiceFailure(
            f"could not reach the Monarch workers at {', '.join(addresses)} ({one_line(exc)}); "
            "start one on each host with `python -m harness worker --address tcp://0.0.0.0:PORT`"
        ) from exc
    return hosts


def spawn_monarch_services(
    cfg: Any, spec: Any, device: str, trainer_config: Any, needs_reference: bool, max_model_len: int
) -> dict[str, Any]:
    """Spawn the services' processes on this host and return the proxies. The processes
    inherit this one's environment (FORGE_ZOO_CACHE, thread settings). How many of each:
    ``cfg.distributed`` (a placement file, zoo.core.placement_config), else one each."""
    import monarch.actor

    from zoo.core.placement_config import PlacementConfig

    monarch.actor.unhandled_fault_hook = _report_fault
    layout = PlacementConfig.from_dict(cfg.distributed)
    meshes: list[Any] = []
    hosts = attach_hosts(layout.hosts) if layout.hosts else None

    def procs(n: int, service: str, replica: int = 0) -> Any:
        index = layout.host_index(service, replica)
        host = this_host() if hosts is None else hosts.slice(hosts=index)
        mesh = host.spawn_procs(per_host={"procs": n})
        meshes.append(mesh)
        return mesh

    trainer_cores, generator_cores = split_cores(cfg.mode, device, on_this_host=hosts is None)
    trainer_procs = layout.trainer.procs
    tensor_parallel = layout.parallelism.tensor_parallel_degree
    shape = ModelShape.from_hf_dir(spec.path)
    check_tensor_parallel(shape, tensor_parallel)  # before spawning anything
    check_tensor_parallel(shape, layout.generator.procs, "services.generator.procs")
    actors = procs(trainer_procs, "trainer").spawn(
        "trainer", TrainerActor, str(spec.path), trainer_config, cfg.max_response_len,
        cfg.init, device, cfg.algorithm, cfg.algorithm_config, cfg.seed, trainer_cores,
    )  # fmt: skip
    master = None
    if trainer_procs > 1:
        master = _get("trainer", actors.slice(procs=0).rendezvous.call_one())
    _get("trainer", actors.start.call(trainer_procs, master, tensor_parallel))
    trainer = RemoteTrainer(actors)
    # the trainer's starting weights, for engines started without any and the reference
    initial = trainer.hf_state_dict() if cfg.init == "random" or needs_reference else None

    def spawn_generator(replica: int) -> Any:
        # One actor per replica: with procs > 1 its vLLM engine starts the tensor-parallel
        # worker processes itself.
        return procs(1, "generator", replica).spawn(
            f"generator{replica}", GeneratorActor, cfg.generator, str(spec.path), cfg.init,
            device, max_model_len, generator_cores, layout.generator.procs,
        )  # fmt: skip

    generator = RemoteGenerator(
        spawn_generator,
        replicas=layout.generator.num_replicas,
        replace_failed=layout.generator.on_failure == "replace",
        current_weights=lambda: (trainer.hf_state_dict(), trainer.version),
        wait_for_updates=cfg.mode == "sync",
    )
    if cfg.init == "random":  # the engines started without weights: send the trainer's
        generator.update_weights(initial, version=0)
        generator.settle()
    reference = None
    if needs_reference:
        reference = RemoteReference(procs(1, "reference").spawn(
            "reference", ReferenceActor, str(spec.path), initial, cfg.micro_batch_size,
            cfg.temperature, device, trainer_cores,
        ))  # fmt: skip

    def close() -> None:
        for mesh in meshes:
            with contextlib.suppress(Exception):  # a dead replica's mesh: nothing to stop
                mesh.stop().get(timeout=60)

    scorer = None
    if layout.scorer.procs:  # listed in the placement file: scoring leaves the loop's process

        def spawn_scorer(replica: int) -> Any:
            return procs(1, "scorer", replica).spawn(
                f"scorer{replica}", ScorerActor, cfg.env, cfg.env_config
            )

        replace_failed = layout.scorer.on_failure == "replace"
        scorer = RemoteScorer(
            Replicas("scorer", spawn_scorer, layout.scorer.num_replicas, replace_failed)
        )
    publish = RDMAWeightSync(trainer, generator) if cfg.weight_sync == "rdma" else None
    return {"trainer": trainer, "generator": generator, "reference": reference,
            "scorer": scorer, "close": close, "publish_weights": publish}  # fmt: skip

"""Starting the services' processes, on this host or on the hosts of a placement file,
and returning their proxies (what ``build_services`` gets for ``--placement monarch``)."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from monarch.actor import this_host

from zoo.models.parallelism import check_tensor_parallel
from zoo.models.presets import ModelShape
from zoo.placement.actors import (
    CriticActor,
    GeneratorActor,
    ReferenceActor,
    ScorerActor,
    TrainerActor,
)
from zoo.placement.calls import ServiceFailure, one_line, report_fault, result_of
from zoo.placement.remote import (
    RemoteCritic,
    RemoteGenerator,
    RemoteReference,
    RemoteScorer,
    RemoteTrainer,
    Replicas,
)
from zoo.placement.weight_sync import RDMAWeightSync


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
    cfg: Any,
    spec: Any,
    device: str,
    trainer_config: Any,
    trainer_options: dict,
    needs_reference: bool,
    max_model_len: int,
    response_budget: int | None = None,
    critic_config: Any = None,
) -> dict[str, Any]:
    """Spawn the services' processes on this host and return the proxies. The processes
    inherit this one's environment (FORGE_ZOO_CACHE, thread settings). How many of each:
    ``cfg.placement.distributed`` (a placement file, zoo.placement.config), else one each.
    ``response_budget``: the trainer's L_max (a multi-turn env's episode token limit;
    default max_response_len). ``trainer_options``: the Trainer's keyword arguments from
    the run's other sections (zoo.run.wiring.trainer_options). ``critic_config``: the
    settings of a learned critic (a TrainerConfig with the critic's lr), in a process of
    its own; None: no critic."""
    import monarch.actor

    from zoo.placement.config import PlacementConfig

    monarch.actor.unhandled_fault_hook = report_fault
    layout = PlacementConfig.from_dict(cfg.placement.distributed)
    meshes: list[Any] = []
    hosts = attach_hosts(layout.hosts) if layout.hosts else None

    def procs(n: int, service: str, replica: int = 0) -> Any:
        index = layout.host_index(service, replica)
        host = this_host() if hosts is None else hosts.slice(hosts=index)
        mesh = host.spawn_procs(per_host={"procs": n})
        meshes.append(mesh)
        return mesh

    trainer_cores, generator_cores = split_cores(
        cfg.placement.mode, device, on_this_host=hosts is None
    )
    trainer_procs = layout.trainer.procs
    tensor_parallel = layout.parallelism.tensor_parallel_degree
    shape = ModelShape.from_hf_dir(spec.path)
    check_tensor_parallel(shape, tensor_parallel)  # before spawning anything
    check_tensor_parallel(shape, layout.generator.procs, "services.generator.procs")
    actors = procs(trainer_procs, "trainer").spawn(
        "trainer",
        TrainerActor,
        str(spec.path),
        trainer_config,
        trainer_options,
        response_budget or cfg.sampling.max_response_len,
        cfg.run.init,
        device,
        cfg.run.algorithm,
        cfg.run.algorithm_config,
        cfg.run.seed,
        trainer_cores,
    )
    master = None
    if trainer_procs > 1:
        master = result_of("trainer", actors.slice(procs=0).rendezvous.call_one())
    result_of("trainer", actors.start.call(trainer_procs, master, tensor_parallel))
    trainer = RemoteTrainer(actors)
    # the trainer's starting weights, for engines started without any and the reference
    needs_initial = cfg.run.init == "random" or needs_reference or critic_config is not None
    initial = trainer.hf_state_dict() if needs_initial else None

    def spawn_generator(replica: int) -> Any:
        # One actor per replica: with procs > 1 its vLLM engine starts the tensor-parallel
        # worker processes itself.
        return procs(1, "generator", replica).spawn(
            f"generator{replica}",
            GeneratorActor,
            cfg.placement.generator,
            str(spec.path),
            cfg.run.init,
            device,
            max_model_len,
            generator_cores,
            layout.generator.procs,
        )

    generator = RemoteGenerator(
        spawn_generator,
        replicas=layout.generator.num_replicas,
        replace_failed=layout.generator.on_failure == "replace",
        current_weights=lambda: (trainer.hf_state_dict(), trainer.version),
        wait_for_updates=cfg.placement.mode == "sync",
    )
    if cfg.run.init == "random":  # the engines started without weights: send the trainer's
        generator.update_weights(initial, version=0)
        generator.settle()
    reference = None
    if needs_reference:
        reference = RemoteReference(
            procs(1, "reference").spawn(
                "reference",
                ReferenceActor,
                str(spec.path),
                initial,
                cfg.regime.micro_batch_size,
                cfg.sampling.temperature,
                device,
                trainer_cores,
            )
        )

    critic = None
    if critic_config is not None:
        critic = RemoteCritic(
            procs(1, "critic").spawn(
                "critic",
                CriticActor,
                str(spec.path),
                initial,
                critic_config,
                cfg.run.algorithm,
                cfg.run.algorithm_config,
                device,
                trainer_cores,
            )
        )

    def close() -> None:
        for mesh in meshes:
            with contextlib.suppress(Exception):  # a dead replica's mesh: nothing to stop
                mesh.stop().get(timeout=60)

    scorer = None
    if layout.scorer.procs:  # listed in the placement file: scoring leaves the loop's process

        def spawn_scorer(replica: int) -> Any:
            return procs(1, "scorer", replica).spawn(
                f"scorer{replica}", ScorerActor, cfg.run.env, cfg.run.env_config
            )

        replace_failed = layout.scorer.on_failure == "replace"
        scorer = RemoteScorer(
            Replicas("scorer", spawn_scorer, layout.scorer.num_replicas, replace_failed)
        )
    publish = RDMAWeightSync(trainer, generator) if cfg.placement.weight_sync == "rdma" else None
    return {
        "trainer": trainer,
        "generator": generator,
        "reference": reference,
        "critic": critic,
        "scorer": scorer,
        "close": close,
        "publish_weights": publish,
    }

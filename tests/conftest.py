"""Shared fixtures: the tiny model is built once per session (or reused from
$FORGE_ZOO_CACHE when CI provides one); one in-process vLLM engine serves every vLLM
generator test, and one transformers generator (what a default run of the tiny model
samples with: ``by_size``) every in-process training loop. The Hugging Face Hub is
switched off for every test (HF_HUB_OFFLINE=1); tests/test_hub_downloads.py serves its
own on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from harness_cli import REPO

# Tests never reach the Hugging Face Hub: models and data sets come from the cache or local
# files (set before any test module imports huggingface_hub, which reads it at import;
# subprocesses inherit it). tests/test_hub_downloads.py unsets it for its local Hub.
os.environ["HF_HUB_OFFLINE"] = "1"


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory of the tiny model's shipped start weights (Hugging Face format). The cache
    (datasets, configs) is a temporary folder unless CI provides $FORGE_ZOO_CACHE."""
    if not os.environ.get("FORGE_ZOO_CACHE"):
        os.environ["FORGE_ZOO_CACHE"] = str(tmp_path_factory.mktemp("forge-zoo-cache"))
    from zoo.models.tiny import tiny_model_path

    return tiny_model_path()


@pytest.fixture(scope="session")
def generator(tiny_path: Path):
    """One vLLM engine for the whole session. Tests that change its weights must restore
    the tiny model's weights (version 0) before they return."""
    from zoo.services.generation.vllm import VLLMGenerator

    return VLLMGenerator(tiny_path, seed=0)


@pytest.fixture(scope="session")
def tiny_generator(tiny_path: Path):
    """The generator a default run of the tiny model uses (``--generator by_size``:
    transformers on CPU), one for the session, under the in-process loops of
    ``loop_for`` and ``loop_builder``. The same rule as ``generator``: a test that changes
    its weights restores the tiny model's (version 0) before it returns."""
    from zoo.services.generation import resolve_backend
    from zoo.services.generation.hf import HFGenerator

    assert resolve_backend("by_size", tiny_path, "cpu") == "hf"  # what the loop stands for
    return HFGenerator(tiny_path, seed=0)


@pytest.fixture(scope="session")
def tiny_model_path(tiny_path: Path) -> Path:
    """Alias of ``tiny_path`` (the name tests/test_cli.py asks for). Subprocesses inherit
    $FORGE_ZOO_CACHE from this process, so they reuse the same build."""
    return tiny_path


@pytest.fixture
def loop_for(tiny_path: Path, tiny_generator):
    """``loop_for(cfg)``: an RLLoop in this process on the session's transformers
    generator (``tiny_generator``, reset to the tiny model's weights) and a fresh trainer
    with the run's settings; the generator's weights are restored afterwards."""
    build, restore = loop_builder(tiny_path, tiny_generator)
    yield build
    restore()


def loop_builder(tiny_path: Path, generator):
    """(build, restore): ``build(cfg)`` makes an RLLoop as ``loop_for`` does; ``restore()``
    puts the tiny model's weights back into ``generator`` (for fixtures of a wider scope)."""
    import torch

    from zoo.algorithms import get_algorithm
    from zoo.envs import get_env
    from zoo.models.presets import ModelShape
    from zoo.models.titan import load_hf_state_dict
    from zoo.run.loop import RLLoop
    from zoo.run.run_config import RunConfig
    from zoo.run.wiring import Services, critic_config_of, trainer_config_of, trainer_options
    from zoo.services.ledger import Ledger
    from zoo.services.reference import Reference
    from zoo.services.trainer import Trainer
    from zoo.services.value import Critic

    start = load_hf_state_dict(tiny_path)

    def build(cfg: RunConfig) -> RLLoop:
        cfg.validate()
        generator.update_weights(start, version=0)
        torch.manual_seed(cfg.run.seed)
        trainer = Trainer(
            tiny_path, trainer_config_of(cfg), cfg.sampling.max_response_len, **trainer_options(cfg)
        )
        algorithm = get_algorithm(cfg.run.algorithm, **cfg.run.algorithm_config)
        reference = None
        if algorithm.needs_reference:
            reference = Reference(trainer.model, temperature=cfg.sampling.temperature)
        critic = None
        if algorithm.needs_values:  # a learned critic (ppo), as build_services makes it
            critic = Critic(trainer.model, critic_config_of(cfg, algorithm))
        services = Services(
            env=get_env(cfg.run.env, **cfg.run.env_config),
            algorithm=algorithm,
            generator=generator,
            trainer=trainer,
            reference=reference,
            encode=lambda prompt: list(prompt.text.encode()),
            ledger=Ledger(ModelShape.from_hf_dir(tiny_path)),
            critic=critic,
        )
        return RLLoop(cfg, services)

    return build, lambda: generator.update_weights(start, version=0)


@pytest.fixture
def two_hosts():
    """Two Monarch workers on local ports standing in for two machines of a cluster,
    started as a user would on each host (`python -m harness worker`)."""
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    addresses = [f"tcp://127.0.0.1:{port}" for port in ports]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "harness", "worker", "--address", a],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for a in addresses
    ]
    try:
        yield addresses, [w.pid for w in workers]
    finally:
        for w in workers:
            w.kill()
            w.wait()

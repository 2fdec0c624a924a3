"""Placement files: how many processes each service gets, in the YAML shape torchforge
users already write (``--config distributed.yaml``)::

    model: tiny                       # optional; --model on the command line wins
    parallelism:
      tensor_parallel_degree: 1       # TorchTitan's Qwen3 tensor parallelism (divides procs)
      pipeline_parallel_degree: 1
      data_parallel_shard_degree: 2   # FSDP2 shards (-1: trainer procs / tensor degree)
    services:
      generator: {procs: 1, num_replicas: 2, with_gpus: false, on_failure: replace}
      trainer:   {procs: 2, num_replicas: 1, with_gpus: false}
      reference: {procs: 1, num_replicas: 1, with_gpus: false}
      scorer:    {procs: 1, num_replicas: 2, on_failure: replace}   # default: procs 0
    hosts: [tcp://node1:22222, tcp://node2:22222]   # optional; default: this host

``hosts`` are Monarch workers already running on the cluster's machines (``python -m
harness worker --address tcp://0.0.0.0:22222`` on each, or Monarch's own job launchers).
The trainer goes on the first host, generator (and scorer) replica i on host (1 + i)
mod H, the reference on the last; every service's processes share a host.

Every service runs in processes of its own on Monarch (zoo.placement). A generator
replica is one engine (vLLM tensor-parallel over ``procs`` worker processes that it
starts itself). ``on_failure`` says what a dead replica does to the run: ``stop`` (a
clear error, the last checkpoint kept; the default) or ``replace`` (start a new process
with the current weights and re-run the lost requests). The scorer (the env's
``score_batch``, sandbox included) stays in the loop's process unless the file gives it
``procs: 1``; its replicas split each batch and can be replaced likewise. The file is
checked as a whole before anything starts, and recorded in the run's config.
"""

from __future__ import annotations

import dataclasses
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.core.config import ConfigError

ON_FAILURE = ("stop", "replace")
MAX_FILE_BYTES = 1 << 20
"""A placement file is a few lines; a larger one is refused before YAML reads it."""
MAX_PROCESSES = 4096
"""Upper bound on one service's processes (and on a parallelism degree): a typo such as
``num_replicas: 99999999999`` is refused instead of spawning until the machine falls over."""


@dataclass
class ServiceLayout:
    procs: int = 1
    """Processes per replica: the trainer's FSDP2 or tensor-parallel world; a generator's
    vLLM tensor parallelism (its engine starts the worker processes)."""
    num_replicas: int = 1
    """Independent copies; calls are split across them (generators only)."""
    with_gpus: bool = False
    """One GPU per process."""
    on_failure: str = "stop"
    """What a dead process does to the run: stop (resumable) or replace (generators)."""


@dataclass
class Parallelism:
    tensor_parallel_degree: int = 1
    """TorchTitan's Qwen3 tensor parallelism: ranks per group; FSDP2 goes over the groups."""
    pipeline_parallel_degree: int = 1
    """Not implemented: must be 1."""
    data_parallel_shard_degree: int = -1
    """FSDP2 shards; -1: every trainer process not used by the other degrees."""


SERVICES = ("generator", "trainer", "reference", "scorer")


@dataclass
class PlacementConfig:
    model: str = ""
    parallelism: Parallelism = field(default_factory=Parallelism)
    generator: ServiceLayout = field(default_factory=ServiceLayout)
    trainer: ServiceLayout = field(default_factory=ServiceLayout)
    reference: ServiceLayout = field(default_factory=ServiceLayout)
    scorer: ServiceLayout = field(default_factory=lambda: ServiceLayout(procs=0))
    """procs 0 (the default): the env scores in the loop's process."""
    hosts: list[str] = field(default_factory=list)
    """Monarch worker addresses (tcp://HOST:PORT); empty: every process on this host."""

    @classmethod
    def from_yaml(cls, path: Path, gpus_available: int | None = None) -> PlacementConfig:
        import yaml

        try:
            with open(path, "rb") as f:  # a bounded read: --config /dev/zero must not hang
                data = f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            raise ConfigError(f"placement file {path} does not exist") from None
        except OSError as exc:  # a folder, no permission, ...
            raise ConfigError(f"cannot read placement file {path}: {exc.strerror}") from None
        if len(data) > MAX_FILE_BYTES:
            raise ConfigError(
                f"placement file {path} is over {MAX_FILE_BYTES // 1024} KiB: not a placement file"
            )
        try:
            raw = yaml.safe_load(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"placement file {path} is not UTF-8 text (byte {exc.start}): not a placement file"
            ) from None
        except yaml.YAMLError as exc:
            where = getattr(exc, "problem_mark", None)
            at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
            problem = str(getattr(exc, "problem", None) or type(exc).__name__)[:80]
            raise ConfigError(f"placement file {path} is not valid YAML{at}: {problem}") from None
        except RecursionError:
            raise ConfigError(f"placement file {path} nests too deeply") from None
        try:
            return cls.from_dict(raw or {}, gpus_available)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], gpus_available: int | None = None) -> PlacementConfig:
        """Parse and check a placement (a file's contents, or a run config's record of
        one; ``{}`` is one process per service). ``gpus_available``: the machine's CUDA
        device count (None: ask torch)."""
        raw = _mapping(raw, "the placement")
        _known(raw, ("model", "parallelism", "services", "hosts"), "top-level key")
        hosts = raw.get("hosts", [])
        if not isinstance(hosts, list) or not all(isinstance(h, str) and "://" in h for h in hosts):
            raise ConfigError(
                f"hosts must be a list of Monarch worker addresses like tcp://node1:22222, "
                f"got {excerpt(hosts)}"
            )
        services = _mapping(raw.get("services", {}), "services")
        _known(services, SERVICES, "service")
        model = raw.get("model", "") or ""
        if not isinstance(model, str):
            raise ConfigError(f"model must be a model name or folder, got {excerpt(model)}")
        config = cls(
            model=model,
            parallelism=_fields(Parallelism, raw.get("parallelism", {}), "parallelism"),
            **{
                name: _fields(ServiceLayout, services.get(name, {}), f"services.{name}")
                for name in SERVICES
            },
            hosts=list(hosts),
        )
        config.check(gpus_available)
        return config

    def check(self, gpus_available: int | None = None) -> None:
        p = self.parallelism
        for name in SERVICES:
            layout = getattr(self, name)
            for key in ("procs", "num_replicas"):
                if getattr(layout, key) < (0 if (name, key) == ("scorer", "procs") else 1):
                    value = getattr(layout, key)
                    raise ConfigError(f"services.{name}.{key} must be >= 1, got {value}")
            if layout.procs * layout.num_replicas > MAX_PROCESSES:
                raise ConfigError(
                    f"services.{name} asks for {excerpt(layout.procs * layout.num_replicas)} "
                    f"processes (procs x num_replicas); at most {MAX_PROCESSES} per service"
                )
            if layout.on_failure not in ON_FAILURE:
                raise ConfigError(
                    f"services.{name}.on_failure must be one of {', '.join(ON_FAILURE)}, "
                    f"got {excerpt(layout.on_failure)}"
                )
        for key in (
            "tensor_parallel_degree",
            "pipeline_parallel_degree",
            "data_parallel_shard_degree",
        ):
            if abs(getattr(p, key)) > MAX_PROCESSES:
                raise ConfigError(
                    f"parallelism.{key} is {excerpt(getattr(p, key))}: past any "
                    f"trainer's {MAX_PROCESSES} processes"
                )
        if self.trainer.num_replicas != 1 or self.reference.num_replicas != 1:
            raise ConfigError(
                "the trainer and the reference have one replica each; replicate generators instead"
            )
        if self.trainer.on_failure == "replace" or self.reference.on_failure == "replace":
            raise ConfigError(
                "only generator and scorer replicas can be replaced (the trainer holds the "
                "run's state); use on_failure: stop and --resume"
            )
        if p.pipeline_parallel_degree != 1:
            raise ConfigError(
                f"parallelism.pipeline_parallel_degree is {p.pipeline_parallel_degree}: "
                "pipeline parallelism is not implemented (the trainer splits with FSDP2 or "
                "tensor parallelism)"
            )
        if p.tensor_parallel_degree < 1:
            raise ConfigError(
                f"parallelism.tensor_parallel_degree must be >= 1, got {p.tensor_parallel_degree}"
            )
        if p.data_parallel_shard_degree == -1:
            p.data_parallel_shard_degree = max(self.trainer.procs // p.tensor_parallel_degree, 1)
        product = (
            p.tensor_parallel_degree * p.pipeline_parallel_degree * p.data_parallel_shard_degree
        )
        if product != self.trainer.procs:
            raise ConfigError(
                f"the parallelism degrees multiply to {product} (tensor {p.tensor_parallel_degree}"
                f" x pipeline {p.pipeline_parallel_degree} x data shard "
                f"{p.data_parallel_shard_degree}) but services.trainer.procs is "
                f"{self.trainer.procs}; they must be equal"
            )
        if self.scorer.procs > 1:
            raise ConfigError(
                "services.scorer.procs is a switch (0: score in the loop's process, 1: in "
                "scorer processes); use num_replicas for more"
            )
        wanted = sum(
            getattr(self, n).procs * getattr(self, n).num_replicas
            for n in SERVICES
            if getattr(self, n).with_gpus
        )
        if wanted:
            if gpus_available is None:
                import torch

                gpus_available = torch.cuda.device_count()
            if wanted > gpus_available:
                asking = [n for n in SERVICES if getattr(self, n).with_gpus]
                raise ConfigError(
                    f"{', '.join(asking)} ask for {wanted} GPU(s) (with_gpus: true) but torch "
                    f"sees {gpus_available} on this machine; set with_gpus: false to run on CPU"
                )

    def to_dict(self) -> dict[str, Any]:
        """The placement in the file's shape (what the run config records)."""
        return {
            "model": self.model,
            "parallelism": dataclasses.asdict(self.parallelism),
            "services": {n: dataclasses.asdict(getattr(self, n)) for n in SERVICES},
            "hosts": list(self.hosts),
        }

    def host_index(self, service: str, replica: int = 0) -> int:
        """Which of ``hosts`` a service's processes go on (0 without hosts)."""
        count = max(len(self.hosts), 1)
        spread = (1 + replica) % count
        last = count - 1  # the reference and a critic: frozen or small beside the trainer
        return {
            "trainer": 0,
            "generator": spread,
            "scorer": spread,
            "reference": last,
            "critic": last,
        }[service]


def excerpt(value: Any, limit: int = 60) -> str:
    """A ``repr`` of ``value`` cut to ``limit`` characters: an error quotes a bad file,
    never prints it (``--config /etc/passwd`` must not echo the password file). Built with
    ``reprlib``, which stops early, so a value of shared YAML aliases ("billion laughs":
    10^9 elements in a few hundred bytes) or a self-referencing one is never expanded."""
    short = reprlib.Repr()
    short.maxlevel, short.maxstring, short.maxother, short.maxlong = 3, limit, limit, limit
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 4
    text = short.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        got = (
            f"{len(value)} characters of text"
            if isinstance(value, str)
            else f"{type(value).__name__}: {excerpt(value)}"
        )
        raise ConfigError(f"{where} must be a mapping of keys, got {got}")
    return value


def _known(raw: dict[str, Any], valid: tuple[str, ...], what: str) -> None:
    unknown = sorted(set(raw) - set(valid), key=repr)  # keys of mixed types (1, "a")
    if unknown:
        names = ", ".join(excerpt(k, 40) for k in unknown[:5])
        names += " ..." if len(unknown) > 5 else ""
        raise ConfigError(f"unknown {what} {names}; valid: {', '.join(valid)}")


def _fields(cls: type, raw: Any, where: str) -> Any:
    """An instance of dataclass ``cls`` from ``raw``, every value type-checked."""
    raw = _mapping(raw, where)
    valid = tuple(f.name for f in dataclasses.fields(cls))
    _known(raw, valid, f"key in {where}")
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in raw:
            continue
        value, expected = raw[f.name], type(f.default)
        if type(value) is not expected:  # bool is not an int here, and "2" is not 2
            raise ConfigError(f"{where}.{f.name} must be {expected.__name__}, got {excerpt(value)}")
        values[f.name] = value
    return cls(**values)
